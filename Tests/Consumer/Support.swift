// What the README's first snippet (main.swift, copied from the README verbatim by
// build.sh) takes from the service around it: a tenant, an outgoing request, a call.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

let tenantID = "tenant-7"
nonisolated(unsafe) var request = URLRequest(url: URL(string: "http://127.0.0.1:9/charge")!)

func charge() throws {}
