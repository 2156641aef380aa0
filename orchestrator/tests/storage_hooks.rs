//! The storage hooks end to end: builds the patched kernels through the CLI
//! (`testbed kernel build vm-hooks`, cached by content hash, so a warm run
//! skips it), boots them under TCG (KVM where it works) and runs the hook
//! specs of experiments/bpf-storage/. Ignored by default (cold kernel
//! builds take ~20 min each on 2 cores; `./x test` includes ignored tests):
//! `cargo test -p testbed --test storage_hooks -- --ignored --nocapture`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::host_load::wait_for_quiet_host;

/// One VM (or kernel build) at a time: two cores cannot host more.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn testbed(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(args)
        .output()
        .expect("testbed runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spec(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments/bpf-storage")
        .join(name)
}

/// Builds (or finds cached) kernel `name`; returns its cache directory.
fn kernel(name: &str) -> PathBuf {
    let o = testbed(&["kernel", "build", name]);
    assert!(o.status.success(), "kernel build {name}: {}", text(&o));
    let cache = std::env::var_os("TESTBED_CACHE").map_or_else(
        || Path::new(&std::env::var("HOME").unwrap()).join(".cache/testbed"),
        PathBuf::from,
    );
    // The newest cache entry of that name.
    let mut dirs: Vec<(u64, PathBuf)> = std::fs::read_dir(cache.join("kernels"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(e.path().join("meta.json")).ok()?)
                    .ok()?;
            (meta["name"] == name).then(|| (meta["created_unix"].as_u64().unwrap_or(0), e.path()))
        })
        .collect();
    dirs.sort();
    dirs.pop().expect("a cache entry for the kernel").1
}

struct Run {
    dir: PathBuf,
    manifest: serde_json::Value,
    _tmp: tempfile::TempDir,
}

impl Run {
    fn points(&self) -> Vec<&serde_json::Value> {
        self.manifest["points"].as_array().unwrap().iter().collect()
    }
    fn console(&self) -> String {
        std::fs::read_to_string(self.dir.join("console.log")).unwrap()
    }
}

fn run_spec(name: &str) -> Run {
    run_spec_at(&spec(name))
}

fn run_spec_at(path: &Path) -> Run {
    run_spec_with(path, &[])
}

/// `testbed run` of the spec with more arguments; every point must pass.
fn run_spec_with(path: &Path, args: &[&str]) -> Run {
    let name = path.display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut argv = vec![
        "run",
        path.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ];
    argv.extend_from_slice(args);
    let o = testbed(&argv);
    assert!(o.status.success(), "{name}: {}", text(&o));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "complete", "{name}: {}", text(&o));
    for p in manifest["points"].as_array().unwrap() {
        assert_eq!(p["ok"], true, "{name}: point failed: {}", p["error"]);
    }
    Run {
        dir,
        manifest,
        _tmp: tmp,
    }
}

fn num(p: &serde_json::Value, key: &str) -> f64 {
    p["summary"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key} in {}", p["summary"]))
}

fn accel_note(run: &Run) -> String {
    format!(
        "accelerator {}: {}",
        run.manifest["accel"]["used"].as_str().unwrap_or("?"),
        run.manifest["timing_note"].as_str().unwrap_or("")
    )
}

/// Rows of each engine in samples.parquet, read by pyarrow (independent).
fn samples_per_engine(run: &Run, metric: &str) -> BTreeMap<String, u64> {
    rows_and_means(run, metric, "tag_engine")
        .into_iter()
        .map(|(k, (n, _))| (k, n))
        .collect()
}

#[test]
#[ignore = "builds the vm-hooks kernel (~20 min cold) and boots it"]
fn kernel_abi_matches_the_agent() {
    let _g = serial();
    let dir = kernel("vm-hooks");
    let t = tempfile::tempdir().unwrap();
    let c = t.path().join("abi.c");
    std::fs::write(
        &c,
        "#include <stdio.h>\n#include <linux/bpf.h>\n#include <linux/io_uring.h>\n\
         #include <linux/chained_read.h>\n#include <asm/unistd.h>\n\
         int main(void) { printf(\"%d %d %d %d %zu\\n\", __NR_chained_read, \
         (int)IORING_OP_CHAINED_READ, (int)BPF_PROG_TYPE_STORAGE_CHAIN, \
         CHAINED_READ_MAX_HOPS, sizeof(struct chained_read_args)); return 0; }\n",
    )
    .unwrap();
    let exe = t.path().join("abi");
    let cc = Command::new("cc")
        .arg("-I")
        .arg(dir.join("headers/include"))
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc));
    let out = Command::new(&exe).output().unwrap();
    use testbed_agent::bpf::abi;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "{} {} {} {} {}",
            abi::SYS_CHAINED_READ,
            abi::IORING_OP_CHAINED_READ,
            abi::BPF_PROG_TYPE_STORAGE_CHAIN,
            abi::CHAINED_READ_MAX_HOPS,
            std::mem::size_of::<abi::ChainArgs>()
        )
    );
    // A second build is a cache hit.
    let again = testbed(&["kernel", "build", "vm-hooks"]);
    assert!(again.status.success(), "{}", text(&again));
}

#[test]
#[ignore = "boots the vm-hooks kernel"]
fn all_engines_return_the_same_verified_values_at_every_depth() {
    let _g = serial();
    kernel("vm-hooks");
    let run = run_spec("hooks-quick.toml");
    let engines = [
        "read",
        "io-uring",
        "io-uring-poll",
        "io-uring-sqpoll",
        "nvme-passthru",
        "nvme-passthru-poll",
        "syscall-hook",
        "nvme-hook",
        "syscall-hook-uring",
        "nvme-hook-uring",
    ];
    let points = run.points();
    // 10 depths, two repetitions (in one boot).
    assert_eq!(points.len(), 20);
    for p in &points {
        let depth = p["params"]["depth"].as_u64().unwrap();
        let cross = num(p, "cross_check.lookups");
        for e in engines {
            // Same keys (one seed), every value verified against its key.
            assert_eq!(
                num(p, &format!("cross_check.{e}.verified")),
                cross,
                "{e} d{depth}"
            );
            assert_eq!(
                num(p, &format!("{e}.verified_lookups")),
                30.0,
                "{e} d{depth}"
            );
        }
        for e in engines.iter().filter(|e| e.contains("hook")) {
            // The kernel did every read: d nodes plus the value's block.
            assert_eq!(
                num(p, &format!("{e}.kernel_hops_per_lookup")),
                (depth + 1) as f64,
                "{e} d{depth}"
            );
        }
        assert_eq!(p["summary"]["kernel.splats"], 0, "{}", p["summary"]);
    }
    let counts = samples_per_engine(&run, "lookup_latency");
    for e in engines {
        // 30 lookups × 20 points (10 depths, two repetitions).
        assert_eq!(counts.get(e), Some(&600), "{e}: {counts:?}");
    }
}

/// The base workload reads with `read()`; only the sweep reaches a hook
/// engine. The image must still carry the BPF programs.
#[test]
#[ignore = "boots the vm-hooks kernel"]
fn a_sweep_into_a_hook_engine_boots_with_its_bpf_programs() {
    let _g = serial();
    kernel("vm-hooks");
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("sweep-into-hook.toml");
    std::fs::write(
        &path,
        "[experiment]\nname = \"sweep-into-hook\"\nseed = 7\n\n\
         [vm]\nvcpus = 2\nmemory = \"1G\"\n\n[kernel]\nname = \"vm-hooks\"\n\n\
         [[devices]]\nname = \"data\"\nkind = \"nvme\"\nsize = \"64M\"\nlogical_block_size = 512\n\n\
         [workload]\nkind = \"btree\"\ndevice = \"data\"\nengine = \"read\"\ndepth = 2\nkeys = 31\n\
         lookups_per_thread = 20\nwarmup_lookups = 2\nbuild = \"if-needed\"\n\n\
         [sweep]\nengine = [\"read\", \"nvme-hook\"]\n",
    )
    .unwrap();
    let run = run_spec_at(&path);
    let programs = run.manifest["inputs"]["bpf_programs"].as_array();
    assert!(
        programs.is_some_and(|p| !p.is_empty()),
        "{}",
        run.manifest["inputs"]
    );
    let counts = samples_per_engine(&run, "lookup_latency");
    for e in ["read", "nvme-hook"] {
        assert!(counts.get(e).is_some_and(|n| *n > 0), "{e}: {counts:?}");
    }
}

#[test]
#[ignore = "boots the vm-hooks kernel"]
fn every_break_it_case_holds_in_the_vm() {
    let _g = serial();
    kernel("vm-hooks");
    // The namespace the chains run on is the first, then the second of a
    // two-namespace controller (offsets relative to it, its end the limit).
    for spec_name in ["hooks-safety.toml", "hooks-safety-ns2.toml"] {
        eprintln!("== {spec_name}");
        let run = run_spec(spec_name);
        let p = run.points()[0];
        let s = p["summary"].as_object().unwrap();
        let mut failed = Vec::new();
        for (k, v) in s {
            if let Some(case) = k
                .strip_prefix("safety.")
                .filter(|c| !c.ends_with(".detail"))
            {
                let detail = &s[&format!("{k}.detail")];
                let verdict = v.as_str().unwrap_or("?");
                eprintln!("{verdict:>4}  {case}: {}", detail.as_str().unwrap_or(""));
                if v != "pass" {
                    failed.push(case.to_string());
                }
            }
        }
        assert!(num(p, "safety_cases") >= 37.0, "{}", p["summary"]);
        assert!(failed.is_empty(), "{spec_name}: failed: {failed:?}");
        assert_eq!(p["summary"]["safety_all_passed"], true);
        assert_eq!(p["summary"]["kernel.splats"], 0);
    }
}

#[test]
#[ignore = "boots the vm-hooks kernel"]
fn nvme_passthrough_reads_queue_no_bio_while_block_device_reads_do() {
    let _g = serial();
    kernel("vm-hooks");
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bios.toml");
    // A tree and a synthetic chain, every user-space engine verified on the
    // same keys, the guest's bios counted per engine (block_bio_queue).
    std::fs::write(
        &path,
        r#"
[experiment]
name = "bios"
seed = 9

[vm]
vcpus = 2
memory = "512M"
cmdline = ["nvme.poll_queues=1"]

[kernel]
name = "vm-hooks"

[[devices]]
name = "data"
kind = "nvme"
size = "32M"
logical_block_size = 512

[workload]
kind = "btree"
device = "data"
engines = ["read", "io-uring", "io-uring-poll", "io-uring-sqpoll", "nvme-passthru", "nvme-passthru-poll"]
depth = 3
lookups_per_thread = 60
warmup_lookups = 5
interleave_block = 20
cross_check_lookups = 20
count_bios = true

[sweep]
mode = ["tree", "synthetic"]
"#,
    )
    .unwrap();
    let run = run_spec_at(&path);
    let points = run.points();
    assert_eq!(points.len(), 2);
    for p in &points {
        let mode = p["params"]["mode"].as_str().unwrap_or("?").to_string();
        let cross = num(p, "cross_check.lookups");
        // Tree: 3 node reads and the value's block; chain: 3 reads.
        let reads = if mode == "tree" { 4.0 } else { 3.0 };
        for e in [
            "read",
            "io-uring",
            "io-uring-poll",
            "io-uring-sqpoll",
            "nvme-passthru",
            "nvme-passthru-poll",
        ] {
            assert_eq!(
                num(p, &format!("cross_check.{e}.verified")),
                cross,
                "{mode} {e}"
            );
            assert_eq!(num(p, &format!("{e}.verified_lookups")), 60.0, "{mode} {e}");
            let bios = num(p, &format!("{e}.block_bios"));
            eprintln!("{mode} {e}: {bios} bios for 60 lookups");
            if e.starts_with("nvme-passthru") {
                assert_eq!(bios, 0.0, "{mode} {e}: passthrough queued bios");
            } else {
                // One bio per read at least (every read is one block range).
                assert!(bios >= 60.0 * reads, "{mode} {e}: {bios} bios");
            }
        }
    }
}

#[test]
#[ignore = "boots the vm-hooks kernel"]
fn quick_fig3_sweeps_write_samples_for_every_engine() {
    let _g = serial();
    kernel("vm-hooks");
    for (name, engines, points) in [
        (
            "fig3abc-hooks-quick.toml",
            &["read", "syscall-hook", "nvme-hook"][..],
            // 4 depths × 2 thread counts × 4 boots.
            32,
        ),
        (
            "fig3d-hooks-quick.toml",
            &[
                "io-uring",
                "io-uring-poll",
                "io-uring-sqpoll",
                "nvme-passthru-poll",
                "nvme-hook-uring",
            ][..],
            36,
        ),
    ] {
        let run = run_spec(name);
        assert_eq!(run.points().len(), points, "{name}");
        let counts = samples_per_engine(&run, "lookup_latency");
        for e in engines {
            assert!(
                counts.get(*e).copied().unwrap_or(0) > 0,
                "{name} {e}: {counts:?}"
            );
        }
        for p in run.points() {
            for e in engines.iter().filter(|e| e.contains("hook")) {
                assert_eq!(
                    num(p, &format!("{e}.kernel_hops_per_lookup")),
                    p["params"]["depth"].as_f64().unwrap(),
                    "{name} {e}"
                );
            }
        }
    }
}

#[test]
#[ignore = "builds the vm-hooks-debug kernel (~25 min cold) and boots it"]
fn lockdep_kernel_runs_the_quick_sweep_without_a_report() {
    let _g = serial();
    let dir = kernel("vm-hooks-debug");
    let config = std::fs::read_to_string(dir.join("config")).unwrap();
    assert!(config.lines().any(|l| l == "CONFIG_PROVE_LOCKING=y"));
    // The quick sweep, then every error path of the hooks.
    for name in ["hooks-debug-quick.toml", "hooks-safety-debug.toml"] {
        let run = run_spec(name);
        for p in run.points() {
            assert_eq!(p["summary"]["kernel.lockdep"], "on", "{}", p["summary"]);
            assert_eq!(p["summary"]["kernel.debug_locks"], 1, "{}", p["summary"]);
            assert_eq!(p["summary"]["kernel.splats"], 0, "{}", p["summary"]);
            if let Some(all) = p["summary"].get("safety_all_passed") {
                assert_eq!(all, true, "{name}: {}", p["summary"]);
            }
        }
        // The console, independently of the agent.
        let console = run.console();
        let markers = testbed_agent::workload::btree::kernel_log::SPLAT_MARKERS;
        let splats: Vec<&str> = console
            .lines()
            .filter(|l| markers.iter().any(|m| l.contains(m)))
            .collect();
        assert!(
            splats.is_empty(),
            "{name}: kernel reports in console.log: {splats:#?}"
        );
        assert!(
            console.contains("testbed-agent"),
            "{name}: console log is empty?"
        );
    }
}

/// Rows of `metric` per value of `tag`, and the mean value, read by pyarrow.
fn rows_and_means(run: &Run, metric: &str, tag: &str) -> BTreeMap<String, (u64, f64)> {
    let py = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import pyarrow.parquet as pq, pyarrow.compute as pc\n\
             t = pq.read_table('{}')\n\
             r = t.filter(pc.equal(t['metric'], '{metric}'))\n\
             for k in sorted(set(r['{tag}'].to_pylist())):\n\
             \x20   v = r.filter(pc.equal(r['{tag}'], k))['value']\n\
             \x20   print(k.replace(' ', '_'), len(v), pc.mean(v).as_py())",
            run.dir.join("samples.parquet").display()
        ))
        .output()
        .unwrap();
    assert!(py.status.success(), "pyarrow: {}", text(&py));
    String::from_utf8_lossy(&py.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let k = f.next()?.replace('_', " ");
            Some((k, (f.next()?.parse().ok()?, f.next()?.parse().ok()?)))
        })
        .collect()
}

#[test]
#[ignore = "boots the vm-hooks kernel"]
fn table1_splits_each_traced_read_into_six_layers_that_add_up() {
    let _g = serial();
    kernel("vm-hooks");
    let run = run_spec("table1-quick.toml");
    eprintln!("{}", accel_note(&run));
    let points = run.points();
    let p = points[0];
    let reads = p["workload"]["reads"].as_u64().unwrap();
    // A traced read is dropped only when another I/O's probe fired inside
    // its window; on a device nothing else uses that is rare. The samples
    // below are every repetition's.
    for q in &points {
        let split = num(q, "reads_split");
        assert!(split >= 0.95 * reads as f64, "{split} of {reads} split");
    }
    let split: f64 = points.iter().map(|q| num(q, "reads_split")).sum();
    let reads = reads * points.len() as u64;
    let layers = rows_and_means(&run, "layer_latency", "tag_layer");
    let names = [
        "kernel crossing",
        "read syscall",
        "ext4",
        "bio",
        "NVMe driver",
        "device",
    ];
    let mut sum = 0.0;
    for name in names {
        let (n, mean) = layers[name];
        eprintln!("{name:<16} {mean:>10.0} ns over {n} reads");
        assert_eq!(n as f64, split, "{name}");
        assert!(mean > 0.0, "{name} is zero: {layers:?}");
        sum += mean;
    }
    assert_eq!(layers.len(), 6, "{layers:?}");
    // The layers partition each traced read's user-space window: their
    // sum is the traced reads' own end-to-end mean (minus the few reads
    // not split).
    let e2e = rows_and_means(&run, "read_latency", "tag_probes");
    let (traced_n, traced_mean) = e2e["attached"];
    let (untraced_n, untraced_mean) = e2e["detached"];
    assert_eq!((traced_n, untraced_n), (reads, reads), "{e2e:?}");
    assert!(
        (sum / traced_mean - 1.0).abs() < 0.02,
        "layers {sum:.0} ns vs traced reads {traced_mean:.0} ns"
    );
    eprintln!(
        "sum of layers {sum:.0} ns; untraced end to end {untraced_mean:.0} ns (ratio {:.3}); probe overhead {:.0} ns (mean), {:.0} ns (median)",
        num(p, "layer_sum_ratio"),
        num(p, "probe_overhead_ns"),
        num(p, "probe_overhead_median_ns")
    );
    // `testbed show` prints the table, the overhead and the ratio.
    let o = testbed(&["show", run.dir.to_str().unwrap()]);
    let shown = text(&o);
    for line in [
        "kernel crossing",
        "NVMe driver",
        "sum of layers",
        "probe overhead",
        "sum of layers / untraced end to end",
        "time line:",
    ] {
        assert!(shown.contains(line), "{line:?} not in:\n{shown}");
    }
    // The figure is drawn from these samples, beside the paper's numbers.
    let o = testbed(&["plot", run.dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let fig: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run.dir.join("figures/bpf-table1.json")).unwrap(),
    )
    .unwrap();
    let drawn = fig["panels"][0]["series"][0]["points"].as_array().unwrap();
    assert_eq!(drawn.len(), 6, "{fig}");
    let svg = std::fs::read_to_string(run.dir.join("figures/bpf-table1.svg")).unwrap();
    assert!(
        svg.contains("paper (HotOS&#39;21 Table 1)"),
        "no paper reference"
    );
}

/// Tests whose assertions are on measured numbers (latencies, speedups,
/// shares, a regression gate): `./x test` runs them alone on the machine
/// (.config/nextest.toml), so no other test's load moves them.
mod measures {
    use super::*;

    #[test]
    #[ignore = "boots the vm-hooks kernel"]
    fn nvme_hook_beats_read_at_depth_and_the_run_says_how_far_to_trust_it() {
        let _g = serial();
        kernel("vm-hooks");
        let run = run_spec("hooks-speedup-quick.toml");
        let note = accel_note(&run);
        eprintln!("{note}; engines interleaved in one boot");
        if run.manifest["accel"]["used"] == "tcg" {
            eprintln!("TCG: the ratios below are shape-only");
        }
        eprintln!("depth  read_us  syscall_us  nvme_us  syscall_x  nvme_x");
        let mut by_depth = BTreeMap::new();
        for p in run.points() {
            let d = p["params"]["depth"].as_u64().unwrap();
            let us = |e: &str| num(p, &format!("{e}.lookup_latency_mean_ns")) / 1000.0;
            let nvme = num(p, "speedup.nvme-hook.latency");
            eprintln!(
                "{d:>5}  {:>7.0}  {:>10.0}  {:>7.0}  {:>9.2}  {:>6.2}",
                us("read"),
                us("syscall-hook"),
                us("nvme-hook"),
                num(p, "speedup.syscall-hook.latency"),
                nvme
            );
            by_depth.insert(d, nvme);
        }
        // Re-issuing from the completion path saves a crossing per hop, so the
        // gain grows with depth (quiet host, TCG: ~1.5x at depth 10; a busy
        // host inflates QEMU's fixed cost per command and shrinks it, to 1.14x
        // once in CI). How large the gain is, is a measured result checked by
        // the bpf-fig3 claims of `testbed check`, not by this test: here only
        // its shape, which a hook that fell back to user-space hops would lack.
        assert!(by_depth[&10] > by_depth[&1], "{by_depth:?}");
        assert!(
            by_depth[&10] > 1.0,
            "nvme-hook slower than read at depth 10: {by_depth:?}"
        );
    }

    #[test]
    #[ignore = "boots the vm-hooks kernel"]
    fn fig1_share_grows_as_the_null_device_gets_faster() {
        let _g = serial();
        kernel("vm-hooks");
        // A run the testbed found busy (other users of a shared machine: once
        // 2.4–4.0 % at 10 ms against 0.9–1.2 % on a quiet host) can leave the
        // claim undecided, and says so; only such a run is made again.
        let deadline = Instant::now() + Duration::from_secs(10 * 60);
        let mut busy = Vec::new();
        loop {
            assert!(
                wait_for_quiet_host(deadline, Duration::from_secs(2)),
                "the host was never quiet in 10 min: {busy:#?}"
            );
            let run = run_spec_with(&spec("fig1-quick.toml"), &["--rerun-noisy"]);
            let verdict = fig1_shape_and_verdict(&run);
            if verdict
                .lines()
                .any(|l| l.starts_with("holds ") && l.contains("bpf-fig1"))
            {
                return;
            }
            let said_busy = verdict.lines().find(|l| l.contains("busy host"));
            assert!(said_busy.is_some(), "{verdict}");
            busy.push(verdict);
            assert!(busy.len() < 3, "every attempt was busy: {busy:#?}");
            eprintln!("== the run was busy; again");
        }
    }

    /// Asserts the shares' order by point estimates and returns what
    /// `testbed check` printed for the run.
    fn fig1_shape_and_verdict(run: &Run) -> String {
        let mut share = BTreeMap::new();
        for p in run.points() {
            let device = p["params"]["device"].as_str().unwrap().to_string();
            // Every read went through the block device file's path, not ext4.
            assert!(
                p["summary"]["block device file.layer_mean_ns"]
                    .as_f64()
                    .unwrap()
                    > 0.0,
                "{device}: {}",
                p["summary"]
            );
            eprintln!(
                "{device:<12} device {:>10.0} ns  share {:>5.1} %  traced/untraced {:.2}",
                num(p, "device.layer_mean_ns"),
                100.0 * num(p, "kernel_software_share"),
                num(p, "layer_sum_ratio")
            );
            share.insert(device, num(p, "kernel_software_share"));
        }
        assert_eq!(share.len(), 5, "{share:?}");
        // 10 ms and 1 ms of device time against ~0.1 ms of (TCG) software,
        // then a device that completes at once: the share must rise.
        assert!(share["null-10ms"] < share["null-1ms"], "{share:?}");
        assert!(share["null-1ms"] < share["null-0"], "{share:?}");
        // Decided on its interval over the spec's five repetitions.
        text(&testbed(&["check", run.dir.to_str().unwrap()]))
    }

    #[test]
    #[ignore = "boots the vm-hooks kernel"]
    fn the_layers_predict_the_nvme_hook_speedup_on_the_same_namespace() {
        let _g = serial();
        kernel("vm-hooks");
        let run = run_spec("table1-hook-quick.toml");
        let p = run.points()[0];
        // The raw namespace's path: the block device file's layer, not ext4's.
        assert!(
            num(p, "block device file.layer_mean_ns") > 0.0,
            "{}",
            p["summary"]
        );
        // The hook's speedup, predicted from the layers and measured on the
        // same namespace, at every depth of the spec; the prediction is 1 at
        // depth 1 and rises with depth (each extra hop skips the upper layers).
        // One sample per depth and repetition.
        let depths = p["workload"]["hook_depths"].as_array().unwrap().len() as u64;
        let samples = depths * run.points().len() as u64;
        let speedups = rows_and_means(&run, "hook_speedup", "tag_estimate");
        assert_eq!(speedups["predicted"].0, samples, "{speedups:?}");
        assert_eq!(speedups["measured"].0, samples, "{speedups:?}");
        let rows = p["summary"]["hook_speedup"].as_array().unwrap();
        let predicted: Vec<f64> = rows.iter().map(|r| r[1].as_f64().unwrap()).collect();
        assert!((predicted[0] - 1.0).abs() < 1e-9, "{rows:?}");
        assert!(predicted.windows(2).all(|w| w[1] > w[0]), "{rows:?}");
        assert!(
            rows.iter().all(|r| r[2].as_f64().unwrap() > 0.0),
            "{rows:?}"
        );
        for r in rows {
            eprintln!(
                "depth {:>2}: predicted {:.2}x, measured {:.2}x",
                r[0],
                r[1].as_f64().unwrap(),
                r[2].as_f64().unwrap()
            );
        }
        let o = testbed(&["show", run.dir.to_str().unwrap()]);
        assert!(
            text(&o).contains("NVMe hook speedup over read()"),
            "{}",
            text(&o)
        );
        // Drawn in bpf-table1's hook-speedup panel, both series.
        let o = testbed(&["plot", run.dir.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        let fig: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(run.dir.join("figures/bpf-table1.json")).unwrap(),
        )
        .unwrap();
        let panel = fig["panels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["panel"] == "hook-speedup")
            .unwrap();
        let keys: Vec<&str> = panel["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["key"].as_str().unwrap())
            .collect();
        assert!(
            keys.contains(&"predicted") && keys.contains(&"measured"),
            "{panel}"
        );
    }
}

/// Two boots of one instruction-clock point (`[vm] clock =
/// "instructions"`, experiments/examples/icount-determinism.toml cut to
/// two boots) count the same work per lookup within the bound 26 boots
/// (io_uring 28) measured (docs/icount.md: spread read 2.99 %, io_uring 4.35 %, syscall
/// hook 1.66 %, NVMe hook 1.13 %), with half as much again for headroom;
/// the same lookups' wall-clock CPU moves 19–31 % between boots.
#[test]
#[ignore = "boots the vm-hooks kernel twice under QEMU's instruction counter"]
fn two_boots_of_an_instruction_clock_point_count_the_same_work() {
    let _g = serial();
    kernel("vm-hooks");
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments/examples/icount-determinism.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(text.contains("repetitions = 10\nboots = 10\n"), "{text}");
    let tmp = tempfile::tempdir().unwrap();
    let two = tmp.path().join("icount-two-boots.toml");
    std::fs::write(
        &two,
        text.replace(
            "repetitions = 10\nboots = 10\n",
            "repetitions = 2\nboots = 2\n",
        ),
    )
    .unwrap();
    let run = run_spec_at(&two);
    assert_eq!(run.manifest["spec"]["vm"]["clock"], "instructions");
    let argv = run.manifest["qemu_argv"].to_string();
    assert!(argv.contains("shift=0,sleep=off"), "{argv}");
    let points = run.points();
    assert_eq!(points.len(), 2, "one point in each of two boots");
    assert_ne!(points[0]["boot"], points[1]["boot"], "two boots");
    let bound = [
        ("read", 0.0299),
        ("io-uring", 0.0435),
        ("syscall-hook", 0.0166),
        ("nvme-hook", 0.0113),
    ];
    for (engine, measured) in bound {
        let key = format!("{engine}.cpu_us_per_lookup");
        let (a, b) = (num(points[0], &key), num(points[1], &key));
        // Work, not idle time: thousands of instructions per lookup.
        assert!(a > 1.0 && b > 1.0, "{engine}: {a} and {b} k instructions");
        let spread = a.max(b) / a.min(b) - 1.0;
        assert!(
            spread <= measured * 1.5,
            "{engine}: {a:.3} and {b:.3} k instructions per lookup, spread {:.2} % \
             over the bound {:.2} % (26–28 boots measured {:.2} %)",
            spread * 100.0,
            measured * 150.0,
            measured * 100.0
        );
    }
}
