/*
 * pages.c: letting go of the pages of a TLS library's code that ran once.
 *
 * Loading a TLS library and making its first connection run code that never runs
 * again: the dynamic linker walks the library's relocation and symbol tables, OpenSSL
 * registers every algorithm of its providers, the first handshake parses the trust
 * store. The kernel maps file pages around each page touched (64 KiB at a time), so
 * by then nearly all of libcrypto's 2.5 MiB of code and 0.8 MiB of tables are resident
 * in the process, about 3 MiB that stay counted in its RSS although the connections
 * that follow use a fraction of them.
 *
 * So after a send that started a TLS session, at most once a second, and once more at a
 * send 2 s or more later (client.c, through tls.c's cairn_http__tls_release_if_due: by
 * then the code the connection's sends run has come back, and is split as below), the
 * pages of the read-only segments of the
 * libraries Cairn loaded are unmapped from the process (madvise MADV_DONTNEED). They are
 * clean pages of the files, still in the page cache: code that runs again is mapped
 * back at its first use (a minor fault), exactly as after the kernel reclaimed them
 * under memory pressure. Only what the connections keep using comes back (about
 * 0.9 MiB of libcrypto).
 *
 * The same is done for libraries Cairn links (cairn_http_release_pages_of, called by
 * Cairn's background thread 2.5 s, 3.5 s and 10 s after its start, then every 5
 * minutes, for libzstd, liblmdb and liblzma): their set-up code runs once, and an idle
 * service kept 0.5 MiB of it resident. These are loaded with the executable, so the
 * rule below about libraries loaded before does not apply to them: a service that uses
 * one of them itself refaults what it uses (a minor fault per page or per 64 KiB, as
 * below) after each release. The
 * uprobe window below is then also opened every 5 minutes.
 *
 * Cairn's own code is released at the same times (cairn_http_release_own_pages): the
 * ranges of its functions, which Cairn reads from the symbol table of the file holding
 * them (the executable when it is linked in), and only whole pages inside them and
 * inside a read-only segment of that file.
 *
 * A code page that runs again comes back with its neighbours: the kernel maps the page
 * cache's pages around a fault ("fault-around": 64 KiB from the aligned window's start,
 * or from the mapping's start when that is later), within the mapping that holds the
 * page. So a window that comes back after a release is given finer mappings before it
 * is released again: every other page of it (and the first and last page of the range
 * released, so that its edges do not join the neighbours' mappings) is marked
 * MADV_NOHUGEPAGE, which leaves each page a mapping of its own (two at a range's edge),
 * and a fault then maps the page it needs alone. The mark only forbids huge pages
 * there: code in small pages (the usual) runs as before; a service whose text the
 * kernel put in huge pages loses them in those windows. At 10k events/s over OpenSSL,
 * this keeps about 1.7 MiB of libcrypto's, libzstd's and Cairn's code out of the
 * process that whole windows would have brought.
 *
 * Only windows seen at an earlier release are split (code that ran once stays in whole
 * windows, released). Each page split costs the kernel a mapping, about 200 bytes
 * outside the process's RSS but charged to its memory cgroup: about 800 more at 10k
 * events/s over OpenSSL. At most MAX_SPLIT_WINDOWS windows are split (about 4,300
 * mappings, 0.85 MiB of the kernel's, and a few percent of the default
 * vm.max_map_count); the windows seen are kept in a small table, and a window not yet
 * in it once it is full is neither recorded nor split. A kernel without transparent
 * huge pages refuses the mark (EINVAL): then nothing more is tried, and windows stay
 * whole.
 *
 * What is never touched:
 *   - a library the process had loaded before Cairn's dlopen (the service's own
 *     OpenSSL: its pages are not Cairn's to manage): a back end lists the objects
 *     loaded before its dlopen (`cairn_http__objects_now`) and releases only those
 *     its dlopen added (`cairn_http__objects_added`);
 *   - a page that is no longer the file's own: /proc/self/pagemap says for each page
 *     whether it is a page-cache page; one a debugger's breakpoint or a uprobe wrote
 *     (copied on write, now anonymous) is kept, with its change. The check comes just
 *     before the madvise, not with it: a uprobe attached in between (microseconds, at
 *     most once a second, and only after a new connection or 2 s after one, or at
 *     Cairn's own release times) would leave this process
 *     for that page, and fire again once re-attached;
 *   - writable segments and the RELRO range (relocated data), and a library with text
 *     relocations (its code pages were written by the dynamic linker);
 *   - anything, while a debugger is attached (TracerPid), or when /proc/self/pagemap
 *     cannot be read.
 */
#define _GNU_SOURCE 1
#include "http_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The dynamic linker's entry for the shared object that contains `address`, or NULL. */
static struct link_map *object_map(const void *address)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (!address || !dladdr1(address, &info, (void **)&map, RTLD_DL_LINKMAP)) return NULL;
    return map;
}

/* The load address of the shared object that contains `address`, or 0. */
static uintptr_t object_base(const void *address)
{
    struct link_map *map = object_map(address);
    return map ? map->l_addr : 0;
}

static int record_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    cairn_http__objects *objects = arg;
    if (objects->count == sizeof objects->base / sizeof *objects->base) {
        objects->overflow = 1;
        return 1;
    }
    objects->base[objects->count++] = info->dlpi_addr;
    return 0;
}

void cairn_http__objects_now(cairn_http__objects *objects)
{
    objects->count = 0;
    objects->overflow = 0;
    dl_iterate_phdr(record_object, objects);
}

size_t cairn_http__objects_added(const cairn_http__objects *before, const void *const *addresses, size_t count,
                                 const void **added)
{
    size_t n = 0;
    if (before->overflow) return 0;
    for (size_t i = 0; i < count; i++) {
        uintptr_t base = object_base(addresses[i]);
        if (!base) continue;
        int known = 0;
        for (size_t j = 0; j < before->count && !known; j++) known = before->base[j] == base;
        for (size_t j = 0; j < n && !known; j++) known = object_base(added[j]) == base;
        if (!known) added[n++] = addresses[i];
    }
    return n;
}

/* Whether a tracer (a debugger) is attached to this process. Unknown counts as yes. */
static int traced(void)
{
    FILE *file = fopen("/proc/self/status", "re");
    if (!file) return 1;
    char line[256];
    int tracer = 1;
    while (fgets(line, sizeof line, file)) {
        if (strncmp(line, "TracerPid:", 10) == 0) {
            tracer = atoi(line + 10) != 0;
            break;
        }
    }
    fclose(file);
    return tracer;
}

/* The loaded object dl_iterate_phdr is asked to find, by load address and name. */
typedef struct found_object {
    ElfW(Addr) base;
    const char *name;
    const ElfW(Phdr) *phdr;
    ElfW(Half) phnum;
} found_object;

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    found_object *want = arg;
    if (info->dlpi_addr != want->base || !info->dlpi_name || strcmp(info->dlpi_name, want->name) != 0) return 0;
    want->phdr = info->dlpi_phdr;
    want->phnum = info->dlpi_phnum;
    return 1;
}

/* Whether the object's dynamic section asks for text relocations. */
static int has_text_relocations(const found_object *object)
{
    for (ElfW(Half) i = 0; i < object->phnum; i++) {
        if (object->phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(object->base + object->phdr[i].p_vaddr);
        for (; dyn->d_tag != DT_NULL; dyn++) {
            if (dyn->d_tag == DT_TEXTREL) return 1;
            if (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL)) return 1;
        }
    }
    return 0;
}

/* Unmaps [run, stop); returns the bytes unmapped. */
static size_t unmap(uintptr_t run, uintptr_t stop)
{
    return stop > run && madvise((void *)run, stop - run, MADV_DONTNEED) == 0 ? stop - run : 0;
}

/* The kernel's fault-around window: aligned, and the default size (a setting only
 * debugfs shows). With another size, splits are coarser or finer than needed, never
 * wrong. */
#define FAULT_WINDOW ((uintptr_t)64 << 10)

/* The windows released before: each slot holds a window's number (address /
 * FAULT_WINDOW, under 2^31 for user addresses) in its upper 31 bits; SPLIT once the
 * window was split; SPLIT_NOW when that was in the pass that last saw it; and that
 * pass in the lower 31 bits. 0 is an empty slot. Filled to 3/4 at most. */
#define SEEN_SLOTS 1024
#define SPLIT ((uint64_t)1 << 32)
#define SPLIT_NOW ((uint64_t)1 << 31)
#define PASS_MASK ((uint64_t)SPLIT_NOW - 1)
/* The most windows split (see the file's comment). */
#define MAX_SPLIT_WINDOWS 256
static uint64_t seen_windows[SEEN_SLOTS];
static size_t seen_count, split_count;
static int split_refused; /* the kernel refused the mark: no more tries */
static uint32_t release_pass;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

/* Starts a release pass (under seen_lock): windows seen by an earlier pass count as
 * having come back. */
static void begin_pass(void)
{
    release_pass = release_pass >= PASS_MASK ? 1 : release_pass + 1;
}

/* Records that window `w` is being released in this pass (under seen_lock); returns 1
 * when its pages are to be split now: it came back since an earlier pass released it,
 * and was not split before (nor is the table full, or MAX_SPLIT_WINDOWS reached). A
 * window met again in the same pass (in another range or segment) gets the same
 * answer. (A pass another thread begins meanwhile makes this one's later windows count
 * as its own: a window this pass met before then counts as come back, and is split a
 * release early, which costs a few mappings and nothing else.) */
static int split_now(uint64_t w)
{
    if (w >= (uint64_t)1 << 31) return 0;
    size_t i = (size_t)((w * 0x9E3779B97F4A7C15ull) >> 54) % SEEN_SLOTS;
    for (size_t probes = 0; probes < SEEN_SLOTS; probes++, i = (i + 1) % SEEN_SLOTS) {
        uint64_t slot = seen_windows[i];
        if (slot == 0) {
            if (seen_count >= SEEN_SLOTS / 4 * 3) return 0;
            seen_windows[i] = w << 33 | release_pass;
            seen_count++;
            return 0;
        }
        if (slot >> 33 != w) continue;
        if ((slot & PASS_MASK) == release_pass) return (slot & SPLIT_NOW) != 0;
        int now = !(slot & SPLIT) && split_count < MAX_SPLIT_WINDOWS;
        if (now) split_count++;
        seen_windows[i] = w << 33 | (slot & SPLIT) | (now ? SPLIT | SPLIT_NOW : 0) | release_pass;
        return now;
    }
    return 0;
}

/* Marks the page at `at` MADV_NOHUGEPAGE (under seen_lock); after the kernel refused
 * one (EINVAL: no transparent huge pages), does nothing. */
static void mark(uintptr_t at, size_t page)
{
    if (!split_refused && madvise((void *)at, page, MADV_NOHUGEPAGE) != 0 && errno == EINVAL) split_refused = 1;
}

/* Before [run, stop) is unmapped: every window it meets that is to be split now gets a
 * mapping per page inside [start, end), the part of the segment that may be split
 * (every odd page marked MADV_NOHUGEPAGE, and the first and last page of [start, end);
 * see the file's comment). The whole window is split at once, the pages of it that are
 * not released too (another range's, or someone else's functions between Cairn's):
 * their mappings get finer, their contents stay. */
static void split_windows_that_came_back(uintptr_t run, uintptr_t stop, uintptr_t start, uintptr_t end,
                                         size_t page)
{
    pthread_mutex_lock(&seen_lock);
    for (uintptr_t window = run & ~(FAULT_WINDOW - 1); window < stop && !split_refused; window += FAULT_WINDOW) {
        if (split_now(window / FAULT_WINDOW)) {
            uintptr_t from = window < start ? start : window;
            uintptr_t to = window + FAULT_WINDOW > end || window + FAULT_WINDOW < window ? end : window + FAULT_WINDOW;
            for (uintptr_t at = from; at < to; at += page)
                if ((at / page) & 1 || at == start || at + page == end) mark(at, page);
        }
        if (window + FAULT_WINDOW < window) break;
    }
    pthread_mutex_unlock(&seen_lock);
}

/* Splits what came back in [run, stop) (inside [lo, hi), the part of its segment that
 * may be split) and unmaps it; returns the bytes unmapped. */
static size_t release_run(uintptr_t run, uintptr_t stop, uintptr_t lo, uintptr_t hi, size_t page)
{
    split_windows_that_came_back(run, stop, lo, hi, page);
    return unmap(run, stop);
}

/* Unmaps the present page-cache pages of [start, end) (page-aligned), run by run, as
 * /proc/self/pagemap (open as `pagemap`) describes them, splitting what came back inside
 * [lo, hi) (which holds [start, end)); pages after an entry that cannot be read are
 * kept. Returns the bytes unmapped. */
static size_t release_range(int pagemap, uintptr_t start, uintptr_t end, uintptr_t lo, uintptr_t hi, size_t page)
{
    size_t released = 0;
    uint64_t entries[512];
    uintptr_t run = 0; /* start of the current run of releasable pages, 0 for none */
    uintptr_t at = start;
    while (at < end) {
        size_t want = (end - at) / page;
        if (want > sizeof entries / sizeof *entries) want = sizeof entries / sizeof *entries;
        ssize_t got = pread(pagemap, entries, want * sizeof *entries, (off_t)(at / page * sizeof *entries));
        if (got < 0 && errno == EINTR) continue;
        if (got < (ssize_t)sizeof *entries) break;
        for (size_t i = 0; i < (size_t)got / sizeof *entries; i++, at += page) {
            /* Bit 63: present; bit 61: a file page (or shared anonymous). */
            int releasable = (entries[i] >> 63 & 1) && (entries[i] >> 61 & 1);
            if (releasable && !run) run = at;
            if (!releasable && run) {
                released += release_run(run, at, lo, hi, page);
                run = 0;
            }
        }
    }
    if (run) released += release_run(run, at, lo, hi, page);
    return released;
}

/* Finds `object` (base and name set) among the loaded objects: 0 when it is not there
 * or its code pages were written by the dynamic linker (text relocations). */
static int find_releasable(found_object *object)
{
    return dl_iterate_phdr(find_object, object) && !has_text_relocations(object);
}

/* Unmaps the releasable pages of `object`'s read-only segments that lie in [from, to)
 * (whole pages of a segment only: a page it shares with a neighbour is kept; never the
 * RELRO range), with /proc/self/pagemap open as `pagemap`. Returns the bytes unmapped. */
static size_t release_segments(const found_object *object, uintptr_t from, uintptr_t to, int pagemap, size_t page)
{
    uintptr_t relro_start = 0, relro_end = 0;
    for (ElfW(Half) i = 0; i < object->phnum; i++) {
        if (object->phdr[i].p_type != PT_GNU_RELRO) continue;
        relro_start = (object->base + object->phdr[i].p_vaddr) & ~(uintptr_t)(page - 1);
        relro_end = (object->base + object->phdr[i].p_vaddr + object->phdr[i].p_memsz + page - 1) & ~(uintptr_t)(page - 1);
    }
    size_t released = 0;
    for (ElfW(Half) i = 0; i < object->phnum; i++) {
        const ElfW(Phdr) *ph = &object->phdr[i];
        if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W)) continue;
        uintptr_t start = (object->base + ph->p_vaddr + page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t end = (object->base + ph->p_vaddr + ph->p_filesz) & ~(uintptr_t)(page - 1);
        /* What may be split: the segment's whole pages, but for the RELRO range. */
        uintptr_t lo = start, hi = end;
        /* [from, to) rounded inwards to whole pages (without wrapping near the top). */
        uintptr_t low = from & ~(uintptr_t)(page - 1), high = to & ~(uintptr_t)(page - 1);
        if (low != from) low = low > UINTPTR_MAX - page ? high : low + page;
        if (start < low) start = low;
        if (end > high) end = high;
        if (end <= start) continue;
        if (relro_end > relro_start && start < relro_end && end > relro_start) {
            if (start < relro_start) released += release_range(pagemap, start, relro_start, lo, relro_start, page);
            start = relro_end;
            if (lo < relro_end) lo = relro_end;
        }
        if (end > start) released += release_range(pagemap, start, end, lo, hi, page);
    }
    return released;
}

/* Unmaps the releasable pages of the read-only segments of the shared object that
 * contains `address` (see the file's comment), with /proc/self/pagemap open as
 * `pagemap`. Returns the bytes unmapped. */
static size_t release_object(const void *address, int pagemap, size_t page)
{
    struct link_map *map = object_map(address);
    if (!map || !map->l_name || !map->l_name[0]) return 0; /* not in a shared object (the executable has an empty name) */
    found_object object = {.base = map->l_addr, .name = map->l_name};
    if (!find_releasable(&object)) return 0;
    return release_segments(&object, 0, UINTPTR_MAX, pagemap, page);
}

/* /proc/self/pagemap, open, and a release pass begun; -1 (nothing to be done) when it
 * cannot be read or a debugger is attached. `page` gets the page size. */
static int open_pagemap(size_t *page)
{
    if (traced()) return -1;
    long page_size = sysconf(_SC_PAGESIZE);
    *page = page_size > 0 ? (size_t)page_size : 4096;
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap >= 0) {
        pthread_mutex_lock(&seen_lock);
        begin_pass();
        pthread_mutex_unlock(&seen_lock);
    }
    return pagemap;
}

size_t cairn_http__release_code_pages(const void *const *addresses, size_t count)
{
    size_t page = 4096;
    int pagemap = count ? open_pagemap(&page) : -1;
    if (pagemap < 0) return 0;
    size_t released = 0;
    for (size_t i = 0; i < count; i++) released += release_object(addresses[i], pagemap, page);
    close(pagemap);
    return released;
}

size_t cairn_http_release_pages_of(const char *const *symbols, size_t count)
{
    size_t released = 0;
    uintptr_t done[16];
    size_t n = 0;
    for (size_t i = 0; symbols && i < count && n < sizeof done / sizeof *done; i++) {
        const void *address = symbols[i] ? dlsym(RTLD_DEFAULT, symbols[i]) : NULL;
        struct link_map *map = object_map(address);
        if (!map || !map->l_name || !map->l_name[0]) continue; /* not found, or the executable */
        uintptr_t base = map->l_addr;
        int seen = 0;
        for (size_t j = 0; j < n && !seen; j++) seen = done[j] == base;
        if (seen) continue;
        done[n++] = base;
        /* Held open while its program headers are read and its pages released: a
         * library the service dlopened and closes meanwhile stays until then (one
         * unloaded before this took it is not found and left alone). */
        void *pin = dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!pin) continue;
        if (object_base(address) == base) released += cairn_http__release_code_pages(&address, 1);
        dlclose(pin);
    }
    return released;
}

int cairn_http_own_object(char *path, size_t cap, uintptr_t *bias)
{
    struct link_map *map = object_map((const void *)cairn_http_own_object);
    if (!map || !path || cap == 0 || !bias) return 0;
    const char *name = map->l_name && map->l_name[0] ? map->l_name : "/proc/self/exe";
    if (strlen(name) >= cap) return 0;
    memcpy(path, name, strlen(name) + 1);
    *bias = map->l_addr;
    return 1;
}

size_t cairn_http_release_own_pages(const uintptr_t *bounds, size_t count)
{
    struct link_map *map = object_map((const void *)cairn_http_release_own_pages);
    if (!bounds || count == 0 || !map) return 0;
    found_object object = {.base = map->l_addr, .name = map->l_name ? map->l_name : ""};
    if (!find_releasable(&object)) return 0;
    size_t page = 4096;
    int pagemap = open_pagemap(&page);
    if (pagemap < 0) return 0;
    size_t released = 0;
    for (size_t i = 0; i < count; i++) {
        if (bounds[2 * i] < bounds[2 * i + 1])
            released += release_segments(&object, bounds[2 * i], bounds[2 * i + 1], pagemap, page);
    }
    close(pagemap);
    return released;
}
