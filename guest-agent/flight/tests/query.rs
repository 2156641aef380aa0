//! The query comparison end to end: a real PostgreSQL 15 in a temporary
//! directory, the taxi table loaded with COPY, every client fetching LIMIT N.
//! Needs `apt-get install -y postgresql-15 odbc-postgresql unixodbc
//! unixodbc-dev`; the ODBC clients need `--features odbc`.

use testbed_flight::query::{self, QueryArgs, QueryClient};

fn clients() -> Vec<QueryClient> {
    let mut c = vec![
        QueryClient::Libpq,
        QueryClient::FlightSql,
        QueryClient::FlightSqlParquet,
    ];
    if cfg!(feature = "odbc") {
        c.splice(0..0, [QueryClient::OdbcRow, QueryClient::OdbcBlock]);
    }
    c
}

#[test]
fn every_client_fetches_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let args = QueryArgs {
        rows: vec![1, 3000, 70_000],
        table_rows: Some(70_000),
        clients: clients(),
        repetitions: 1,
        seed: 11,
        // Smaller than N so batches and ODBC blocks wrap around.
        batch_rows: 4096,
        run_dir: Some(dir.path().to_path_buf()),
        json: false,
    };
    let r = query::run(&args).unwrap();
    assert_eq!(r.measurements.len(), 3 * args.clients.len());
    for n in [1u64, 3000, 70_000] {
        let ms: Vec<_> = r.measurements.iter().filter(|m| m.limit == n).collect();
        let want = query::taxi::expected(11, n);
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
fn parquet_source_refuses_other_sql_clearly() {
    let err = query::sqlserver::parse_parquet_query("SELECT a FROM nyc_taxi").unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("SELECT * FROM nyc_taxi"), "{err:?}");
    assert_eq!(
        query::sqlserver::parse_parquet_query(" select *  FROM NYC_TAXI limit 5;").unwrap(),
        Some(5)
    );
}
