// cairn-bench-baseline: the benchmark's host service without Cairn, a service that uses
// Foundation: the same program as cairn-bench-host with every Cairn call left out, so
// that the difference between the two is what Cairn costs (see BenchHost).
import BenchFoundation
import BenchHost

runBaselineHost(warmUp: useFoundationLikeAService)
