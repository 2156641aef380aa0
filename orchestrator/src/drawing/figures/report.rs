//! report.html: one self-contained page per run (and one joining every run
//! of `testbed reproduce`): figures as SVG data URIs, claims with their
//! numbers, the manifest, links to the raw files. No external resources.

use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::claims::{ClaimResult, Verdict};
use super::data::RunData;
use super::error::FigureError;
use super::svg::escape;
use super::{Figure, RunFigures, caption, render_svg};

const STYLE: &str = "
body{font-family:'DejaVu Sans',Verdana,Arial,sans-serif;margin:24px auto;max-width:1340px;color:#222;line-height:1.4;padding:0 16px}
h1{font-size:24px}h2{font-size:20px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:36px}h3{font-size:17px}
figure{margin:18px 0 30px 0}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:13px;color:#333}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 7px;vertical-align:top;text-align:left}
th{background:#f3f3f3}.v-holds{background:#dcf2dc}.v-does-not-hold{background:#f8d7d7}.v-undecided{background:#fbf0c9}.v-not-measurable{background:#eee;color:#555}
.notes li{font-size:13px}pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto;white-space:pre-wrap}
.small{font-size:12px;color:#555}
";

/// Counts the figures that really rendered, for people and for the
/// headless-browser check (`#figure-check`), and logs any that did not.
const SCRIPT: &str = "
window.addEventListener('load',function(){
var imgs=document.querySelectorAll('img.figure');var ok=0;
for(var i=0;i<imgs.length;i++){var im=imgs[i];
if(im.complete&&im.naturalWidth>0){ok++;}else{console.error('figure did not render: '+im.alt);}}
var s=document.getElementById('figure-check');
if(s){s.textContent=ok+' of '+imgs.length+' figures rendered';s.setAttribute('data-rendered',ok);s.setAttribute('data-total',imgs.length);}
});
";

/// The `data:` URI of an SVG image: the standard, padded base64 alphabet
/// (RFC 4648 section 4) that RFC 2397 data URIs take.
fn svg_data_uri(svg: &str) -> String {
    format!("data:image/svg+xml;base64,{}", BASE64.encode(svg))
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Holds => "v-holds",
        Verdict::DoesNotHold => "v-does-not-hold",
        Verdict::Undecided => "v-undecided",
        Verdict::NotMeasurable => "v-not-measurable",
    }
}

/// One line of a claims table: the run it belongs to (joined page only),
/// the anchor prefix of its figure, the claim.
pub struct ClaimRow<'a> {
    pub run: Option<String>,
    pub anchor: String,
    pub claim: &'a ClaimResult,
}

/// The claims table; a run column appears when rows name their runs.
pub fn claims_table(rows: &[ClaimRow<'_>]) -> String {
    if rows.is_empty() {
        return "<p class=\"small\">No claims.</p>\n".into();
    }
    let with_run = rows.iter().any(|r| r.run.is_some());
    let mut s = String::from("<table class=\"claims\">\n<tr>");
    if with_run {
        s.push_str("<th>run</th>");
    }
    s.push_str(
        "<th>verdict</th><th>figure</th><th>claim</th><th>estimate [interval: confidence, method] against bound</th><th>numbers it was decided on</th></tr>\n",
    );
    for row in rows {
        let c = row.claim;
        s.push_str(&format!("<tr class=\"{}\">", verdict_class(c.verdict)));
        if with_run {
            let _ = write!(s, "<td>{}</td>", escape(row.run.as_deref().unwrap_or("")));
        }
        let _ = writeln!(
            s,
            "<td>{}</td><td><a href=\"#{}fig-{}\">{}</a></td><td>{}<br><span class=\"small\">{} · {}</span></td><td>{}</td><td>{}</td></tr>",
            c.verdict.text(),
            escape(&row.anchor),
            escape(&c.figure),
            escape(&c.figure),
            escape(&c.text),
            escape(&c.id),
            escape(c.kind.name()),
            escape(&c.interval_text().unwrap_or_default()),
            escape(&c.numbers)
        );
    }
    s.push_str("</table>\n");
    let _ = writeln!(
        s,
        "<p class=\"small\">{}</p>",
        escape(&super::claims::count_line(rows.iter().map(|r| r.claim)))
    );
    s
}

fn figure_block(f: &Figure, anchor: &str, link_base: &str) -> Result<String, FigureError> {
    let svg = render_svg(f)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<figure id=\"{}\" class=\"testbed-figure\" data-figure=\"{}\">",
        escape(anchor),
        escape(&f.def.id)
    );
    let _ = writeln!(
        s,
        "<img class=\"figure\" alt=\"{} — {}\" src=\"{}\">",
        escape(&f.def.id),
        escape(&f.def.title),
        svg_data_uri(&svg)
    );
    s.push_str("<figcaption>\n");
    for line in &f.caption {
        let _ = writeln!(s, "<p>{}</p>", escape(line));
    }
    let _ = writeln!(
        s,
        "<p class=\"small\">Files: <a href=\"{b}figures/{id}.svg\">SVG</a> · <a href=\"{b}figures/{id}.png\">PNG</a> · \
         <a href=\"{b}figures/{id}.json\">numbers (JSON)</a> · definition <code>experiments/figures/{id}.toml</code></p>",
        b = escape(link_base),
        id = escape(&f.def.id)
    );
    s.push_str("</figcaption>\n");
    if !f.notes.is_empty() {
        s.push_str("<ul class=\"notes\">\n");
        for n in &f.notes {
            let _ = writeln!(s, "<li>{}</li>", escape(n));
        }
        s.push_str("</ul>\n");
    }
    let prefix = anchor
        .strip_suffix(&format!("fig-{}", f.def.id))
        .unwrap_or("");
    let rows: Vec<ClaimRow<'_>> = f
        .claims
        .iter()
        .map(|c| ClaimRow {
            run: None,
            anchor: prefix.to_string(),
            claim: c,
        })
        .collect();
    s.push_str(&claims_table(&rows));
    s.push_str("</figure>\n");
    Ok(s)
}

fn json_str(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        serde_json::Value::Array(a) => a.iter().map(json_str).collect::<Vec<_>>().join("; "),
        o => o.to_string(),
    }
}

fn manifest_table(run: &RunData) -> String {
    let m = &run.manifest;
    let mut rows: Vec<(&str, String)> = vec![
        ("experiment", m.experiment.clone()),
        ("run id", m.run_id.clone()),
        ("status", format!("{:?}", m.status).to_lowercase()),
        (
            "spec",
            format!("{} (sha256 {})", m.spec_file, m.spec_sha256),
        ),
        ("executor", m.executor.clone()),
        ("accelerator", caption::accelerator(run)),
    ];
    if let Some(a) = &m.accel {
        rows.push(("accelerator: why", a.reasons.join("; ")));
    }
    rows.push(("timing", m.timing_note.clone()));
    rows.push(("kernel", caption::kernel(run)));
    if let Some(k) = &m.inputs.kernel {
        rows.push(("input", format!("kernel: {}", k.key)));
    }
    for (name, v) in &m.inputs.files {
        let sha = v.get("sha256").or_else(|| v.get("key")).map(json_str);
        rows.push((
            "input",
            format!("{name}: {}", sha.unwrap_or_else(|| json_str(v))),
        ));
    }
    rows.push(("devices", caption::devices(run)));
    if let Some(v) = caption::vm(run) {
        rows.push(("VM", v));
    }
    if let Some(n) = caption::host_noise(run) {
        rows.push(("host noise", n));
    }
    if let Some(g) = &m.guest {
        rows.push(("guest", g.uname.clone()));
        rows.push(("guest cmdline", g.cmdline.clone()));
    }
    let h = &m.host;
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    rows.push((
        "host",
        format!(
            "{}, {} CPUs, {} KiB; kernel {}; {}",
            h.cpu_model,
            h.cpus,
            h.memory_kib,
            h.kernel,
            or_dash(h.qemu_version.clone())
        ),
    ));
    rows.push((
        "source",
        format!(
            "git {} (dirty: {}); testbed {}",
            or_dash(h.git_commit.clone()),
            or_dash(h.git_dirty.map(|d| d.to_string())),
            m.testbed_version
        ),
    ));
    rows.push((
        "seeds",
        format!(
            "spec seed {}; point seeds: {}",
            m.seed,
            m.points
                .iter()
                .map(|p| format!("{}={}", p.id, p.seed))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    let ok = m.points.iter().filter(|p| p.ok).count();
    rows.push((
        "points",
        format!("{ok} finished, {} failed", m.points.len() - ok),
    ));
    rows.push((
        "time",
        format!(
            "{} → {} ({} s)",
            m.started_at,
            m.finished_at.as_deref().unwrap_or("-"),
            m.wall_s.map_or("-".into(), |w| format!("{w:.1}"))
        ),
    ));
    let mut s = String::from("<table class=\"manifest\">\n");
    for (k, v) in rows {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
    }
    s.push_str("</table>\n");
    if !m.qemu_argv.is_empty() {
        let _ = writeln!(
            s,
            "<details><summary>QEMU command line</summary><pre>{}</pre></details>",
            escape(&m.qemu_argv.join(" "))
        );
    }
    let full = serde_json::to_string_pretty(m).unwrap_or_default();
    let _ = writeln!(
        s,
        "<details><summary>manifest.json (complete)</summary><pre>{}</pre></details>",
        escape(&full)
    );
    s
}

/// What each point cost the host (its record's `host_cost`): CPU time and
/// peak memory, with bars scaled to the run's largest, so that a
/// CPU-starved or memory-hungry point stands out; "" when no point has it.
fn host_cost_panel(run: &RunData) -> String {
    let costs: Vec<(&str, String, &crate::machine::hostcost::HostCost)> = run
        .manifest
        .points
        .iter()
        .filter_map(|p| {
            let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            Some((p.id.as_str(), params.join(" "), p.host_cost.as_ref()?))
        })
        .collect();
    if costs.is_empty() {
        return String::new();
    }
    let cpu = |c: &crate::machine::hostcost::HostCost| c.cpu_user_s + c.cpu_system_s;
    let max_cpu = costs.iter().map(|(_, _, c)| cpu(c)).fold(0.0, f64::max);
    let max_mem = costs
        .iter()
        .filter_map(|(_, _, c)| c.peak_rss_mib)
        .fold(0.0, f64::max);
    let bar = |v: f64, max: f64| {
        let pct = if max > 0.0 { 100.0 * v / max } else { 0.0 };
        format!(
            "<span class=\"bar\" style=\"display:inline-block;height:0.7em;background:#4a7ab5;width:{pct:.0}px\"></span>"
        )
    };
    let mut s = String::from(
        "<details open><summary>Host cost per point (CPU time and peak memory of the run's processes)</summary>\n\
         <table class=\"host-cost\">\n<tr><th>point</th><th>parameters</th><th>CPU user s</th><th>CPU system s</th><th></th><th>peak MiB</th><th></th></tr>\n",
    );
    for (id, params, c) in &costs {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(id),
            escape(params),
            c.cpu_user_s,
            c.cpu_system_s,
            bar(cpu(c), max_cpu),
            c.peak_rss_mib.map_or("-".into(), |m| format!("{m:.1}")),
            c.peak_rss_mib.map_or(String::new(), |m| bar(m, max_mem)),
        );
    }
    let _ = writeln!(
        s,
        "</table>\n<p>Measured from: {}.</p></details>",
        escape(&costs[0].2.source)
    );
    s
}

fn raw_links(run: &RunData, base: &str) -> String {
    let mut links = Vec::new();
    for f in [
        "manifest.json",
        "samples.parquet",
        "claims.json",
        "spec.toml",
        "console.log",
        "qemu.log",
    ] {
        if run.dir.join(f).exists() || f == "claims.json" {
            links.push(format!("<a href=\"{}{f}\">{f}</a>", escape(base)));
        }
    }
    if run.dir.join("points").is_dir() {
        links.push(format!("<a href=\"{}points/\">points/</a>", escape(base)));
    }
    format!("<p>Raw data: {}</p>\n", links.join(" · "))
}

/// The section of one run; `anchor_prefix` keeps ids unique on a joined page.
pub fn run_section(
    rf: &RunFigures,
    link_base: &str,
    anchor_prefix: &str,
    level: u8,
) -> Result<String, FigureError> {
    let m = &rf.run.manifest;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<h{level} id=\"{}run\">{} / {}</h{level}>",
        escape(anchor_prefix),
        escape(&m.experiment),
        escape(&m.run_id)
    );
    s.push_str(&raw_links(&rf.run, link_base));
    s.push_str(&manifest_table(&rf.run));
    s.push_str(&host_cost_panel(&rf.run));
    if !rf.unknown.is_empty() {
        let _ = writeln!(
            s,
            "<p>Figure ids in the spec without a definition in experiments/figures/: {}</p>",
            escape(&rf.unknown.join(", "))
        );
    }
    if rf.figures.is_empty() {
        s.push_str("<p>This run feeds no defined figure.</p>\n");
    }
    for f in &rf.figures {
        let anchor = format!("{anchor_prefix}fig-{}", f.def.id);
        s.push_str(&figure_block(f, &anchor, link_base)?);
    }
    Ok(s)
}

/// report.html of one run.
pub fn run_page(rf: &RunFigures) -> Result<String, FigureError> {
    let m = &rf.run.manifest;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>testbed report: {} / {}</h1>\n<p id=\"figure-check\">figures not checked (scripts off)</p>",
        escape(&m.experiment),
        escape(&m.run_id)
    );
    let rows: Vec<ClaimRow<'_>> = rf
        .figures
        .iter()
        .flat_map(|f| f.claims.iter())
        .map(|c| ClaimRow {
            run: None,
            anchor: String::new(),
            claim: c,
        })
        .collect();
    body.push_str("<h2>Claims</h2>\n");
    body.push_str(&claims_table(&rows));
    body.push_str("<h2>Run</h2>\n");
    body.push_str(&run_section(rf, "", "", 3)?);
    Ok(page(&format!("testbed report {}", m.experiment), &body))
}

/// One line of the reproduce summary: a spec and what became of it.
pub struct SpecOutcome {
    pub spec: String,
    pub run: Option<RunLink>,
    pub error: Option<String>,
}

pub struct RunLink {
    /// Link to the run directory from the joined page.
    pub href: String,
    pub figures: RunFigures,
}

/// One claim of a reproduction, decided once over the runs that feed its
/// figure.
#[derive(Debug, Clone)]
pub struct JoinedClaim {
    /// Index of the outcome (run) it was decided on.
    pub outcome: usize,
    pub experiment: String,
    /// Link to that run from results/reproduce/.
    pub run: String,
    pub claim: ClaimResult,
    /// Every run that checked it (experiment names, in order).
    pub checked_in: Vec<String>,
}

/// Each (figure, claim id) once: decided on a run that measured it (its
/// own verdict is not "not measurable here"), of those the one whose
/// interval rests on the most repetitions, the first on a tie. Which one
/// is chosen never depends on the verdict, so no run is picked for
/// agreeing. `requires` are then applied across the joined claims.
pub fn join_claims(outcomes: &[SpecOutcome]) -> Vec<JoinedClaim> {
    let mut out: Vec<JoinedClaim> = Vec::new();
    let measured = |c: &ClaimResult| c.own.0 != Verdict::NotMeasurable;
    for (i, o) in outcomes.iter().enumerate() {
        let Some(r) = &o.run else { continue };
        let exp = &r.figures.run.manifest.experiment;
        for c in r.figures.figures.iter().flat_map(|f| f.claims.iter()) {
            let candidate = JoinedClaim {
                outcome: i,
                experiment: exp.clone(),
                run: r.href.clone(),
                claim: c.clone(),
                checked_in: vec![exp.clone()],
            };
            let Some(k) = out
                .iter()
                .position(|j| j.claim.figure == c.figure && j.claim.id == c.id)
            else {
                out.push(candidate);
                continue;
            };
            let j = &mut out[k];
            j.checked_in.push(exp.clone());
            let better = match (measured(&j.claim), measured(c)) {
                (false, true) => true,
                (true, true) => c.repetitions.unwrap_or(0) > j.claim.repetitions.unwrap_or(0),
                _ => false,
            };
            if better {
                let checked_in = std::mem::take(&mut j.checked_in);
                *j = JoinedClaim {
                    checked_in,
                    ..candidate
                };
            }
        }
    }
    let mut claims: Vec<ClaimResult> = out.iter().map(|j| j.claim.clone()).collect();
    super::claims::apply_requires(&mut claims);
    for (j, c) in out.iter_mut().zip(claims) {
        j.claim = c;
    }
    out
}

/// results/reproduce/report.html: every run of a reproduce.
pub fn joined_page(outcomes: &[SpecOutcome], target: &str) -> Result<String, FigureError> {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>testbed reproduce {}</h1>\n<p id=\"figure-check\">figures not checked (scripts off)</p>",
        escape(target)
    );
    body.push_str("<h2>Specs</h2>\n<table>\n<tr><th>spec</th><th>run</th><th>status</th><th>figures</th></tr>\n");
    for (i, o) in outcomes.iter().enumerate() {
        match (&o.run, &o.error) {
            (Some(r), _) => {
                let m = &r.figures.run.manifest;
                let figs: Vec<String> = r
                    .figures
                    .figures
                    .iter()
                    .map(|f| format!("<a href=\"#r{i}-fig-{0}\">{0}</a>", escape(&f.def.id)))
                    .collect();
                let _ = writeln!(
                    body,
                    "<tr><td>{}</td><td><a href=\"#r{i}-run\">{} / {}</a> (<a href=\"{}report.html\">own report</a>)</td><td>{}</td><td>{}</td></tr>",
                    escape(&o.spec),
                    escape(&m.experiment),
                    escape(&m.run_id),
                    escape(&r.href),
                    escape(&format!("{:?}", m.status).to_lowercase()),
                    figs.join(", ")
                );
            }
            (None, e) => {
                let _ = writeln!(
                    body,
                    "<tr class=\"v-does-not-hold\"><td>{}</td><td>-</td><td>not run: {}</td><td></td></tr>",
                    escape(&o.spec),
                    escape(e.as_deref().unwrap_or("unknown error"))
                );
            }
        }
    }
    body.push_str("</table>\n<h2>Claims</h2>\n");
    let joined = join_claims(outcomes);
    let rows: Vec<ClaimRow<'_>> = joined
        .iter()
        .map(|j| ClaimRow {
            run: Some(j.experiment.clone()),
            anchor: format!("r{}-", j.outcome),
            claim: &j.claim,
        })
        .collect();
    body.push_str(&claims_table(&rows));
    body.push_str("<h2>Runs</h2>\n");
    for (i, o) in outcomes.iter().enumerate() {
        if let Some(r) = &o.run {
            body.push_str(&run_section(&r.figures, &r.href, &format!("r{i}-"), 3)?);
        }
    }
    Ok(page(&format!("testbed reproduce {target}"), &body))
}

#[cfg(test)]
mod tests {
    #[test]
    fn svg_data_uris_use_the_standard_padded_alphabet() {
        let b64 = |s: &str| {
            super::svg_data_uri(s)
                .strip_prefix("data:image/svg+xml;base64,")
                .map(str::to_string)
        };
        assert_eq!(b64("foobar").as_deref(), Some("Zm9vYmFy"));
        assert_eq!(b64("fo").as_deref(), Some("Zm8="));
        // '+' and '/', not the URL-safe '-' and '_'.
        assert_eq!(b64("~~~").as_deref(), Some("fn5+"));
        assert_eq!(b64("???").as_deref(), Some("Pz8/"));
    }
}
