/* Source of fuzz_dwarf's seeds: functions inlined into others, at -O2. */
static inline int square(int x) { return x * x; }
static inline int twice_square(int x) { return 2 * square(x) + 1; }
__attribute__((noinline)) int checkout(int order) { return twice_square(order) / (order - 3); }
int main(int argc, char **argv) { (void)argv; return checkout(argc); }
