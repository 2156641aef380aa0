"""pyarrow Flight server with the testbed's bulk-benchmark semantics.

Same commands and tickets as the Rust server (JSON), same batch (the value
formula of data.rs), so the Rust client can run against it unchanged and
the two servers can be compared on equal payloads.

Prints one JSON line {"listening": "IP:PORT" | "unix:/path"} once serving.
"""

import argparse
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

SCHEMA = pa.schema([pa.field(f"f{i}", pa.int64(), nullable=False) for i in range(4)])


def u64(x):
    return pa.scalar(x % 2**64, pa.uint64())


def make_batch(rows, seed):
    """Row r, column c: ((4r + c) * 0x9E3779B1 + seed * 0x85EBCA77) mod 2^64 & (2^31 - 1).

    pyarrow's unchecked integer kernels wrap like Rust's wrapping_* ops."""
    r4 = pc.multiply(pa.array(range(rows), pa.uint64()), u64(4))
    cols = []
    for c in range(4):
        h = pc.add(pc.multiply(pc.add(r4, u64(c)), u64(0x9E3779B1)), u64(seed * 0x85EBCA77))
        cols.append(pc.bit_wise_and(h, u64(0x7FFFFFFF)).cast(pa.int64()))
    return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)


def checksum(batch):
    """Wrapping u64 sum of all values, as data.rs::checksum."""
    total = 0
    for col in batch.columns:
        total += pc.sum(col).as_py() or 0
    return total % 2**64


def stream_table(rows_per_batch, records, seed):
    """The stream as a table of references to one batch (no copies)."""
    batch = make_batch(rows_per_batch, seed)
    full, tail = divmod(records, rows_per_batch)
    batches = [batch] * full
    if tail:
        batches.append(batch.slice(0, tail))
    return pa.Table.from_batches(batches, schema=SCHEMA)


def ipc_options(compression):
    return pa.ipc.IpcWriteOptions(compression=None if compression in (None, "none") else compression)


class BenchServer(flight.FlightServerBase):
    def get_flight_info(self, context, descriptor):
        cmd = json.loads(descriptor.command)
        endpoints = []
        for s in range(cmd["streams"]):
            ticket = {
                "stream": s,
                "records": cmd["records_per_stream"],
                "records_per_batch": cmd["records_per_batch"],
                "compression": cmd.get("compression", "none"),
                "seed": cmd.get("seed", 1),
            }
            endpoints.append(flight.FlightEndpoint(json.dumps(ticket).encode(), []))
        total = cmd["streams"] * cmd["records_per_stream"]
        return flight.FlightInfo(SCHEMA, descriptor, endpoints, total, total * 32)

    def do_get(self, context, ticket):
        t = json.loads(ticket.ticket)
        table = stream_table(t["records_per_batch"], t["records"], t.get("seed", 1))
        return flight.RecordBatchStream(table, options=ipc_options(t.get("compression")))

    def do_put(self, context, descriptor, reader, writer):
        cmd = json.loads(descriptor.command) if descriptor.command else {}
        if reader.schema != SCHEMA:
            raise flight.FlightServerError(f"schema mismatch: expected {SCHEMA}, got {reader.schema}")
        records = batches = 0
        total = 0
        if cmd.get("verify"):
            for chunk in reader:
                records += chunk.data.num_rows
                batches += 1
                total += checksum(chunk.data)
        elif cmd.get("keep"):
            table = reader.read_all()
            records = table.num_rows
            batches = len(table.to_batches())
        else:
            # Each batch dropped once counted, as testbed-flight's server.
            for chunk in reader:
                records += chunk.data.num_rows
                batches += 1
        summary = {"records": records, "batches": batches, "bytes": records * 32}
        if cmd.get("verify"):
            summary["checksum"] = total % 2**64
        writer.write(pa.py_buffer(json.dumps(summary).encode()))

    def do_exchange(self, context, descriptor, reader, writer):
        writer.begin(reader.schema)
        for chunk in reader:
            writer.write_batch(chunk.data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", default="127.0.0.1:0", help="IP:PORT or unix:/path")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    tls = a.tls_cert is not None
    if a.addr.startswith("unix:"):
        path = a.addr[len("unix:"):]
        location = f"grpc+unix://{path}"
    else:
        host, port = a.addr.rsplit(":", 1)
        location = f"grpc+{'tls' if tls else 'tcp'}://{host}:{port}"
    certs = None
    if tls:
        with open(a.tls_cert, "rb") as c, open(a.tls_key, "rb") as k:
            certs = [(c.read(), k.read())]
    server = BenchServer(location, tls_certificates=certs)
    shown = f"unix:{path}" if a.addr.startswith("unix:") else f"{host}:{server.port}"
    # pyarrow's server takes no gRPC channel arguments: library defaults.
    settings = {"implementation": "pyarrow", "pyarrow": pa.__version__, "profile": "defaults"}
    print(json.dumps({"listening": shown, "tls": tls, "settings": settings}), flush=True)
    server.serve()


if __name__ == "__main__":
    sys.exit(main())
