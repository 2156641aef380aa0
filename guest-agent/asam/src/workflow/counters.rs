//! Cache misses and memory accesses per stage (asam-memory) with
//! `perf stat`, where the machine exposes a hardware PMU. Under QEMU's TCG
//! there is none (only software events), so the figure says "not
//! measurable here" with the reason rather than drawing zeros.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::chain::Step;

/// The events counted: last-level cache references and misses, and the
/// loads that reach the last-level cache (memory traffic's proxy).
pub const EVENTS: &str = "cache-references,cache-misses,LLC-loads,LLC-load-misses";

/// Why hardware counters cannot be read here, or None when they can.
pub fn unavailable(sysfs: &Path) -> Option<String> {
    let pmu = sysfs.join("bus/event_source/devices/cpu");
    if !pmu.exists() {
        return Some(format!(
            "no hardware PMU ({} is missing: a QEMU TCG guest, or a virtual machine without a virtual PMU, has no performance counters)",
            pmu.display()
        ));
    }
    if which("perf").is_none() {
        return Some("perf is not installed (linux-perf)".into());
    }
    None
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

/// `step` run under `perf stat`, its counts written as CSV to `out`.
pub fn wrap(step: &Step, out: &Path) -> Step {
    let mut argv: Vec<OsString> = vec![
        "perf".into(),
        "stat".into(),
        "-x".into(),
        ",".into(),
        "-e".into(),
        EVENTS.into(),
        "-o".into(),
        out.as_os_str().to_owned(),
        "--".into(),
    ];
    argv.extend(step.argv.iter().cloned());
    Step {
        argv,
        package: step.package,
        // perf hands its standard input to the program it starts.
        stdin: step.stdin.clone(),
    }
}

/// Counts from `perf stat -x ,` output: `value,unit,event,...` lines;
/// `<not supported>`/`<not counted>` values are left out.
pub fn parse(csv: &str) -> BTreeMap<String, f64> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let value: f64 = f.first()?.trim().parse().ok()?;
            let event = f.get(2)?.trim();
            // perf may suffix the PMU (`cache-misses:u`): keep the name.
            let event = event.split(':').next().unwrap_or(event);
            Some((event.to_string(), value))
        })
        .collect()
}

/// Adds `b`'s counts into `a`.
pub fn add(a: &mut BTreeMap<String, f64>, b: BTreeMap<String, f64>) {
    for (k, v) in b {
        *a.entry(k).or_insert(0.0) += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_csv_is_read_and_unsupported_events_dropped() {
        let csv = "# started on Tue\n\n\
                   12345,,cache-references,1000,100.00,,\n\
                   678,,cache-misses:u,1000,100.00,5.49,of all cache refs\n\
                   <not supported>,,LLC-loads,0,100.00,,\n";
        let m = parse(csv);
        assert_eq!(m.len(), 2);
        assert_eq!(m["cache-references"], 12345.0);
        assert_eq!(m["cache-misses"], 678.0);
        let mut total = m.clone();
        add(&mut total, m);
        assert_eq!(total["cache-misses"], 1356.0);
    }

    #[test]
    fn no_pmu_is_a_reason_not_a_zero() {
        let dir = tempfile::tempdir().unwrap();
        let why = unavailable(dir.path()).unwrap();
        assert!(why.contains("no hardware PMU"), "{why}");
        let w = wrap(
            &Step::new("samtools", ["samtools", "sort"]),
            Path::new("/o.csv"),
        );
        assert_eq!(w.argv[0], "perf");
        assert_eq!(w.argv[w.argv.len() - 2], "samtools");
    }
}
