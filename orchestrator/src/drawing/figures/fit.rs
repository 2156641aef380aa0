//! Whether a figure can be drawn from what a spec's workload emits: its
//! metric (raw or summary, as the workload declares it) and every column it
//! names (`param_<name>`: a workload field or sweep axis; `tag_<key>`: a
//! tag the metric carries). `testbed validate` reports each misfit before
//! anything runs.

use std::collections::BTreeSet;

use super::def::{FigureDef, MetricKind};
use crate::planning::plan::Plan;
use crate::recording::results::columns;

/// One line per misfit: "figure F, panel P: …".
pub fn misfits(def: &FigureDef, plan: &Plan) -> Vec<String> {
    let mut params: BTreeSet<String> = BTreeSet::new();
    // A figure may draw against the VM's vCPUs: a `vm.vcpus` sweep's column
    // (a run without that axis draws such a panel empty, with a note).
    params.insert(columns::column_name(
        "param",
        crate::planning::plan::VCPUS_AXIS,
    ));
    let mut metrics = Vec::new();
    for p in &plan.points {
        for name in columns::point_params(&p.workload.resolved(), &p.params).keys() {
            params.insert(columns::column_name("param", name));
        }
        metrics.extend(p.workload.metrics());
    }
    let mut out = Vec::new();
    for panel in &def.panels {
        let at = format!("figure {}, panel {}", def.id, panel.name);
        let summary = panel.y.kind == MetricKind::Summary;
        let emitted: Vec<_> = metrics
            .iter()
            .filter(|m| m.name == panel.y.metric && m.summary == summary)
            .collect();
        if emitted.is_empty() {
            let kinds: BTreeSet<&str> = plan.points.iter().map(|p| p.workload.kind()).collect();
            out.push(format!(
                "{at}: no {} metric {:?} in what the workload ({}) emits",
                if summary { "summary" } else { "raw" },
                panel.y.metric,
                kinds.into_iter().collect::<Vec<_>>().join(", ")
            ));
            continue;
        }
        let tags: BTreeSet<String> = emitted
            .iter()
            .flat_map(|m| m.tags.iter().map(|t| columns::column_name("tag", t)))
            .chain(
                panel
                    .summary_tag
                    .iter()
                    .map(|t| columns::column_name("tag", t)),
            )
            .collect();
        let named = std::iter::once(&panel.x.column)
            .chain(&panel.series.columns)
            .chain(panel.ratio.iter().map(|r| &r.column));
        for c in named {
            let known = if c.starts_with("tag_") {
                tags.contains(c)
            } else {
                params.contains(c)
            };
            if !known {
                out.push(format!(
                    "{at}: column {c} is not in what the workload emits for {}",
                    panel.y.metric
                ));
            }
        }
    }
    out
}

/// Misfits of every defined figure the spec names.
pub fn spec_misfits(
    figures: &[String],
    plan: &Plan,
    defs: &std::collections::BTreeMap<String, FigureDef>,
) -> Vec<String> {
    figures
        .iter()
        .filter_map(|f| defs.get(f))
        .flat_map(|d| misfits(d, plan))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(panel: &str) -> FigureDef {
        toml::from_str(&format!(
            "id = \"t\"\ntitle = \"T\"\nfamily = \"testbed\"\n[[panels]]\nname = \"p\"\n{panel}"
        ))
        .unwrap()
    }

    fn smoke_plan() -> Plan {
        let spec = crate::host::paths::repo_root().join("experiments/smoke.toml");
        crate::planning::plan::plan(&crate::planning::spec::load(&spec).unwrap()).unwrap()
    }

    #[test]
    fn a_figure_that_fits_has_no_misfits() {
        let d = def("x = { column = \"param_threads\", label = \"t\" }\n\
             y = { metric = \"read_latency\", kind = \"raw\", label = \"l\" }\n\
             series = { columns = [\"param_block_size\"] }");
        assert_eq!(misfits(&d, &smoke_plan()), Vec::<String>::new());
    }

    #[test]
    fn a_missing_metric_or_column_is_named() {
        let plan = smoke_plan();
        let d = def("x = { column = \"param_threads\", label = \"t\" }\n\
             y = { metric = \"lookups_per_s\", kind = \"summary\", label = \"l\" }");
        let m = misfits(&d, &plan);
        assert!(
            m[0].contains("summary metric \"lookups_per_s\"") && m[0].contains("randread"),
            "{m:?}"
        );
        let d = def("x = { column = \"param_depth\", label = \"t\" }\n\
             y = { metric = \"read_latency\", kind = \"raw\", label = \"l\" }\n\
             series = { columns = [\"tag_engine\"] }");
        let m = misfits(&d, &plan);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].contains("param_depth") && m[1].contains("tag_engine"),
            "{m:?}"
        );
    }
}
