// The benchmark's figures, their budgets, and the verdict.
import Foundation

/// One measured figure.
struct Figure {
    let key: String
    let label: String
    let value: Double
    let unit: String
    let goal: String
    /// The value must stay at or below this, or the run fails.
    let budget: Double?
}

@MainActor var figures: [Figure] = []

/// Budgets given on the command line (`--budget key=value`), which replace the built-in
/// ones: the gate's own test lowers one to see the run fail.
let budgetOverrides: [String: Double] = {
    var overrides: [String: Double] = [:]
    let args = CommandLine.arguments
    for (i, a) in args.enumerated() where a == "--budget" && i + 1 < args.count {
        let parts = args[i + 1].split(separator: "=", maxSplits: 1)
        if parts.count == 2, let v = Double(parts[1]) { overrides[String(parts[0])] = v }
    }
    return overrides
}()

/// Records a figure; a budget of nil means the figure is reported, not gated.
@MainActor func record(_ key: String, _ label: String, _ value: Double, _ unit: String, goal: String = "",
                       budget: Double? = nil) {
    figures.append(Figure(key: key, label: label, value: value, unit: unit, goal: goal,
                          budget: budgetOverrides[key] ?? budget))
}

/// Prints the figures (a table, or one JSON object with `--json`) and exits: 1 when a
/// figure is over its budget (or could not be measured while it has one), else 0.
@MainActor func finish(note: String = "") -> Never {
    let over = figures.filter { f in f.budget.map { !(f.value <= $0) } ?? false }
    if CommandLine.arguments.contains("--json") {
        let body = figures.map { f -> String in
            let v = f.value.isFinite ? String(format: "%.3f", f.value) : "null"
            return "\"\(f.key)\": \(v)"
        }.joined(separator: ", ")
        print("{\(body), \"over_budget\": [\(over.map { "\"\($0.key)\"" }.joined(separator: ", "))]}")
    } else {
        func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
        print(pad("figure", 60) + pad("value", 14) + pad("goal", 10) + "budget")
        for f in figures {
            let value = String(format: f.value >= 100 ? "%.0f" : "%.2f", f.value) + " " + f.unit
            let budget = f.budget.map { String(format: "%.2f", $0) } ?? ""
            print(pad(f.label, 60) + pad(value, 14) + pad(f.goal, 10) + budget)
        }
        if !note.isEmpty { print(note) }
    }
    fflush(nil)
    if !over.isEmpty {
        FileHandle.standardError.write(Data("over budget: \(over.map(\.key).joined(separator: ", "))\n".utf8))
        exit(1)
    }
    exit(0)
}
