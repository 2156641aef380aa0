//! Random input on the host side of the agent protocol: whatever bytes a
//! guest sends — real messages with hostile contents, NaNs, garbage,
//! escape sequences, overlong lines, truncated streams — the session must
//! not panic, must end, and must keep only what it checked.
//!
//! Runs for TESTBED_FUZZ_SECS seconds (default 2; `./x test` gives 20). A failure
//! prints arbtest's seed: add it to `REGRESSIONS` to keep it.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Cursor;
use std::time::Duration;

use arbitrary::Unstructured;
use testbed::execution::executor::PointOutcome;
use testbed::execution::executor::session::Session;
use testbed::machine::qemu::channel::Channel;
use testbed::planning::plan::Point;
use testbed_agent::protocol::{self, GuestMsg, Hello, SampleChunk};
use testbed_agent::workload::Workload;
use testbed_agent::workload::fault::{FaultMode, FaultParams};

/// Seeds that once found a bug.
const REGRESSIONS: &[u64] = &[];

fn budget() -> Duration {
    let secs = std::env::var("TESTBED_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(2);
    Duration::from_secs(secs)
}

fn point() -> Point {
    Point {
        point: 0,
        rep: 0,
        params: BTreeMap::new(),
        workload: Workload::Fault(FaultParams {
            mode: FaultMode::Error,
            after_s: 0.0,
            size: 1000,
        }),
        seed: 1,
        vm_vcpus: None,
        boot_group: 0,
    }
}

const JOB: u64 = 7;

/// Text with the characters that break things: controls, escapes, quotes,
/// bidi overrides, long runs.
fn nasty_string(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let pieces = [
        "",
        "lat",
        "\x1b[2J",
        "\x1b]0;t\x07",
        "\"",
        "\\",
        "\n",
        "\u{202e}",
        "k-y",
        "é",
        "\0",
    ];
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=4)? {
        if u.ratio(1, 3)? {
            s.push_str(&u.arbitrary::<String>()?);
        } else {
            s.push_str(u.choose(&pieces)?);
        }
    }
    if u.ratio(1, 50)? {
        s.push_str(&"x".repeat(u.int_in_range(100..=5000)?));
    }
    Ok(s)
}

fn value(u: &mut Unstructured<'_>) -> arbitrary::Result<f64> {
    Ok(match u.int_in_range(0..=5)? {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => -0.0,
        3 => f64::MAX,
        _ => u.arbitrary()?,
    })
}

fn chunk(u: &mut Unstructured<'_>) -> arbitrary::Result<SampleChunk> {
    let mut tags = BTreeMap::new();
    for _ in 0..u.int_in_range(0..=20)? {
        tags.insert(nasty_string(u)?, nasty_string(u)?);
    }
    let n = u.int_in_range(0..=300)?;
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        values.push(value(u)?);
    }
    Ok(SampleChunk {
        job_id: if u.ratio(9, 10)? { JOB } else { u.arbitrary()? },
        metric: nasty_string(u)?,
        unit: nasty_string(u)?,
        thread: u.arbitrary()?,
        first_seq: u.arbitrary()?,
        tags,
        values,
    })
}

fn message(u: &mut Unstructured<'_>) -> arbitrary::Result<GuestMsg> {
    Ok(match u.int_in_range(0..=7)? {
        0 => GuestMsg::Hello(Hello {
            protocol: if u.ratio(3, 4)? {
                protocol::PROTOCOL_VERSION
            } else {
                u.arbitrary()?
            },
            nonce: if u.ratio(3, 4)? {
                "n0nce".into()
            } else {
                nasty_string(u)?
            },
            agent_version: nasty_string(u)?,
            uname: nasty_string(u)?,
            kernel_cmdline: nasty_string(u)?,
            uptime_ms: u.arbitrary()?,
            ncpus: u.arbitrary()?,
            mem_total_kib: u.arbitrary()?,
            modules_loaded: vec![nasty_string(u)?],
            devices: BTreeMap::from([(nasty_string(u)?, nasty_string(u)?)]),
            net: None,
        }),
        1 => GuestMsg::Heartbeat {
            seq: u.arbitrary()?,
            uptime_ms: u.arbitrary()?,
        },
        2 => GuestMsg::Log {
            line: nasty_string(u)?,
        },
        3 | 4 => GuestMsg::Samples(chunk(u)?),
        5 => {
            let mut summary = BTreeMap::new();
            for _ in 0..u.int_in_range(0..=5)? {
                summary.insert(nasty_string(u)?, serde_json::json!(nasty_string(u)?));
            }
            GuestMsg::JobDone {
                job_id: JOB,
                summary,
            }
        }
        6 => GuestMsg::JobFailed {
            job_id: JOB,
            error: nasty_string(u)?,
        },
        _ => GuestMsg::Bye,
    })
}

/// What a guest says: messages, and now and then bytes that are not one.
fn stream(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(0..=40)? {
        match u.int_in_range(0..=9)? {
            0 => {
                let junk: Vec<u8> = u.arbitrary()?;
                out.extend_from_slice(&junk);
                out.push(b'\n');
            }
            1 if u.ratio(1, 20)? => {
                // Longer than any message may be.
                out.resize(out.len() + protocol::MAX_LINE + 10, b'{');
                out.push(b'\n');
            }
            2 => {
                // A message cut short.
                let mut m = Vec::new();
                protocol::send(&mut m, &message(u)?).unwrap();
                let cut = u.int_in_range(0..=m.len())?;
                out.extend_from_slice(&m[..cut]);
            }
            _ => protocol::send(&mut out, &message(u)?).unwrap(),
        }
    }
    Ok(out)
}

fn session(bytes: Vec<u8>, spill: &std::path::Path) -> Session<'static> {
    Session {
        channel: Channel::from_parts(Cursor::new(bytes), Box::new(std::io::sink())),
        // The stream is all there is: once it is read, the guest is gone.
        is_dead: Box::new(|| Some("the guest is gone".into())),
        heartbeat_timeout: Duration::from_secs(5),
        spill_dir: spill.to_path_buf(),
    }
}

fn check(u: &mut Unstructured<'_>, spill: &std::path::Path) -> arbitrary::Result<()> {
    let bytes = stream(u)?;
    let mut s = session(bytes, spill);
    let _ = s.handshake("n0nce", Duration::from_secs(5));
    let no_limits = testbed::planning::spec::Limits::default();
    match s.run_point(
        JOB,
        &point(),
        &BTreeMap::new(),
        Duration::from_secs(5),
        &no_limits,
    ) {
        Ok(PointOutcome::Done {
            samples, summary, ..
        }) => {
            // Only what passed the checks is kept: count it back.
            let mut n = 0;
            for c in samples.chunks().unwrap() {
                let c = c.unwrap();
                assert!(c.values.iter().all(|v| v.is_finite()));
                assert!(c.tags.len() <= 16);
                n += c.values.len() as u64;
            }
            assert_eq!(n, samples.summary.values);
            assert!(summary.len() <= 1000);
        }
        Ok(PointOutcome::Failed { error }) => {
            assert!(error.len() <= 4 * 4100, "an error of {} bytes", error.len());
            assert!(!error.contains('\x1b'), "an escape reached the error");
        }
        Err(fatal) => {
            let text = fatal.to_string();
            assert!(!text.contains('\x1b'), "an escape reached a fatal error");
        }
    }
    drop(s);
    // Nothing of a point is left once its outcome is dropped.
    let left: Vec<_> = std::fs::read_dir(spill).unwrap().flatten().collect();
    assert!(left.is_empty(), "spill files left: {left:?}");
    Ok(())
}

#[test]
fn random_guest_output_never_panics_and_keeps_only_checked_samples() {
    let spill = tempfile::tempdir().unwrap();
    for seed in REGRESSIONS {
        arbtest::arbtest(|u| check(u, spill.path())).seed(*seed);
    }
    let runs = Cell::new(0u64);
    arbtest::arbtest(|u| {
        runs.set(runs.get() + 1);
        check(u, spill.path())
    })
    .budget(budget());
    println!(
        "protocol fuzz: {} inputs in {:?} without a failure",
        runs.get(),
        budget()
    );
}
