import Foundation
import Glibc

/// An address that black-holes connections, as a dead route or a firewall that drops
/// packets does: a listener on `[::1]:port` whose accept queue is full and never
/// drained, so the kernel drops every further SYN and a connect neither succeeds nor
/// fails until its own timeout. (A refused port answers at once, which is not the case
/// Happy Eyeballs is for.) Closed when released.
public final class BlackHole {
    private var fds: [Int32] = []
    /// The port, on `::1`.
    public let port: Int

    /// Black-holes `[::1]:port` (the port of a service on 127.0.0.1 may be reused: the
    /// listener is IPv6-only).
    public init(ipv6LoopbackPort port: Int) throws {
        self.port = port
        let listener = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw CollectorError.control("socket: errno \(errno)") }
        fds.append(listener)
        var on: Int32 = 1
        setsockopt(listener, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.address(port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
            }
        }
        guard bound == 0, listen(listener, 0) == 0 else {
            close(listener)
            throw CollectorError.control("bind or listen [::1]:\(port): errno \(errno)")
        }
        // Fill the accept queue (and its SYN queue) with connections never accepted.
        for _ in 0..<8 {
            let filler = socket(AF_INET6, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard filler >= 0 else { continue }
            fds.append(filler)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
        usleep(200_000)
    }

    deinit { fds.forEach { close($0) } }

    private static func address(_ port: Int) -> sockaddr_in6 {
        var a = sockaddr_in6()
        a.sin6_family = sa_family_t(AF_INET6)
        a.sin6_port = in_port_t(UInt16(port).bigEndian)
        a.sin6_addr = in6addr_loopback
        return a
    }
}
