"""pyarrow Flight client for the testbed's bulk benchmark.

Runs DoGet or DoPut streams against a server with the testbed semantics
(ours or pyarrow_server.py) and prints one JSON line per stream and a
summary line, in the format of `testbed-flight bench --json`. With
--verify it checks row counts and checksums and exits non-zero on a
mismatch.

Timer boundaries are those of `testbed-flight bench` (and of the C++
arrow-flight-benchmark): GetFlightInfo before the clock; each stream's
connect inside it. Retention is the same too: by default each batch is
dropped once counted; --keep-batches keeps them all (read_all) and asks
the server to keep what a DoPut sends.
"""

import argparse
import json
import resource
import sys
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight

from pyarrow_server import SCHEMA, checksum, make_batch, stream_table

MB = float(1 << 20)

# gRPC channel arguments of the "tuned" profile: what gRPC C++ exposes of
# testbed-flight's tuning (32 MiB stream window, 1 MiB frames). "defaults"
# passes none.
TUNED_CHANNEL_ARGS = [
    ("grpc.http2.lookahead_bytes", 32 << 20),
    ("grpc.http2.max_frame_size", 1 << 20),
]


def expected_checksum(rows_per_batch, records, seed):
    batch = make_batch(rows_per_batch, seed)
    full, tail = divmod(records, rows_per_batch)
    return (checksum(batch) * full + checksum(batch.slice(0, tail))) % 2**64


def connect(a):
    if a.server.startswith("unix:"):
        location = f"grpc+unix://{a.server[len('unix:'):]}"
    else:
        location = f"grpc+{'tls' if a.tls_ca else 'tcp'}://{a.server}"
    kwargs = {}
    if a.tls_ca:
        with open(a.tls_ca, "rb") as f:
            kwargs["tls_root_certs"] = f.read()
        kwargs["override_hostname"] = "localhost"
    if a.profile == "tuned":
        kwargs["generic_options"] = TUNED_CHANNEL_ARGS
    return flight.FlightClient(location, **kwargs)


def get_stream(a, ticket, stream, out):
    t0 = time.perf_counter()
    client = connect(a)
    reader = client.do_get(ticket)
    records = batches = 0
    total = 0
    if a.verify:
        if reader.schema != SCHEMA:
            raise SystemExit(f"schema mismatch: {reader.schema}")
        for chunk in reader:
            records += chunk.data.num_rows
            batches += 1
            total += checksum(chunk.data)
    elif a.keep_batches:
        # Whole stream in C++, every batch kept (pyarrow's usual way).
        table = reader.read_all()
        records = table.num_rows
        batches = len(table.to_batches())
    else:
        # Each batch dropped once counted, as testbed-flight does.
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            records += chunk.data.num_rows
            batches += 1
    seconds = time.perf_counter() - t0
    table = None
    out[stream] = (records, batches, seconds, total % 2**64)


def put_stream(a, stream, out):
    table = stream_table(a.batch, a.records_per_stream, a.seed)
    cmd = json.dumps({"stream": stream, "verify": a.verify, "keep": a.keep_batches}).encode()
    t0 = time.perf_counter()
    client = connect(a)
    writer, meta = client.do_put(flight.FlightDescriptor.for_command(cmd), SCHEMA)
    writer.write_table(table, max_chunksize=a.batch)
    writer.done_writing()
    buf = meta.read()
    writer.close()
    seconds = time.perf_counter() - t0
    summary = json.loads(buf.to_pybytes()) if buf is not None else {}
    out[stream] = (
        summary.get("records", table.num_rows),
        summary.get("batches", table.num_rows // a.batch),
        seconds,
        summary.get("checksum"),
    )


def warm_up(a):
    """One untimed stream of one batch on a connection of its own, before
    the clock (as testbed-flight bench does): lazy set-up on either side
    stays out of the timer."""
    client = connect(a)
    if a.op == "get":
        cmd = {
            "streams": 1, "records_per_stream": a.batch, "records_per_batch": a.batch,
            "compression": a.compression, "seed": a.seed,
        }
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd).encode()))
        client.do_get(info.endpoints[0].ticket).read_all()
    else:
        table = stream_table(a.batch, a.batch, a.seed)
        cmd = json.dumps({"stream": 0, "verify": False}).encode()
        writer, meta = client.do_put(flight.FlightDescriptor.for_command(cmd), SCHEMA)
        writer.write_table(table, max_chunksize=a.batch)
        writer.done_writing()
        meta.read()
        writer.close()
    client.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("--server", required=True)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--records-per-stream", type=int, default=200980)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tls-ca")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--keep-batches", action="store_true")
    # "library" is ours with tonic's own settings; pyarrow is as under "defaults".
    ap.add_argument("--profile", choices=["tuned", "defaults", "library"], default="tuned")
    a = ap.parse_args()

    warm_up(a)
    out = {}
    threads = []
    t0 = time.perf_counter()
    # CPU of the whole process (gRPC's threads too) over the timed span.
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    if a.op == "get":
        cmd = {
            "streams": a.streams,
            "records_per_stream": a.records_per_stream,
            "records_per_batch": a.batch,
            "compression": a.compression,
            "seed": a.seed,
        }
        control = connect(a)
        info = control.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd).encode()))
        control.close()
        if len(info.endpoints) != a.streams:
            raise SystemExit(f"{len(info.endpoints)} endpoints for {a.streams} streams")
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        for s, ep in enumerate(info.endpoints):
            threads.append(threading.Thread(target=get_stream, args=(a, ep.ticket, s, out)))
    else:
        for s in range(a.streams):
            threads.append(threading.Thread(target=put_stream, args=(a, s, out)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    if len(out) != a.streams:
        raise SystemExit("a stream failed (see the exception above)")

    want = expected_checksum(a.batch, a.records_per_stream, a.seed) if a.verify else None
    failed = []
    total_bytes = 0
    for s in range(a.streams):
        records, batches, seconds, csum = out[s]
        total_bytes += records * 32
        line = {
            "type": "stream", "op": a.op, "stream": s, "records": records, "batches": batches,
            "bytes": records * 32, "seconds": seconds, "mb_per_s": records * 32 / MB / seconds,
        }
        if a.verify:
            line["checksum"] = csum
            if records != a.records_per_stream or csum != want:
                failed.append(f"stream {s}: {records} records checksum {csum}, want "
                              f"{a.records_per_stream} / {want}")
        print(json.dumps(line))
    print(json.dumps({
        "type": "summary", "op": a.op, "streams": a.streams, "threads": a.streams,
        "records_per_stream": a.records_per_stream, "records_per_batch": a.batch,
        "compression": a.compression, "tls": a.tls_ca is not None,
        "transport": "unix" if a.server.startswith("unix:") else "tcp",
        "wall_seconds": wall, "bytes": total_bytes,
        "records": sum(out[s][0] for s in range(a.streams)),
        "mb_per_s": total_bytes / MB / wall,
        "cpu_user_s": cpu1.ru_utime - cpu0.ru_utime,
        "cpu_system_s": cpu1.ru_stime - cpu0.ru_stime,
        "settings": {
            "implementation": "pyarrow", "pyarrow": pa.__version__, "profile": a.profile,
            "channel_args": dict(TUNED_CHANNEL_ARGS) if a.profile == "tuned" else {},
            "keep_batches": a.keep_batches,
        },
    }), flush=True)
    if failed:
        print("verification failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
