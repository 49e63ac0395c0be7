// cairn-bench-host-essentials: the benchmark's host service with Cairn, a service on
// FoundationEssentials alone (see BenchHost and CairnBenchHost for the modes).
import BenchHost
import CairnBenchHost

runCairnHost(warmUp: useEssentialsLikeAService)
