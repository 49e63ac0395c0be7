import Foundation

/// Resident KiB of this process's mapping of the file `path`, from /proc/self/smaps
/// (read to the end: /proc files report a size of 0); nil when it is not mapped.
public func residentKB(ofMapping path: String) -> Int? {
    guard let fh = FileHandle(forReadingAtPath: "/proc/self/smaps"), let data = try? fh.readToEnd() else { return nil }
    var inMapping = false
    for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
        if line.first?.isHexDigit == true && line.contains("-") && line.contains(" ") {
            inMapping = line.hasSuffix(path)
        } else if inMapping && line.hasPrefix("Rss:") {
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
        }
    }
    return nil
}
