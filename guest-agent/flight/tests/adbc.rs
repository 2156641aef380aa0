//! The Flight SQL server with a client nobody here wrote: the ADBC Flight
//! SQL driver from PyPI (`adbc-driver-flightsql`, `adbc-driver-manager`;
//! `./x setup` installs them) runs `tests/adbc_client.py` against
//! `testbed-flight sql-serve` over a real PostgreSQL 15: the server's info,
//! a query whose one batch is larger than gRPC's 4 MiB default message
//! limit, a prepared statement with a bound parameter, the catalog listing
//! and a bad statement; and the same against DataFusion behind that server
//! (`--source datafusion`), the bound parameter included.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int32Type;
use testbed_flight::query::columns::{ColumnSet, ColumnSetExt};
use testbed_flight::query::taxi;

const ROWS: u64 = 60_000;
const SEED: u64 = 4;

fn python() -> String {
    std::env::var("TESTBED_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// `sql-serve` running; stopped (stdin closed) and reaped on drop.
struct Server {
    child: std::process::Child,
    address: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        Self::start_with(dir, &[], ROWS)
    }

    /// With extra `--flag value` pairs, or `$VAR value` environment.
    fn start_with(dir: &Path, extra: &[(&str, &str)], rows: u64) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_testbed-flight"));
        cmd.args([
            "sql-serve",
            "--rows",
            &rows.to_string(),
            "--seed",
            &SEED.to_string(),
        ]);
        for (k, v) in extra {
            match k.strip_prefix('$') {
                Some(var) => cmd.env(var, v),
                None => cmd.args([k, v]),
            };
        }
        let mut child = cmd
            .arg("--run-dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("sql-serve's first line {line:?}: {e}"));
        Server {
            child,
            address: ready["address"].as_str().unwrap().to_string(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Runs the ADBC script against `server` and checks what every source must
/// give: the server's info,
/// the table's schema, every value of the query in order (a batch larger
/// than the driver's 4 MiB limit arrived, so the server cut it), the bad
/// column as the driver's ProgrammingError, and the table listed under
/// `catalog`.`public` with its columns and no engine schemas. Returns the
/// script's output for source-specific checks.
fn adbc_against(server: &Server, catalog: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let ipc = dir.path().join("result.arrow");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/adbc_client.py");
    let o = Command::new(python())
        .arg(&script)
        .arg(format!("grpc://{}", server.address))
        .arg(ROWS.to_string())
        .arg(&ipc)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{} failed (`./x setup` installs adbc-driver-flightsql): {stderr}",
        script.display()
    );
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("{out:#}");

    assert_eq!(out["vendor_name"], "testbed-flight");
    assert!(
        out["table_types"]
            .as_array()
            .unwrap()
            .contains(&"TABLE".into()),
        "{out}"
    );
    let names: Vec<&str> = taxi::COLUMNS.iter().map(|c| c.0).collect();
    assert_eq!(out["table_schema"], serde_json::json!(names));

    assert_eq!(out["query_rows"], ROWS);
    let file = std::fs::File::open(&ipc).unwrap();
    let reader = arrow::ipc::reader::FileReader::try_new(file, None).unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let got = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let want = ColumnSet::Taxi.batch(SEED, 0, ROWS).unwrap();
    assert_eq!(got.num_columns(), want.num_columns());
    for (i, name) in names.iter().enumerate() {
        let w = arrow::compute::cast(want.column(i), got.column(i).data_type()).unwrap();
        assert!(&w == got.column(i), "column {name} differs");
    }

    let err = &out["error"];
    assert_eq!(err["type"], "ProgrammingError", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("no_such_column"),
        "{err}"
    );

    // GetCatalogs, GetDbSchemas, GetTables with columns.
    let table = &out["objects"][catalog]["public"]["nyc_taxi"];
    assert_eq!(table["type"], "TABLE", "{out}");
    assert_eq!(table["columns"], serde_json::json!(names));
    for own in ["pg_catalog", "information_schema"] {
        assert!(
            out["objects"][catalog].get(own).is_none(),
            "the engine's own schemas are not listed: {out}"
        );
    }
    out
}

/// The driver's prepared statement (`passenger_count = $1`), bound with 2
/// and then 3, counted as the generated table counts them.
fn assert_prepared_counts(out: &serde_json::Value) {
    let want = ColumnSet::Taxi.batch(SEED, 0, ROWS).unwrap();
    let passengers = want.column(3).as_primitive::<Int32Type>();
    assert_eq!(taxi::COLUMNS[3].0, "passenger_count");
    for v in [2, 3] {
        let n = (0..passengers.len())
            .filter(|&i| passengers.value(i) == v)
            .count();
        assert!(n > 0);
        assert_eq!(out["prepared_counts"][v.to_string()], n, "{out}");
    }
}

#[test]
fn the_adbc_driver_queries_prepares_and_lists_through_our_flight_sql_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("run"));
    let out = adbc_against(&server, "postgres");
    assert_prepared_counts(&out);
}

/// The same driver against DataFusion behind the same Flight SQL server:
/// queries, the listing, and the prepared statement bound through
/// DataFusion's own parameter types.
#[test]
fn the_adbc_driver_queries_prepares_and_lists_datafusion_through_our_flight_sql_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(&dir.path().join("run"), &[("--source", "datafusion")], ROWS);
    let out = adbc_against(&server, "datafusion");
    assert_prepared_counts(&out);
}

#[test]
fn with_a_user_configured_the_server_refuses_calls_without_its_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        &dir.path().join("run"),
        &[
            ("--user", "bench"),
            ("$TESTBED_FLIGHT_SQL_PASSWORD", "s3cret"),
        ],
        100,
    );
    // The driver handshakes with basic credentials and then sends the
    // bearer token the server answers with.
    let script = r#"
import json, sys
import adbc_driver_flightsql.dbapi as flight_sql
uri = sys.argv[1]
out = {}
def count(**kw):
    with flight_sql.connect(uri, db_kwargs=kw) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM nyc_taxi")
        return cur.fetchone()[0]
for name, kw in [("none", {}), ("wrong", {"username": "bench", "password": "nope"}),
                 ("right", {"username": "bench", "password": "s3cret"})]:
    try:
        out[name] = count(**kw)
    except Exception as e:
        out[name] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"#;
    let o = Command::new(python())
        .args(["-c", script])
        .arg(format!("grpc://{}", server.address))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["right"], 100, "{out}");
    for refused in ["none", "wrong"] {
        let e = out[refused].as_str().unwrap_or_default();
        assert!(
            e.contains("UNAUTHENTICATED") || e.contains("Unauthenticated"),
            "{refused}: {out}"
        );
    }
}
