//! Figure captions: what ran here (accelerator, kernel, devices, VM), what
//! the paper ran on, and how the points and intervals were computed. Only
//! run-directory contents go in, so a copied run captions the same.

use super::data::RunData;
use super::def::FigureDef;
use super::extract::PanelData;
use super::stats::{CiMethod, RESAMPLES};

fn s(v: &serde_json::Value) -> Option<&str> {
    v.as_str().filter(|x| !x.is_empty())
}

/// "TCG", "KVM" or the executor when no VM ran.
pub fn accelerator(run: &RunData) -> String {
    match run.manifest.accel.as_ref().and_then(|a| s(&a["used"])) {
        Some(a) => a.to_uppercase(),
        None => format!("none ({} executor)", run.manifest.executor),
    }
}

pub fn kernel(run: &RunData) -> String {
    match run.manifest.inputs.get("kernel") {
        Some(k) => {
            let d = s(&k["description"]).unwrap_or("?");
            match s(&k["release"]) {
                Some(r) if !d.contains(r) => format!("{d} [{r}]"),
                _ => d.to_string(),
            }
        }
        None => match run.manifest.host.get("kernel").and_then(|k| k.as_str()) {
            Some(h) => format!("host kernel {h}"),
            None => "not recorded".into(),
        },
    }
}

pub fn devices(run: &RunData) -> String {
    let list: Vec<String> = run
        .manifest
        .devices
        .iter()
        .map(|d| {
            let sp = &d["spec"];
            let mut parts = vec![
                s(&sp["kind"]).unwrap_or("?").to_string(),
                s(&sp["size"]).unwrap_or("").to_string(),
            ];
            if let Some(b) = sp["logical_block_size"].as_u64() {
                parts.push(format!("{b} B blocks"));
            }
            if let Some(b) = s(&sp["backend"]) {
                parts.push(format!("{b} backend"));
            }
            if let Some(q) = sp["queues"].as_u64() {
                parts.push(format!("{q} queues"));
            }
            parts.retain(|p| !p.is_empty());
            format!("{} ({})", s(&sp["name"]).unwrap_or("?"), parts.join(", "))
        })
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join("; ")
    }
}

pub fn vm(run: &RunData) -> Option<String> {
    let vm = run.manifest.spec.get("vm")?;
    if run.manifest.executor != "qemu" {
        return None;
    }
    Some(format!(
        "{} vCPU, {} memory",
        vm["vcpus"].as_u64().unwrap_or(0),
        s(&vm["memory"]).unwrap_or("?")
    ))
}

fn ci_words(panels: &[&PanelData]) -> String {
    let mut methods = Vec::new();
    let mut ns = Vec::new();
    for p in panels {
        for s in &p.series {
            for pt in &s.points {
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
    let mut how = Vec::new();
    if methods.contains(&CiMethod::Repetitions) {
        how.push("over repetitions");
    }
    if methods.contains(&CiMethod::Samples) {
        how.push("over the raw samples of the one repetition");
    }
    let mut s = format!("Points: median over repetitions ({n} per point).");
    if !how.is_empty() {
        s.push_str(&format!(
            " Bars: 95 % CI by percentile bootstrap ({RESAMPLES} resamples, fixed seed) {}.",
            how.join(", or ")
        ));
    }
    if methods.contains(&CiMethod::None) {
        s.push_str(" Points with a single value have no bar.");
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
