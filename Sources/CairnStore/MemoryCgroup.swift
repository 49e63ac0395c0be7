/// Where this process's memory cgroup keeps its files, from `/proc/self/cgroup`: the
/// cgroup v2 directory and the v1 memory-controller directory, each also as the
/// mount's root (inside a cgroup namespace or a container, the mount is the cgroup).
/// Shared by the OOM-kill counter (crash capture) and the memory limit (common
/// properties).
import CairnBase

package struct MemoryCgroup: Sendable {
    /// cgroup v2 directories, most specific first.
    package var v2: [String] = []
    /// cgroup v1 memory-controller directories, most specific first.
    package var v1: [String] = []

    /// Parses the text of `/proc/<pid>/cgroup` (`id:controllers:path` lines).
    package init(procCgroup text: String, root: String = "/sys/fs/cgroup") {
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let path = parts[2] == "/" ? "" : String(parts[2])
            if parts[0] == "0" && parts[1].isEmpty {
                v2 += [root + path, root]
            } else if parts[1].split(separator: ",").contains("memory") {
                v1 += [root + "/memory" + path, root + "/memory"]
            }
        }
    }

    /// This process's, read from `/proc/self/cgroup` (no directories when unreadable).
    package static func current() -> MemoryCgroup {
        MemoryCgroup(procCgroup: SmallFile.text("/proc/self/cgroup") ?? "")
    }

    /// Paths to try, in order: `v2File` in the v2 directories, then `v1File` in the v1 ones.
    package func files(v2 v2File: String, v1 v1File: String) -> [String] {
        v2.map { $0 + "/" + v2File } + v1.map { $0 + "/" + v1File }
    }
}
