// What the README's other snippets take from the code around them (copied next to each
// of them by make_package.py): a data directory, an API key, a host name, and where
// previous runs' events are stored.
import Foundation

let dataDirectory = NSTemporaryDirectory() + "/cairn-readme-snippet"
let dataDir = dataDirectory
let apiKey = "readme-key"
let hostName = "readme-host"

func store(_ events: [[UInt8]]) throws {}
