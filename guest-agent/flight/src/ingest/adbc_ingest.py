"""ADBC's bulk ingest (adbc-driver-flightsql from PyPI, a client nobody
here wrote): `adbc_ingest` of an Arrow IPC file's rows into TABLE over
Flight SQL (CommandStatementIngest), appending. The file is read before
the timer starts; the timer runs from connect to the ingest's end. Prints
one JSON line: rows, seconds, cpu_s (this process, same span).

usage: adbc_ingest.py URI TABLE IPC_PATH
"""

import json
import resource
import sys
import time

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow.ipc

uri, table_name, ipc_path = sys.argv[1], sys.argv[2], sys.argv[3]
with pyarrow.ipc.open_file(ipc_path) as f:
    data = f.read_all()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


t0, c0 = time.perf_counter(), cpu()
with flight_sql.connect(uri, autocommit=True) as conn:
    with conn.cursor() as cur:
        rows = cur.adbc_ingest(table_name, data, mode="append")
seconds, cpu_s = time.perf_counter() - t0, cpu() - c0
print(json.dumps({"rows": rows, "seconds": seconds, "cpu_s": cpu_s}))
