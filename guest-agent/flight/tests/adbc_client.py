"""The ADBC Flight SQL driver (adbc-driver-flightsql from PyPI, a client
nobody here wrote) against `testbed-flight sql-serve`: the server's info,
a query, a prepared statement bound twice, a catalog listing and a bad
statement. Prints one JSON object; writes the query's result as an Arrow
IPC file for the Rust test to compare with the generated table.

usage: adbc_client.py URI LIMIT IPC_PATH
"""

import json
import sys

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow as pa
import pyarrow.ipc

uri, limit, ipc_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {}
# gRPC's default receive limit (the driver raises its own to 16 MiB).
options = {adbc_driver_flightsql.DatabaseOptions.WITH_MAX_MSG_SIZE.value: str(4 << 20)}
with flight_sql.connect(uri, db_kwargs=options) as conn:
    info = conn.adbc_get_info()
    out["vendor_name"] = info.get("vendor_name")
    out["vendor_version"] = info.get("vendor_version")
    out["table_types"] = conn.adbc_get_table_types()
    out["table_schema"] = conn.adbc_get_table_schema("nyc_taxi").names

    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM nyc_taxi LIMIT {limit}")
        table = cur.fetch_arrow_table()
        with pa.OSFile(ipc_path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        out["query_rows"] = table.num_rows
        out["query_bytes"] = table.nbytes

        # A parameter makes the driver prepare, bind (DoPut) and execute.
        sql = "SELECT count(*) AS n FROM nyc_taxi WHERE passenger_count = $1"
        counts = {}
        for value in (2, 3):
            cur.execute(sql, parameters=(value,))
            counts[str(value)] = cur.fetchone()[0]
        out["prepared_counts"] = counts

        try:
            cur.execute("SELECT no_such_column FROM nyc_taxi")
            cur.fetchall()
            out["error"] = None
        except Exception as e:  # the driver's DB-API error class is the point
            out["error"] = {"type": type(e).__name__, "message": str(e)}

    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    listing = {}
    for cat in objects:
        schemas = {}
        for s in cat["catalog_db_schemas"] or []:
            schemas[s["db_schema_name"]] = {
                t["table_name"]: {
                    "type": t["table_type"],
                    "columns": [c["column_name"] for c in t["table_columns"] or []],
                }
                for t in s["db_schema_tables"] or []
            }
        listing[cat["catalog_name"]] = schemas
    out["objects"] = listing

print(json.dumps(out))
