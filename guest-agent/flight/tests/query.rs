//! The query comparison end to end: a real PostgreSQL 15 in a temporary
//! directory, the taxi table loaded with COPY, every client fetching LIMIT N.
//! Needs `apt-get install -y postgresql-15 odbc-postgresql unixodbc
//! unixodbc-dev`; the ODBC clients run `testbed-odbc`, which
//! `common::odbc_binary` builds when no build has left one.

use testbed_flight::query::columns::{ColumnSet, ColumnSetExt};
use testbed_flight::query::{self, QueryClient, QueryRequest};

mod common;

/// Every client, the ODBC ones among them (so testbed-odbc is built).
fn clients() -> Vec<QueryClient> {
    common::odbc_binary();
    vec![
        QueryClient::OdbcRow,
        QueryClient::OdbcBlock,
        QueryClient::TokioPostgres,
        QueryClient::FlightSql,
        QueryClient::FlightSqlRows,
        QueryClient::FlightSqlParquet,
        QueryClient::DatafusionFlightSql,
        QueryClient::DatafusionPgwireTokioPostgres,
        QueryClient::DatafusionPgwireOdbcRow,
        QueryClient::DatafusionPgwireOdbcBlock,
    ]
}

#[test]
fn every_client_fetches_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let args = QueryRequest {
        rows: vec![1, 3000, 70_000],
        table_rows: Some(70_000),
        columns: ColumnSet::Taxi,
        clients: clients(),
        repetitions: 1,
        seed: 11,
        // Smaller than N so batches and ODBC blocks wrap around.
        batch_rows: 4096,
        run_dir: Some(dir.path().to_path_buf()),
        json: false,
        pins: Default::default(),
    };
    let r = query::run(&args).unwrap();
    assert_eq!(r.measurements.len(), 3 * args.clients.len());
    for n in [1u64, 3000, 70_000] {
        let ms: Vec<_> = r.measurements.iter().filter(|m| m.limit == n).collect();
        let want = ColumnSet::Taxi.expected(11, n);
        for m in &ms {
            assert_eq!(m.rows, n, "{:?}", m.client);
            assert_eq!(m.checksum, want, "{:?} at N={n}", m.client);
            assert!(m.matches && m.seconds > 0.0);
        }
    }
    assert!(r.all_match());
    // PostgreSQL was stopped: its pid file is gone.
    assert!(!dir.path().join("pg/data/postmaster.pid").exists());
}

#[test]
#[ignore = "starts PostgreSQL, DataFusion and psqlODBC once per column set (~6 s); ./x test runs it"]
fn every_client_fetches_every_column_set_alike() {
    for columns in [
        ColumnSet::Ints,
        ColumnSet::StringsShort,
        ColumnSet::StringsLong,
    ] {
        let args = QueryRequest {
            rows: vec![2500],
            table_rows: Some(3000),
            columns,
            clients: clients(),
            repetitions: 1,
            seed: 7,
            batch_rows: 1000,
            run_dir: None,
            json: false,
            pins: Default::default(),
        };
        let r = query::run(&args).unwrap();
        let want = columns.expected(7, 2500);
        assert_eq!(r.measurements.len(), args.clients.len());
        for m in &r.measurements {
            assert_eq!(m.rows, 2500, "{:?} {columns:?}", m.client);
            assert_eq!(m.checksum, want, "{:?} {columns:?}", m.client);
        }
        // Another set's rows would not pass.
        assert_ne!(want, ColumnSet::Taxi.expected(7, 2500));
    }
}

#[test]
fn parquet_source_refuses_other_sql_clearly() {
    let err = query::sqlserver::parse_parquet_query("SELECT a FROM nyc_taxi").unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("SELECT * FROM nyc_taxi"), "{err:?}");
    assert_eq!(
        query::sqlserver::parse_parquet_query(" select *  FROM NYC_TAXI limit 5;").unwrap(),
        Some(5)
    );
}

#[test]
fn a_pre_created_run_dir_in_tmp_is_not_used() {
    let victim = tempfile::tempdir().unwrap();
    // The run directory used to be temp_dir/testbed-flight-query-<pid>:
    // another user could create it first, with a symlink inside.
    let planted = std::env::temp_dir().join(format!("testbed-flight-query-{}", std::process::id()));
    std::fs::create_dir(&planted).unwrap();
    std::os::unix::fs::symlink(victim.path(), planted.join("pg")).unwrap();
    let r = query::run(&QueryRequest {
        rows: vec![10],
        table_rows: Some(10),
        columns: ColumnSet::Taxi,
        clients: vec![QueryClient::TokioPostgres],
        repetitions: 1,
        seed: 1,
        batch_rows: 4096,
        run_dir: None,
        json: false,
        pins: Default::default(),
    });
    let _ = std::fs::remove_dir_all(&planted);
    let left: Vec<_> = std::fs::read_dir(victim.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "written through the planted symlink: {left:?}"
    );
    assert!(r.unwrap().all_match());
}

/// PostgreSQL never trusts a connection: without the cluster's password
/// the server refuses it. And it is our child in its own process group,
/// gone once the cluster is dropped.
#[test]
fn postgres_wants_a_password_and_dies_with_its_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let pg = query::pg::PgCluster::start(dir.path()).unwrap();
    let rt = testbed_flight::runtime::runtime(Some(1)).unwrap();
    rt.block_on(query::libpq::connect(&pg.conn_string()))
        .expect("with the password");
    let no_password = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let e = rt
        .block_on(query::libpq::connect(&no_password))
        .expect_err("connected without a password");
    // tokio-postgres gives up when the server asks for a password it lacks.
    assert!(e.to_string().contains("password missing"), "{e}");
    let e = rt
        .block_on(query::libpq::connect(&format!(
            "{no_password} password=guess"
        )))
        .expect_err("connected with a wrong password");
    assert!(
        e.to_string().contains("password authentication failed"),
        "{e}"
    );
    assert!(
        !e.to_string().contains("guess"),
        "the password is shown: {e}"
    );
    let pid_file = std::fs::read_to_string(pg.data_dir.join("postmaster.pid")).unwrap();
    let pid: i32 = pid_file.lines().next().unwrap().parse().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // State, ppid, pgrp.
    assert_eq!(
        fields[1].parse::<u32>().unwrap(),
        std::process::id(),
        "{stat}"
    );
    assert_eq!(fields[2].parse::<i32>().unwrap(), pid, "{stat}");
    drop(pg);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

/// DataFusion behind pgwire asks for the password as PostgreSQL does
/// (SCRAM), and behind Flight SQL runs queries only. The clients'
/// checksum sees the order of the rows: the first 100 rows re-sorted are
/// the same values, and do not pass.
#[test]
fn datafusion_wants_the_password_stays_read_only_and_order_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("nyc_taxi.parquet");
    query::write_parquet(&parquet, ColumnSet::Taxi, 4, 1000).unwrap();
    let rt = testbed_flight::runtime::runtime(Some(2)).unwrap();
    rt.block_on(async {
        let ctx = query::engine::table_context(&parquet, 256).await.unwrap();
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let pgwire = query::pgwire::start(ctx.clone(), any, "postgres", "right")
            .await
            .unwrap();
        let first_100 = "SELECT * FROM nyc_taxi LIMIT 100";
        let right = pgwire.conn_string("postgres", "right");
        let got = query::libpq::fetch(&right, first_100).await.unwrap();
        assert_eq!(got, ColumnSet::Taxi.expected(4, 100));
        for conn in [
            pgwire.conn_string("postgres", "wrong"),
            pgwire.conn_string("someone", "right"),
        ] {
            let e = query::libpq::fetch(&conn, first_100)
                .await
                .expect_err("connected with wrong credentials");
            assert!(e.to_string().contains("password"), "{e}");
        }
        let resorted = "SELECT * FROM (SELECT * FROM nyc_taxi LIMIT 100) ORDER BY fare_amount";
        let got = query::libpq::fetch(&right, resorted).await.unwrap();
        assert_eq!(got.rows, 100);
        assert_ne!(got, ColumnSet::Taxi.expected(4, 100));

        let cfg = testbed_flight::server::ServerConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            settings: Default::default(),
            tls_dir: None,
        };
        let source = query::sqlserver::Source::DataFusion(ctx);
        let flight = query::sqlserver::start(&cfg, source, 256, None)
            .await
            .unwrap();
        let addr = flight.addr.to_string();
        let settings = Default::default();
        let got = query::sqlserver::fetch(&addr, first_100, &settings)
            .await
            .unwrap();
        assert_eq!(got, ColumnSet::Taxi.expected(4, 100));
        for write in ["CREATE TABLE t AS SELECT 1", "DROP TABLE nyc_taxi"] {
            let e = query::sqlserver::fetch(&addr, write, &settings)
                .await
                .expect_err(write);
            let e = e.to_string();
            assert!(
                e.contains("invalid argument") && e.contains("not supported"),
                "{write}: {e}"
            );
        }
        // The table is still there.
        let got = query::sqlserver::fetch(&addr, first_100, &settings)
            .await
            .unwrap();
        assert_eq!(got.rows, 100);
        flight.stop().await.unwrap();
        pgwire.stop().await.unwrap();
    });
}

/// DataFusion hands strings over as Utf8, not as views: arrow-rs's IPC
/// writer sends a sliced view array with all its data buffers, so every
/// Flight message of a long-string batch would carry the whole batch.
#[test]
fn datafusion_serves_strings_as_utf8_not_views() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("nyc_taxi.parquet");
    query::write_parquet(&parquet, ColumnSet::StringsLong, 4, 300).unwrap();
    let rt = testbed_flight::runtime::runtime(Some(2)).unwrap();
    rt.block_on(async {
        let ctx = query::engine::table_context(&parquet, 256).await.unwrap();
        let batches = ctx
            .sql("SELECT * FROM nyc_taxi LIMIT 200")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let schema = batches[0].schema();
        for f in schema.fields() {
            assert_eq!(f.data_type(), &arrow::datatypes::DataType::Utf8, "{f:?}");
        }
        // What the Flight SQL client gets is the generator's rows.
        let mut c = query::taxi::Checksum::default();
        for b in &batches {
            query::taxi::BatchChecksum::add_batch(&mut c, b).unwrap();
        }
        assert_eq!(c, ColumnSet::StringsLong.expected(4, 200));
    });
}

/// Clients on one CPU and servers (ours and PostgreSQL) on another: the
/// run still fetches equal rows, and this thread, which ran the clients,
/// is left on the client's CPU.
#[test]
fn a_pinned_run_fetches_the_same_rows() {
    let cpus = testbed_proc::affinity::this_thread_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("one CPU: nothing to pin apart");
        return;
    }
    let r = query::run(&QueryRequest {
        rows: vec![3000],
        table_rows: Some(3000),
        columns: ColumnSet::StringsShort,
        clients: vec![
            QueryClient::TokioPostgres,
            QueryClient::FlightSql,
            QueryClient::DatafusionFlightSql,
        ],
        repetitions: 1,
        seed: 2,
        batch_rows: 1000,
        run_dir: None,
        json: false,
        pins: testbed_flight::pins::CpuPins {
            client_cpus: Some(cpus[1].to_string()),
            server_cpus: Some(cpus[0].to_string()),
        },
    })
    .unwrap();
    assert!(r.all_match());
    assert_eq!(
        testbed_proc::affinity::this_thread_cpus().unwrap(),
        vec![cpus[1]]
    );
}

/// The binary the ODBC clients spawn is there (built by the test when no
/// build left one) and is the one the library runs.
#[test]
fn the_odbc_clients_binary_is_found_or_built() {
    let bin = common::odbc_binary();
    assert!(bin.is_file(), "{}", bin.display());
    assert_eq!(testbed_flight::query::odbc::binary(), bin);
    let out = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", bin.display(), out.status);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fetch"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
