#!/usr/bin/env python3
"""Decodes OTLP export requests with the official definitions (opentelemetry-proto),
strictly, and prints each as JSON for the tests to read.

    otlp_decode.py logs|traces|metrics protobuf|json FILE...

Strict means:
  - protobuf: the bytes parse, and serialising the message again gives the same bytes
    (no unknown field, no non-canonical encoding, every string valid UTF-8);
  - json: the document parses with unknown fields refused, after the OTLP exception
    (trace and span ids as hex, not base64) is undone, and the ids are hex of the
    right length.
Each FILE's message is printed on one line as JSON: the protobuf JSON mapping with the
original field names, ids as lowercase hex. Exit status 1, with the reason on stderr,
when one does not decode.
"""
import base64
import json
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

ID_FIELDS = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def hex_ids_to_base64(node, path):
    """OTLP/JSON writes ids as hex; the protobuf JSON mapping reads bytes as base64."""
    if isinstance(node, dict):
        for key, value in list(node.items()):
            if key in ID_FIELDS and isinstance(value, str):
                raw = bytes.fromhex(value)
                if len(raw) != ID_FIELDS[key] or value != value.lower():
                    raise ValueError(f"{path}.{key}: {value!r} is not {ID_FIELDS[key]} bytes of lowercase hex")
                node[key] = base64.b64encode(raw).decode()
            else:
                hex_ids_to_base64(value, f"{path}.{key}")
    elif isinstance(node, list):
        for k, value in enumerate(node):
            hex_ids_to_base64(value, f"{path}[{k}]")


def ids_to_hex(node):
    if isinstance(node, dict):
        for key, value in list(node.items()):
            if key in ("trace_id", "span_id", "parent_span_id") and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                ids_to_hex(value)
    elif isinstance(node, list):
        for value in node:
            ids_to_hex(value)


def decode(signal, encoding, data):
    message = {"logs": logs_service_pb2.ExportLogsServiceRequest,
               "traces": trace_service_pb2.ExportTraceServiceRequest,
               "metrics": metrics_service_pb2.ExportMetricsServiceRequest}[signal]()
    if encoding == "protobuf":
        message.ParseFromString(data)
        again = message.SerializeToString(deterministic=True)
        if again != data:
            raise ValueError(f"not canonical: {len(data)} bytes read, {len(again)} written again "
                             f"(first difference at {next((i for i, (a, b) in enumerate(zip(data, again)) if a != b), min(len(data), len(again)))})")
    else:
        document = json.loads(data.decode("utf-8"))
        hex_ids_to_base64(document, "$")
        json_format.ParseDict(document, message, ignore_unknown_fields=False)
    out = json_format.MessageToDict(message, preserving_proto_field_name=True)
    ids_to_hex(out)
    return out


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("logs", "traces", "metrics") or sys.argv[2] not in ("protobuf", "json"):
        print(__doc__, file=sys.stderr)
        return 2
    for path in sys.argv[3:]:
        with open(path, "rb") as f:
            data = f.read()
        try:
            print(json.dumps(decode(sys.argv[1], sys.argv[2], data), sort_keys=True))
        except Exception as e:  # noqa: BLE001 - any failure to decode is the verdict
            print(f"{path}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
