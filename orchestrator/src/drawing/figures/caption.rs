//! Figure captions: what ran here (accelerator, kernel, devices, VM), what
//! the paper ran on, and how the points and intervals were computed. Only
//! run-directory contents go in, so a copied run captions the same.

use super::data::RunData;
use super::def::FigureDef;
use super::extract::PanelData;
use super::stats::{CiMethod, RESAMPLES};

/// A value's name as the spec writes it (`nvme`, `64M`, `null`).
fn serde_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// "TCG", "KVM" or the executor when no VM ran.
pub fn accelerator(run: &RunData) -> String {
    match &run.manifest.accel {
        Some(a) => a.used.to_string().to_uppercase(),
        None => format!("none ({} executor)", run.manifest.executor),
    }
}

/// The run's VM ran under TCG, whose timings are shape-only.
pub fn under_tcg(run: &RunData) -> bool {
    run.manifest
        .accel
        .as_ref()
        .is_some_and(|a| a.used == crate::machine::qemu::argv::Accel::Tcg)
}

pub fn kernel(run: &RunData) -> String {
    match &run.manifest.inputs.kernel {
        Some(k) => {
            let d = if k.description.is_empty() {
                "?"
            } else {
                k.description.as_str()
            };
            if !k.release.is_empty() && !d.contains(&k.release) {
                format!("{d} [{}]", k.release)
            } else {
                d.to_string()
            }
        }
        None if !run.manifest.host.kernel.is_empty() => {
            format!("host kernel {}", run.manifest.host.kernel)
        }
        None => "not recorded".into(),
    }
}

pub fn devices(run: &RunData) -> String {
    let list: Vec<String> = run
        .manifest
        .devices
        .iter()
        .map(|d| {
            let sp = &d.spec;
            let mut parts = vec![serde_name(&sp.kind), serde_name(&sp.size)];
            parts.push(format!("{} B blocks", sp.logical_block_size));
            parts.push(format!("{} backend", serde_name(&sp.backend)));
            if let Some(q) = sp.queues {
                parts.push(format!("{q} queues"));
            }
            parts.retain(|p| !p.is_empty());
            format!("{} ({})", sp.name, parts.join(", "))
        })
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join("; ")
    }
}

pub fn vm(run: &RunData) -> Option<String> {
    let vm = run.manifest.vm()?;
    if run.manifest.executor != "qemu" {
        return None;
    }
    let memory = if vm.memory.is_empty() {
        "?".to_string()
    } else {
        vm.memory
    };
    // A `vm.vcpus` sweep booted each count's points apart.
    let mut swept: Vec<i64> = run
        .manifest
        .points
        .iter()
        .filter_map(|p| {
            p.params
                .get(crate::planning::plan::VCPUS_AXIS)?
                .as_integer()
        })
        .collect();
    swept.sort_unstable();
    swept.dedup();
    if swept.is_empty() {
        Some(format!("{} vCPU, {memory} memory", vm.vcpus))
    } else {
        let list: Vec<String> = swept.iter().map(i64::to_string).collect();
        Some(format!(
            "{} vCPU (swept, a boot each), {memory} memory",
            list.join("/")
        ))
    }
}

/// How quiet the host was over the run's finished points (noise.rs).
pub fn host_noise(run: &RunData) -> Option<String> {
    crate::machine::noise::describe(
        run.manifest
            .points
            .iter()
            .filter(|p| p.ok)
            .filter_map(|p| p.noise.as_ref()),
    )
}

fn ci_words(panels: &[&PanelData]) -> String {
    let mut methods = Vec::new();
    let mut ns = Vec::new();
    let mut most_boots = 1;
    for p in panels {
        for s in &p.series {
            for pt in &s.points {
                let boots: std::collections::BTreeSet<Option<u32>> =
                    pt.reps.iter().map(|r| r.boot).collect();
                most_boots = most_boots.max(boots.len());
                if !methods.contains(&pt.est.ci) {
                    methods.push(pt.est.ci);
                }
                ns.push(pt.est.n);
            }
        }
    }
    let (lo, hi) = (
        ns.iter().copied().min().unwrap_or(0),
        ns.iter().copied().max().unwrap_or(0),
    );
    let n = if lo == hi {
        format!("n = {lo}")
    } else {
        format!("n = {lo}–{hi}")
    };
    let over = if most_boots > 1 {
        "over repetitions (the median of each boot's where a boot ran several)"
    } else {
        "over repetitions"
    };
    let mut how = Vec::new();
    let units: Vec<&str> = methods
        .iter()
        .filter_map(|m| match m {
            CiMethod::Units(m) => Some(m.text()),
            _ => None,
        })
        .collect();
    if !units.is_empty() {
        how.push(format!(
            "95 % CI {over} by {} (order statistics from 6 repetitions, exact and \
             distribution-free; Student t from 4, its coverage measured by `./x bench coverage`)",
            units.join(" or ")
        ));
    }
    if methods.contains(&CiMethod::Range) {
        how.push(
            "for two or three values, where no interval reaches 95 %, their range [min, max] \
             (it covers the median 50 % of the time at two values, 75 % at three)"
                .to_string(),
        );
    }
    if methods.contains(&CiMethod::Samples) {
        how.push(format!(
            "for a single repetition, the spread of its raw samples (percentile bootstrap, \
             {RESAMPLES} resamples): how noisy its reads were, not a confidence interval \
             across runs, and no claim is decided on it"
        ));
    }
    let mut s = format!("Points: median over repetitions ({n} per point).");
    if !how.is_empty() {
        s.push_str(&format!(" Bars: {}.", how.join("; ")));
    }
    if methods.contains(&CiMethod::None) {
        s.push_str(" Points with a single value (or no spread) have no bar.");
    }
    s
}

/// Caption lines: ours, the paper's, the statistics.
pub fn lines(def: &FigureDef, run: &RunData, panels: &[&PanelData]) -> Vec<String> {
    let m = &run.manifest;
    let mut out = Vec::new();
    let mut ours = format!(
        "This run: {} / {} — accelerator {}; kernel {}; devices {}",
        m.experiment,
        m.run_id,
        accelerator(run),
        kernel(run),
        devices(run)
    );
    if let Some(v) = vm(run) {
        ours.push_str(&format!("; VM {v}"));
    }
    ours.push('.');
    if !m.timing_note.is_empty() {
        ours.push_str(&format!(" {}.", m.timing_note.trim_end_matches('.')));
    }
    if let Some(n) = host_noise(run) {
        ours.push_str(&format!(" Host noise: {n}."));
    }
    out.push(ours);
    if let Some(src) = &def.source {
        let mut p = format!(
            "Paper: {}, {}; hardware: {}. Paper values are hollow diamonds and dashed lines.",
            src.paper, src.location, src.hardware
        );
        if !src.note.is_empty() {
            p.push_str(&format!(" {}", src.note));
        }
        out.push(p);
    }
    out.push(ci_words(panels));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_noise_of_finished_points_is_told() {
        let point = |id: &str, ok: bool, pct: Option<f64>| {
            serde_json::json!({
                "id": id, "point": 0, "rep": 0, "params": {}, "seed": 1, "ok": ok, "boot": 0,
                "noise": pct.map(|p| serde_json::json!({
                    "others_pct": p, "steal_pct": 0.0, "own_pct": 50.0, "interval_s": 2.0,
                    "noisy_above_pct": 10.0, "noisy": p > 10.0,
                })),
            })
        };
        let run = |points: Vec<serde_json::Value>| RunData {
            dir: "/r".into(),
            manifest: serde_json::from_value(serde_json::json!({
                "testbed_version": "0.1.0", "status": "complete", "experiment": "e",
                "run_id": "r", "figures": [], "spec_file": "s.toml", "spec_sha256": "",
                "spec": {}, "executor": "qemu", "timing_note": "", "qemu_argv": [],
                "boots": [], "boot_to_agent_ms": [], "devices": [], "seed": 1,
                "points": points, "started_at": "",
            }))
            .unwrap(),
            raw: None,
            summary: None,
            limits: Default::default(),
        };
        let r = run(vec![
            point("a", true, Some(2.0)),
            point("b", true, Some(30.0)),
            point("c", true, Some(1.0)),
            // A failed point is drawn nowhere: not counted.
            point("d", false, Some(90.0)),
        ]);
        assert_eq!(
            host_noise(&r).unwrap(),
            "median 2.0 % of CPU to other processes, max 30.0 %; 1 of 3 points noisy (above 10 %)"
        );
        // Runs from before the measure: nothing said.
        assert_eq!(host_noise(&run(vec![point("a", true, None)])), None);
    }
}
