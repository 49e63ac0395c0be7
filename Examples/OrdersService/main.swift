// orders-service: a small service using Cairn, for `make demo`.
//
// It is configured the way services are, from CAIRN_* variables (CAIRN_APP_ID,
// CAIRN_UPLOAD_URL, CAIRN_DATA_DIR, ...). It handles a few orders, each in a span, with
// breadcrumbs and events; with `--crash` the last order is malformed and the service
// traps (index out of range) the way a real bug would. The next start reports that
// crash, symbolicated, and how the run ended.
import Cairn
import Foundation

struct Order {
    var id: Int
    var items: [Double]
    var customerEmail: String
}

struct OrderService {
    let cairn: Cairn

    /// The bug: assumes every order has at least three items.
    @inline(never) func shippingWeight(_ order: Order) -> Double {
        order.items[0] + order.items[1] + order.items[2]
    }

    func handle(_ order: Order) {
        cairn.withSpan("handle_order") {
            cairn.breadcrumb("handling order \(order.id)", category: "orders")
            let total = order.items.reduce(0, +)
            cairn.track("order_placed", properties: [
                "order_id": .int(Int64(order.id)), "items": .int(Int64(order.items.count)),
                "total": .double(total), "customer_email": .string(order.customerEmail),
            ])
            let weight = shippingWeight(order)
            cairn.track("order_shipped", properties: ["order_id": .int(Int64(order.id)), "weight": .double(weight)])
        }
    }
}

/// Writes a line to stdout at once (print's buffer would be lost when the service
/// crashes with its output going to a pipe).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let crash = CommandLine.arguments.contains("--crash")
// Telemetry never stops the service: a bad option gives a disabled SDK and a note.
let cairn = Cairn.startOrDisabled(.fromEnvironment())
say("orders-service: session \(cairn.sessionID)")
let service = OrderService(cairn: cairn)
var orders = [Order(id: 101, items: [9.5, 3, 12], customerEmail: "jane.doe@example.com"),
              Order(id: 102, items: [1, 1, 1, 4], customerEmail: "sam@example.org")]
if crash { orders.append(Order(id: 103, items: [20], customerEmail: "lee@example.net")) }
for order in orders {
    say("orders-service: order \(order.id)")
    service.handle(order)
}
cairn.shutdown(timeout: .seconds(10))
say("orders-service: clean shutdown")
