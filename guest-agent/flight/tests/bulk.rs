//! The bulk server and client over real sockets on 127.0.0.1 / Unix sockets.

use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::{FlightData, FlightDescriptor};
use testbed_flight::bench::{self, BenchConfig};
use testbed_flight::codec::BatchEncoder;
use testbed_flight::data::{PutCommand, make_batch};
use testbed_flight::server::{self, RunningServer, ServerConfig};
use testbed_flight::settings::{Compression, Op, TransportSettings};

async fn start(addr: &str, tls_dir: Option<std::path::PathBuf>) -> RunningServer {
    server::start(&ServerConfig {
        addr: addr.parse().unwrap(),
        settings: TransportSettings::default(),
        tls_dir,
    })
    .await
    .unwrap()
}

fn cfg(server: &RunningServer, op: Op) -> BenchConfig {
    BenchConfig {
        server: server.addr.to_string(),
        op,
        streams: 2,
        records_per_stream: 10_000,
        records_per_batch: 4096,
        verify: true,
        ..BenchConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_put_exchange_move_every_record_and_checksum() {
    let s = start("127.0.0.1:0", None).await;
    for op in [Op::Get, Op::Put, Op::Exchange] {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let r = bench::run(&BenchConfig {
                compression,
                ..cfg(&s, op)
            })
            .await
            .unwrap_or_else(|e| panic!("{op:?} {compression:?}: {e}"));
            assert_eq!(r.records, 20_000, "{op:?}");
            assert_eq!(r.bytes, 20_000 * 32);
            assert_eq!(r.per_stream.len(), 2);
            for st in &r.per_stream {
                // 2 full batches of 4096 and a tail of 1808.
                assert_eq!(st.batches, 3, "{op:?}");
                assert!(st.checksum.is_some() && st.mb_per_s > 0.0);
                assert_eq!(st.latencies_ns.len(), if op == Op::Get { 3 } else { 0 });
            }
        }
    }
    s.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_and_tls_work_together_and_apart() {
    let dir = tempfile::tempdir().unwrap();
    let tls = testbed_flight::tls::generate(&dir.path().join("tls")).unwrap();
    let sock = dir.path().join("f.sock");
    for (addr, with_tls) in [
        (format!("unix:{}", sock.display()), false),
        (format!("unix:{}", sock.display()), true),
        ("127.0.0.1:0".to_string(), true),
    ] {
        let s = start(&addr, with_tls.then(|| dir.path().join("tls"))).await;
        let r = bench::run(&BenchConfig {
            tls_ca: with_tls.then(|| tls.ca_cert.clone()),
            ..cfg(&s, Op::Get)
        })
        .await
        .unwrap_or_else(|e| panic!("{addr} tls={with_tls}: {e}"));
        assert_eq!(r.records, 20_000);
        assert_eq!(r.tls, with_tls);
        // A plaintext client cannot talk to a TLS server: a clear error.
        if with_tls {
            let err = bench::run(&BenchConfig {
                connect_timeout: Duration::from_secs(2),
                ..cfg(&s, Op::Get)
            })
            .await
            .unwrap_err();
            assert!(err.to_string().contains(&s.addr.to_string()), "{err}");
        }
        s.stop().await.unwrap();
    }
    assert!(!sock.exists(), "socket file removed on stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_server_is_a_clear_error_naming_the_address() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let t0 = std::time::Instant::now();
    let err = bench::run(&BenchConfig {
        server: addr.clone(),
        connect_timeout: Duration::from_secs(2),
        ..BenchConfig::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!("cannot connect to Flight server at {addr}")),
        "{err}"
    );
    assert!(err.to_lowercase().contains("refused"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    let err = bench::run(&BenchConfig {
        server: "unix:/nonexistent/flight.sock".into(),
        connect_timeout: Duration::from_secs(2),
        ..BenchConfig::default()
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("unix:/nonexistent/flight.sock"), "{err}");
}

/// Sends `messages` as one DoPut and returns the status the server answers.
async fn raw_put(s: &RunningServer, messages: Vec<FlightData>) -> tonic::Status {
    let mut c = bench::client(
        &s.addr,
        None,
        &TransportSettings::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let res = async {
        let mut st = c
            .do_put(futures::stream::iter(messages))
            .await?
            .into_inner();
        while st.message().await?.is_some() {}
        Ok::<_, tonic::Status>(())
    }
    .await;
    res.expect_err("the server must reject this upload")
}

fn first_message(enc: &BatchEncoder, schema: &Schema) -> FlightData {
    let cmd = serde_json::to_vec(&PutCommand {
        stream: 7,
        verify: true,
        keep: false,
    })
    .unwrap();
    enc.schema(schema)
        .with_descriptor(FlightDescriptor::new_cmd(cmd))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_ipc_and_schema_mismatch_fail_that_call_only() {
    let s = start("127.0.0.1:0", None).await;
    let mut enc = BatchEncoder::new(Compression::None).unwrap();
    let schema = testbed_flight::data::schema();
    let good = enc.encode(&make_batch(1024, 1).unwrap()).unwrap();

    // Garbage where the IPC header should be.
    let junk = FlightData::new()
        .with_data_header(vec![0xAB; 64])
        .with_data_body(vec![1u8; 128]);
    let st = raw_put(&s, vec![first_message(&enc, &schema), good.clone(), junk]).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(
        st.message().contains("stream 7") && st.message().contains("corrupt IPC"),
        "{st:?}"
    );

    // A valid header whose body is cut short.
    let mut short = good.clone();
    short.data_body = short.data_body.slice(0..100);
    let st = raw_put(&s, vec![first_message(&enc, &schema), short]).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(st.message().contains("corrupt IPC record batch"), "{st:?}");

    // Three columns, one of them a string: not the benchmark schema.
    let other = Schema::new(vec![
        Field::new("f0", DataType::Int64, false),
        Field::new("f1", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]);
    let st = raw_put(&s, vec![first_message(&enc, &other)]).await;
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    assert!(
        st.message().contains("schema mismatch") && st.message().contains("name: Utf8"),
        "{st:?}"
    );

    // A bad ticket is rejected too, and the server still serves everyone.
    let mut c = bench::client(
        &s.addr,
        None,
        &TransportSettings::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let st = c
        .do_get(arrow_flight::Ticket::new("not json"))
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::InvalidArgument);
    for op in [Op::Get, Op::Put] {
        let r = bench::run(&cfg(&s, op)).await.unwrap();
        assert_eq!(r.records, 20_000);
    }
    s.stop().await.unwrap();
}

#[test]
fn binary_serves_and_benches_with_json_lines() {
    use std::process::{Command, Stdio};
    let bin = env!("CARGO_BIN_EXE_testbed-flight");
    let srv = testbed_flight::pyarrow::ChildServer::spawn(
        {
            let mut c = Command::new(bin);
            c.args(["serve", "--addr", "127.0.0.1:0"]);
            c
        },
        Duration::from_secs(20),
    )
    .unwrap();
    let out = Command::new(bin)
        .args(["bench", "--server", &srv.addr, "--streams", "2"])
        .args([
            "--records-per-stream",
            "5000",
            "--batch",
            "1000",
            "--json",
            "--verify",
        ])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["type"], "stream");
    assert_eq!(lines[0]["latencies_ns"].as_array().unwrap().len(), 5);
    assert_eq!(lines[2]["type"], "summary");
    assert_eq!(lines[2]["records"], 10_000);
    assert_eq!(lines[2]["settings"]["max_message_bytes"], 1 << 30);

    let out = Command::new(bin)
        .args([
            "bench",
            "--server",
            "127.0.0.1:1",
            "--connect-timeout-secs",
            "2",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to Flight server at 127.0.0.1:1"),
        "{err}"
    );
}

/// The `--long` options a clap help text lists, in order: option lines are
/// indented less than their descriptions.
fn options(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.len() - l.trim_start().len() < 8)
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match l.strip_prefix('-') {
                Some(r) if !r.starts_with('-') => r.split_once(", ")?.1,
                _ => l,
            };
            l.starts_with("--").then(|| {
                l.split([' ', '=', '<', '['])
                    .next()
                    .unwrap_or(l)
                    .to_string()
            })
        })
        .collect()
}

/// The binary's `serve --help` (what `testbed flight serve --help` runs)
/// has the options of the library's clap definition (moved here from
/// orchestrator/tests/one_cli.rs when the CLI stopped linking this crate).
#[test]
fn binary_serve_help_has_the_options_of_the_library_definition() {
    use clap::Subcommand;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_testbed-flight"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let ours = options(&String::from_utf8(out.stdout).unwrap());
    for o in ["--addr", "--tls-dir", "--runtime-threads", "--help"] {
        assert!(ours.iter().any(|x| x == o), "no {o} in {ours:?}");
    }
    let mut lib = testbed_flight::FlightCommand::augment_subcommands(clap::Command::new(env!(
        "CARGO_PKG_NAME"
    )));
    let serve = lib
        .find_subcommand_mut("serve")
        .expect("serve subcommand")
        .render_help()
        .to_string();
    assert_eq!(ours, options(&serve));
}
