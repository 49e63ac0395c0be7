// cairn-bench-baseline-essentials: cairn-bench-host-essentials without Cairn (see
// BenchHost): what a service on FoundationEssentials alone is before Cairn.
import BenchHost

runBaselineHost(warmUp: useEssentialsLikeAService)
