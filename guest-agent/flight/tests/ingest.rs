//! Ingest end to end: a real PostgreSQL 15, our Flight SQL server over it,
//! and every ingest client (our Flight SQL bulk ingest, ADBC's
//! `adbc_ingest` from PyPI, binary COPY, batched INSERT, psqlODBC arrays)
//! writing the generated rows into a fresh table, read back and compared
//! with the generator. Needs what tests/query.rs and tests/adbc.rs need
//! (`common::odbc_binary` builds testbed-odbc when no build has left one).

use testbed_flight::ingest::{self, IngestClient, IngestRequest};
use testbed_flight::query::columns::ColumnSet;

mod common;

/// Every client, psqlODBC's among them (so testbed-odbc is built).
fn all_clients() -> Vec<IngestClient> {
    common::odbc_binary();
    vec![
        IngestClient::FlightSqlIngest,
        IngestClient::AdbcIngest,
        IngestClient::CopyBinary,
        IngestClient::InsertBatched,
        IngestClient::OdbcArray,
    ]
}

#[test]
fn every_client_leaves_the_generated_table() {
    for columns in [ColumnSet::Taxi, ColumnSet::StringsLong] {
        let args = IngestRequest {
            rows: vec![2100],
            columns,
            clients: all_clients(),
            repetitions: 1,
            seed: 3,
            // Batches, statements and ODBC arrays all wrap around.
            batch_rows: 1000,
            insert_rows: 400,
            run_dir: None,
            json: false,
            pins: Default::default(),
        };
        let ms = ingest::run(&args).unwrap();
        assert_eq!(ms.len(), 5);
        for m in &ms {
            assert!(m.matches, "{:?} {columns:?}: {m:?}", m.client);
            assert_eq!(m.rows, 2100);
            assert!(m.seconds > 0.0 && m.value_bytes > 0);
            assert!(
                m.client_cpu_s.is_some() && m.server_cpu_s.is_some(),
                "{m:?}"
            );
        }
    }
}

#[test]
fn the_server_offers_appending_only_and_says_so() {
    use arrow_flight::sql::{
        CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
    };
    let ask =
        |if_exists: TableExistsOption, if_not_exist: TableNotExistOption| CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: if_not_exist.into(),
                if_exists: if_exists.into(),
            }),
            table: "nyc_taxi".into(),
            ..Default::default()
        };
    assert!(
        testbed_flight::query::sqlserver::ingest_options(&ask(
            TableExistsOption::Append,
            TableNotExistOption::Fail
        ))
        .is_ok()
    );
    let e = testbed_flight::query::sqlserver::ingest_options(&ask(
        TableExistsOption::Replace,
        TableNotExistOption::Create,
    ))
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    assert!(e.message().contains("REPLACE"), "{e:?}");
    let mut temporary = ask(TableExistsOption::Append, TableNotExistOption::Fail);
    temporary.temporary = true;
    assert!(testbed_flight::query::sqlserver::ingest_options(&temporary).is_err());
}
