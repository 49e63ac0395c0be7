// cairn-bench-host: the benchmark's host service with Cairn, a service that uses
// Foundation (see BenchHost and CairnBenchHost for the modes).
import BenchFoundation
import CairnBenchHost

runCairnHost(warmUp: useFoundationLikeAService)
