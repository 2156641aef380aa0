//! Figures, claims, reports and comparisons, computed from a run
//! directory's files alone (manifest.json, samples.parquet) and the figure
//! definitions in `experiments/figures/`.
//!
//! `testbed plot RUN` writes `RUN/figures/<id>.{svg,png,json}`, `testbed
//! check RUN` writes `RUN/claims.json`, `testbed report RUN` writes
//! `RUN/report.html`; `testbed reproduce` does all three for every run it
//! needs and joins them in `results/reproduce/`.

pub mod caption;
pub mod changepoint;
pub mod claim_kinds;
pub mod claims;
pub mod compare;
pub mod coverage;
pub mod data;
pub mod def;
pub mod distributions;
pub mod draw;
pub mod error;
pub mod extract;
pub mod fit;
pub mod font;
pub mod gate;
pub mod history;
pub mod interval;
pub mod png;
pub mod quantity;
pub mod report;
pub mod stats;
pub mod svg;
pub mod unit;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::IntoDrawingArea;

pub use claims::{ClaimResult, Verdict};
use data::RunData;
use def::FigureDef;
pub use error::FigureError;
use error::file_err;
use extract::PanelData;

/// One figure computed for one run.
pub struct Figure {
    pub def: FigureDef,
    /// Panel name → its data, in definition order.
    pub panels: Vec<(String, PanelData)>,
    pub caption: Vec<String>,
    /// Absent series, failed points, notes: listed under the figure.
    pub notes: Vec<String>,
    pub claims: Vec<ClaimResult>,
}

/// Every figure of a run.
pub struct RunFigures {
    pub run: RunData,
    pub figures: Vec<Figure>,
    /// Figure ids the spec lists that have no definition.
    pub unknown: Vec<String>,
}

/// What is listed under a figure: absent series and failed points (which
/// the image carries too, as it may travel alone), then data notes such as
/// filters that do not apply to this run (report only).
fn notes_for(panels: &[(String, PanelData)]) -> (Vec<String>, Vec<String>) {
    let mut key = Vec::new();
    let mut info = Vec::new();
    let mut failed_seen = Vec::new();
    let many = panels.len() > 1;
    for (name, d) in panels {
        let prefix = if many {
            format!("{name}: ")
        } else {
            String::new()
        };
        if let Some(why) = &d.unavailable {
            key.push(format!("{prefix}not measurable in this run: {why}"));
        } else if !d.absent.is_empty() {
            key.push(format!(
                "{prefix}not in this run: {} (absent from the plot, not zero)",
                d.absent.join(", ")
            ));
        }
        for f in &d.failed {
            if !failed_seen.contains(&f.id) {
                failed_seen.push(f.id.clone());
                key.push(format!(
                    "failed point {} ({}): {} — drawn as a gap",
                    f.id, f.params, f.error
                ));
            }
        }
        for n in &d.notes {
            info.push(format!("{prefix}{n}"));
        }
    }
    (key, info)
}

/// Computes one figure for a run.
pub fn figure(run: &RunData, def: &FigureDef) -> Result<Figure, FigureError> {
    let mut panels = Vec::new();
    for p in &def.panels {
        panels.push((p.name.clone(), extract::panel_data(run, p)?));
    }
    let refs: Vec<&PanelData> = panels.iter().map(|(_, d)| d).collect();
    let mut caption = caption::lines(def, run, &refs);
    let (key, info) = notes_for(&panels);
    const IN_IMAGE: usize = 4;
    caption.extend(key.iter().take(IN_IMAGE).cloned());
    if key.len() > IN_IMAGE {
        caption.push(format!(
            "… and {} more failed points or absent series, listed in report.html",
            key.len() - IN_IMAGE
        ));
    }
    let notes = key.into_iter().chain(info).collect();
    let claims = claims::evaluate_under(def, &panels, caption::under_tcg(run));
    Ok(Figure {
        def: def.clone(),
        panels,
        caption,
        notes,
        claims,
    })
}

/// Loads a run and computes every figure it feeds.
pub fn compute(
    run_dir: &Path,
    defs: &BTreeMap<String, FigureDef>,
) -> Result<RunFigures, FigureError> {
    let run = data::load(run_dir)?;
    let (known, unknown) = def::figures_for(&run.manifest.figures, &run.manifest.experiment, defs);
    let mut figures = Vec::new();
    for id in known {
        if let Some(d) = defs.get(&id) {
            figures.push(figure(&run, d)?);
        }
    }
    Ok(RunFigures {
        run,
        figures,
        unknown,
    })
}

fn view(fig: &Figure) -> draw::View<'_> {
    let panels = fig
        .def
        .panels
        .iter()
        .zip(fig.panels.iter().map(|(_, d)| d))
        .collect();
    draw::View {
        title: format!("{} — {}", fig.def.id, fig.def.title),
        panels,
        caption: fig.caption.clone(),
    }
}

pub fn render_svg(fig: &Figure) -> Result<String, FigureError> {
    font::register_with_plotters();
    let v = view(fig);
    let size = draw::size(&v);
    let mut out = String::new();
    let derr = |reason: String| FigureError::Draw {
        figure: fig.def.id.clone(),
        reason,
    };
    {
        let root = svg::SvgBackend::new(&mut out, size).into_drawing_area();
        draw::draw(&root, &v).map_err(|e| derr(e.to_string()))?;
        root.present().map_err(|e| derr(e.to_string()))?;
    }
    Ok(out)
}

pub fn render_png(fig: &Figure) -> Result<Vec<u8>, FigureError> {
    font::register_with_plotters();
    let v = view(fig);
    let size = draw::size(&v);
    let derr = |reason: String| FigureError::Draw {
        figure: fig.def.id.clone(),
        reason,
    };
    let mut buf = vec![255u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = png::PngBackend::new(&mut buf, size)
            .map_err(|e| derr(e.to_string()))?
            .into_drawing_area();
        draw::draw(&root, &v).map_err(|e| derr(e.to_string()))?;
        root.present().map_err(|e| derr(e.to_string()))?;
    }
    png::encode(&buf, size).map_err(|e| derr(e.to_string()))
}

/// The numbers a figure shows, as JSON beside the images.
pub fn figure_json(fig: &Figure) -> serde_json::Value {
    let panels: Vec<serde_json::Value> = fig
        .panels
        .iter()
        .map(|(name, d)| {
            serde_json::json!({
                "panel": name,
                "series": d.series,
                "absent": d.absent,
                "unavailable": d.unavailable,
                "failed": d.failed.iter().map(|f| serde_json::json!({
                    "id": f.id, "params": f.params, "error": f.error })).collect::<Vec<_>>(),
                "notes": d.notes,
            })
        })
        .collect();
    serde_json::json!({ "figure": fig.def.id, "title": fig.def.title, "panels": panels,
        "caption": fig.caption })
}

/// Writes an output file atomically, readable by all (figures and reports
/// are published, e.g. served or copied as CI artefacts).
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), FigureError> {
    use std::os::unix::fs::PermissionsExt;
    crate::host::fsutil::write_atomic(path, bytes).map_err(|e| file_err(path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| file_err(path, e))
}

/// What `plot` wrote.
pub struct Plotted {
    pub files: Vec<PathBuf>,
    pub unknown: Vec<String>,
    pub notes: Vec<(String, Vec<String>)>,
}

/// Writes every figure of a computed run under `RUN/figures/`.
pub fn write_figures(rf: &RunFigures) -> Result<Plotted, FigureError> {
    let dir = rf.run.dir.join("figures");
    std::fs::create_dir_all(&dir).map_err(|e| file_err(&dir, e))?;
    let mut files = Vec::new();
    let mut notes = Vec::new();
    for f in &rf.figures {
        let svg = render_svg(f)?;
        let png = render_png(f)?;
        let json = serde_json::to_vec_pretty(&figure_json(f))
            .map_err(|e| FigureError::Other(e.to_string()))?;
        for (ext, bytes) in [
            ("svg", svg.as_bytes()),
            ("png", png.as_slice()),
            ("json", json.as_slice()),
        ] {
            let p = dir.join(format!("{}.{ext}", f.def.id));
            write(&p, bytes)?;
            files.push(p);
        }
        notes.push((f.def.id.clone(), f.notes.clone()));
    }
    Ok(Plotted {
        files,
        unknown: rf.unknown.clone(),
        notes,
    })
}

/// Every claim of a computed run, written to `RUN/claims.json`.
pub fn write_claims(rf: &RunFigures) -> Result<Vec<ClaimResult>, FigureError> {
    let all: Vec<ClaimResult> = rf.figures.iter().flat_map(|f| f.claims.clone()).collect();
    let doc = serde_json::json!({
        "experiment": rf.run.manifest.experiment,
        "run_id": rf.run.manifest.run_id,
        "claims": all,
    });
    let text = serde_json::to_vec_pretty(&doc).map_err(|e| FigureError::Other(e.to_string()))?;
    write(&rf.run.dir.join("claims.json"), &text)?;
    Ok(all)
}

/// `testbed plot RUN`.
pub fn plot_run(run_dir: &Path, defs_dir: &Path) -> Result<Plotted, FigureError> {
    let defs = def::load_all(defs_dir)?;
    write_figures(&compute(run_dir, &defs)?)
}

/// `testbed check RUN`.
pub fn check_run(
    run_dir: &Path,
    defs_dir: &Path,
) -> Result<(Vec<ClaimResult>, Vec<String>), FigureError> {
    let defs = def::load_all(defs_dir)?;
    let rf = compute(run_dir, &defs)?;
    Ok((write_claims(&rf)?, rf.unknown))
}

/// Every claim of a run, computed without writing into its directory (a
/// baseline is read, never changed).
pub fn claims_of(run_dir: &Path, defs_dir: &Path) -> Result<Vec<ClaimResult>, FigureError> {
    let defs = def::load_all(defs_dir)?;
    let rf = compute(run_dir, &defs)?;
    Ok(rf.figures.into_iter().flat_map(|f| f.claims).collect())
}

/// `testbed report RUN`: figures, claims and report.html.
pub fn report_run(run_dir: &Path, defs_dir: &Path) -> Result<PathBuf, FigureError> {
    let defs = def::load_all(defs_dir)?;
    let rf = compute(run_dir, &defs)?;
    write_figures(&rf)?;
    write_claims(&rf)?;
    let html = report::run_page(&rf)?;
    let out = run_dir.join("report.html");
    write(&out, html.as_bytes())?;
    Ok(out)
}
