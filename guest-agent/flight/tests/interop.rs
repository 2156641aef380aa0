//! pyarrow's Flight client against our server, and our client against a
//! pyarrow Flight server. Needs pyarrow (`pip install pyarrow`): without it
//! these tests fail, on purpose, with that hint.

use std::process::Command;
use std::time::Duration;

use testbed_flight::bench::{self, BenchConfig};
use testbed_flight::pyarrow::{self, Scripts};
use testbed_flight::server::{self, ServerConfig};
use testbed_flight::settings::{Op, TransportSettings};

fn python() -> String {
    let py = pyarrow::python();
    if let Err(e) = pyarrow::check(&py) {
        panic!("{e}");
    }
    py
}

fn runtime() -> tokio::runtime::Runtime {
    testbed_flight::runtime::runtime(Some(2)).unwrap()
}

#[test]
fn pyarrow_client_against_our_server() {
    let py = python();
    let scripts = Scripts::write().unwrap();
    let rt = runtime();
    let s = rt
        .block_on(server::start(&ServerConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            settings: TransportSettings::default(),
            tls_dir: None,
        }))
        .unwrap();
    for op in ["get", "put"] {
        let mut cmd = Command::new(&py);
        cmd.arg(scripts.client())
            .arg(op)
            .args(["--server", &s.addr.to_string()])
            .args([
                "--streams",
                "2",
                "--records-per-stream",
                "10000",
                "--batch",
                "4096",
            ])
            .arg("--verify");
        // The script exits non-zero on a count or checksum mismatch.
        let lines = pyarrow::run_json_lines(cmd, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("pyarrow {op}: {e}"));
        let streams: Vec<_> = lines.iter().filter(|l| l["type"] == "stream").collect();
        assert_eq!(streams.len(), 2, "{lines:?}");
        for st in streams {
            assert_eq!(st["records"], 10_000);
            assert!(st["checksum"].as_u64().is_some());
        }
    }
    rt.block_on(s.stop()).unwrap();
}

#[test]
fn our_client_against_pyarrow_server() {
    let py = python();
    let scripts = Scripts::write().unwrap();
    let srv = pyarrow::start_server(&py, &scripts, "127.0.0.1:0", None).unwrap();
    let rt = runtime();
    for op in [Op::Get, Op::Put, Op::Exchange] {
        let r = rt
            .block_on(bench::run(&BenchConfig {
                server: srv.addr.clone(),
                op,
                streams: 2,
                records_per_stream: 10_000,
                records_per_batch: 4096,
                verify: true,
                ..BenchConfig::default()
            }))
            .unwrap_or_else(|e| panic!("{op:?} against pyarrow: {e}"));
        assert_eq!(r.records, 20_000);
        assert!(r.per_stream.iter().all(|s| s.checksum.is_some()));
    }
}

#[test]
fn our_client_against_pyarrow_server_over_tls_and_unix() {
    let py = python();
    let scripts = Scripts::write().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tls = testbed_flight::tls::generate(dir.path()).unwrap();
    let rt = runtime();
    let sock = dir.path().join("py.sock");
    for (addr, with_tls) in [
        ("127.0.0.1:0".to_string(), true),
        (format!("unix:{}", sock.display()), false),
    ] {
        let srv =
            pyarrow::start_server(&py, &scripts, &addr, with_tls.then_some(dir.path())).unwrap();
        let r = rt
            .block_on(bench::run(&BenchConfig {
                server: srv.addr.clone(),
                streams: 1,
                records_per_stream: 5000,
                verify: true,
                tls_ca: with_tls.then(|| tls.ca_cert.clone()),
                ..BenchConfig::default()
            }))
            .unwrap_or_else(|e| panic!("{addr} tls={with_tls}: {e}"));
        assert_eq!(r.records, 5000);
    }
}
