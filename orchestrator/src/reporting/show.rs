//! `testbed show RUN` and `testbed list`: summaries for people.

use std::path::{Path, PathBuf};

use crate::recording::results::manifest;

pub fn show_run(dir: &Path) -> Result<String, manifest::ManifestError> {
    let m = manifest::read(&dir.join("manifest.json"))?;
    let mut s = String::new();
    s.push_str(&format!("run        {}\n", dir.display()));
    s.push_str(&format!(
        "experiment {} ({})\n",
        m.experiment,
        m.figures.join(", ")
    ));
    s.push_str(&format!("status     {:?}\n", m.status));
    s.push_str(&format!("executor   {}\n", m.executor));
    if !m.containment.is_empty() {
        s.push_str(&format!("contained  {}\n", m.containment));
    }
    if let Some(a) = &m.accel {
        s.push_str(&format!(
            "accel      {} (asked {}): {}\n",
            a.used,
            serde_json::to_value(a.requested)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            a.reasons.join("; ")
        ));
    }
    s.push_str(&format!("timing     {}\n", m.timing_note));
    if let Some(k) = &m.inputs.kernel {
        s.push_str(&format!("kernel     {} [{}]\n", k.description, k.release));
    }
    if let Some(g) = &m.guest {
        s.push_str(&format!("guest      {}\n", g.uname));
    }
    if !m.boot_to_agent_ms.is_empty() {
        s.push_str(&format!("boot→agent {:?} ms\n", m.boot_to_agent_ms));
    }
    for b in &m.boots {
        if let Some(p) = &b.pinning {
            s.push_str(&format!("boot {:<5} {}\n", b.index, p.describe()));
        }
    }
    if let Some(n) =
        crate::machine::noise::describe(m.points.iter().filter_map(|p| p.noise.as_ref()))
    {
        s.push_str(&format!("host noise {n}\n"));
    }
    if let Some(line) = m
        .host
        .speed
        .as_ref()
        .and_then(crate::machine::calibrate::describe)
    {
        s.push_str(&format!("host speed {line}\n"));
    }
    s.push_str(&format!(
        "started    {}  finished {}\n",
        m.started_at,
        m.finished_at.as_deref().unwrap_or("-")
    ));
    let variance = crate::recording::results::levels::describe(&m.variance, 8);
    if !variance.is_empty() {
        s.push_str(
            "variance   by level (Kalibera and Jones; median over points):
",
        );
        for line in variance {
            s.push_str(&format!(
                "  {line}
"
            ));
        }
    }
    let done = m.points.iter().filter(|p| p.ok).count();
    s.push_str(&format!(
        "points     {done} done, {} failed\n",
        m.points.len() - done
    ));
    for p in &m.points {
        let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let key_numbers: Vec<String> = [
            "iops",
            "lookups_per_s",
            "mb_per_s",
            "read_latency_mean_ns",
            "lookup_latency_mean_ns",
        ]
        .iter()
        .filter_map(|k| {
            p.summary
                .get(*k)
                .and_then(|v| v.as_f64())
                .map(|v| format!("{k}={v:.1}"))
        })
        .chain(per_engine_numbers(p))
        .collect();
        let status = if !p.ok {
            "FAILED".to_string()
        } else if p.noisy() {
            "NOISY ".to_string()
        } else {
            "ok    ".to_string()
        };
        s.push_str(&format!(
            "  {} {status} {:<28} {:>7} samples  {}\n",
            p.id,
            params.join(" "),
            p.samples,
            key_numbers.join(" ")
        ));
        // What the workload itself says about its point.
        let lines = crate::recording::results::summary_table::record_workload(p)
            .map(|w| w.params().show_lines(&p.summary))
            .unwrap_or_default();
        for line in &lines {
            s.push_str(&format!("      {line}\n"));
        }
        if let Some(e) = &p.error {
            s.push_str(&format!("      {}\n", e.lines().next().unwrap_or("")));
        }
        if let Some(c) = &p.host_cost {
            let vcpu = c
                .vcpu_s
                .map_or(String::new(), |v| format!(" (vCPU threads {v:.2} s)"));
            let charged = c.peak_charged_mib.map_or(String::new(), |m| {
                format!(", {m:.1} MiB charged to its memory cgroup")
            });
            s.push_str(&format!(
                "      host cost  CPU {:.2} s user + {:.2} s system{vcpu}, peak memory {}{charged} ({})\n",
                c.cpu_user_s,
                c.cpu_system_s,
                c.peak_rss_mib
                    .map_or("not read".to_string(), |m| format!("{m:.1} MiB")),
                c.source
            ));
        }
        if let Some(n) = &p.noise {
            s.push_str(&format!(
                "      host noise {:.1} % of CPU to other processes (steal {:.1} %, this run {:.1} %, load {}) over {:.1}s{}\n",
                n.others_pct,
                n.steal_pct,
                n.own_pct,
                n.load1.map_or("?".to_string(), |l| format!("{l:.2}")),
                n.interval_s,
                if n.noisy {
                    format!(": noisy, above {} %", n.noisy_above_pct)
                } else {
                    String::new()
                }
            ));
        }
        for e in &p.earlier {
            let noise = e.noise.as_ref().map_or("not measured".to_string(), |n| {
                format!("{:.1} %", n.others_pct)
            });
            match &e.error {
                Some(err) => s.push_str(&format!(
                    "      rerun in boot {} failed (host noise {noise}): {}\n",
                    e.boot,
                    err.lines().next().unwrap_or("")
                )),
                None => s.push_str(&format!(
                    "      measured before in boot {} (host noise {noise}), run again\n",
                    e.boot
                )),
            }
        }
    }
    let scaling = crate::drawing::analysis::btree_depth::depth_series(&m.points);
    if !scaling.is_empty() {
        s.push_str("latency by depth (mean lookup latency; one read per level makes a line)\n");
        for line in crate::drawing::analysis::btree_depth::describe(&scaling) {
            s.push_str(&format!("  {line}\n"));
        }
    }
    s.push_str(&format!(
        "files      {}\n",
        [
            "manifest.json",
            "samples.parquet",
            "summary.parquet",
            "console.log",
            "spec.toml"
        ]
        .iter()
        .filter(|f| dir.join(f).exists())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
    ));
    Ok(s)
}

/// With several engines in one job: each engine's rate and mean latency,
/// from the summary table's rows (the one place keys are split).
fn per_engine_numbers(p: &crate::recording::results::manifest::PointRecord) -> Vec<String> {
    let rows = crate::recording::results::summary_table::rows(p);
    let engine_value = |engine: &str, metric: &str| {
        rows.iter()
            .find(|r| {
                r.metric == metric
                    && r.scope
                        .as_ref()
                        .is_some_and(|(t, v)| t == "engine" && v == engine)
            })
            .and_then(|r| r.value)
    };
    let mut engines: Vec<&str> = rows
        .iter()
        .filter_map(|r| {
            r.scope
                .as_ref()
                .filter(|(t, _)| t == "engine")
                .map(|(_, v)| v.as_str())
        })
        .collect();
    engines.dedup();
    let mut seen = std::collections::BTreeSet::new();
    engines.retain(|e| seen.insert(*e));
    if engines.len() < 2 {
        return Vec::new();
    }
    engines
        .iter()
        .filter_map(|e| {
            let rate = engine_value(e, "lookups_per_s")?;
            let mean = engine_value(e, "lookup_latency_mean_ns")?;
            Some(format!("{e}: {rate:.0}/s {:.0}µs", mean / 1e3))
        })
        .collect()
}

/// Every spec under `dir`, sorted.
pub fn find_specs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                // experiments/figures/ holds figure definitions, not specs.
                if p.file_name().is_some_and(|n| n != "figures") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "toml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn list_specs(dir: &Path) -> String {
    let mut s = String::new();
    for p in find_specs(dir) {
        let rel = p
            .strip_prefix(dir.parent().unwrap_or(dir))
            .unwrap_or(&p)
            .display()
            .to_string();
        match crate::execution::run::check_spec(&p) {
            Ok((l, plan)) => s.push_str(&format!(
                "{rel:<48} {:<28} {:>4} points  {:<6} {}\n",
                l.spec.experiment.name,
                plan.points.len(),
                format!("{:?}", l.spec.experiment.executor).to_lowercase(),
                l.spec.experiment.figures.join(",")
            )),
            Err(e) => s.push_str(&format!("{rel:<48} INVALID: {e}\n")),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec in the repository that does not validate would only fail when
    /// someone runs it; catch it here instead.
    #[test]
    fn every_shipped_spec_validates() {
        let dir = crate::host::paths::repo_root().join("experiments");
        let specs = find_specs(&dir);
        assert!(specs.len() > 20, "found only {specs:?}");
        let defs =
            crate::drawing::figures::def::load_all(&crate::host::paths::figure_defs()).unwrap();
        let bad: Vec<String> = specs
            .iter()
            .flat_map(|p| match crate::execution::run::check_spec(p) {
                Err(e) => vec![format!("{}: {e}", p.display())],
                // Every figure it names can find its metric and columns.
                Ok((loaded, plan)) => crate::drawing::figures::fit::spec_misfits(
                    &loaded.spec.experiment.figures,
                    &plan,
                    &defs,
                ),
            })
            .collect();
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}
