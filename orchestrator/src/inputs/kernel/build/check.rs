//! Check that every option a fragment asked for is in the final `.config`;
//! Kconfig silently drops options whose dependencies are off, so explain each
//! dropped one by its unmet `depends on`.

use std::collections::BTreeMap;
use std::path::Path;

use super::configfile::Request;
use super::kconfig::{Expr, Kconfig, sym_value};

/// A requested option the final config does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub request: Request,
    /// Final value (`n` when unset).
    pub got: String,
    /// Why, naming the missing dependency when there is one.
    pub reason: String,
}

/// Requests not honoured by `final_cfg`.
pub fn check(
    requests: &[Request],
    final_cfg: &BTreeMap<String, String>,
    kc: &Kconfig,
) -> Vec<Dropped> {
    requests
        .iter()
        .filter_map(|r| {
            let got = final_cfg
                .get(&r.symbol)
                .cloned()
                .unwrap_or_else(|| "n".into());
            if same_value(&r.value, &got) {
                None
            } else {
                Some(Dropped {
                    request: r.clone(),
                    reason: explain(r, &got, final_cfg, kc),
                    got,
                })
            }
        })
        .collect()
}

fn same_value(want: &str, got: &str) -> bool {
    want.trim_matches('"') == got.trim_matches('"')
}

fn explain(r: &Request, got: &str, cfg: &BTreeMap<String, String>, kc: &Kconfig) -> String {
    let Some(defs) = kc.defs.get(&r.symbol) else {
        return format!(
            "no option {} exists in this kernel's Kconfig (misspelt, or not in this version)",
            r.symbol
        );
    };
    if r.value == "n" {
        let on: Vec<String> = kc
            .selectors(&r.symbol)
            .into_iter()
            .filter(|s| sym_value(s, cfg) != "n")
            .map(|s| format!("{s}={}", sym_value(s, cfg)))
            .collect();
        return if on.is_empty() {
            "it is forced on by a default or a choice".into()
        } else {
            format!("it is forced on: selected by {}", on.join(", "))
        };
    }
    // The definition whose dependencies come closest to being met.
    let mut best: Option<(usize, Vec<&Expr>, &Path, usize)> = None;
    let mut weakest = 2;
    for d in defs {
        let mut parts = Vec::new();
        for e in &d.depends {
            e.failing_parts(cfg, &mut parts);
            weakest = weakest.min(e.eval(cfg));
        }
        let hard: Vec<&Expr> = parts.into_iter().filter(|e| e.eval(cfg) == 0).collect();
        if best.as_ref().is_none_or(|b| hard.len() < b.0) {
            best = Some((hard.len(), hard, &d.file, d.line));
        }
    }
    match best {
        Some((n, parts, file, line)) if n > 0 => {
            let shown: Vec<String> = parts.iter().map(|e| describe(e, cfg)).collect();
            format!(
                "missing dependency: {} [{}:{line}]",
                shown.join("; "),
                file.display()
            )
        }
        _ if r.value == "y" && weakest == 1 && got == "m" => {
            "its dependencies allow only m (one of them is a module)".into()
        }
        _ if defs.iter().all(|d| !d.has_prompt) => format!(
            "{} has no prompt: only a `select` from another option can set it",
            r.symbol
        ),
        _ => format!(
            "its dependencies are met; got {} (limited by a choice, a range or another fragment)",
            shown_value(got)
        ),
    }
}

/// `MODULES (is not set)`, `PCI || NET (PCI is not set, NET is not set)`.
fn describe(e: &Expr, cfg: &BTreeMap<String, String>) -> String {
    let vals: Vec<String> = e
        .symbols()
        .into_iter()
        .map(|s| {
            let v = sym_value(s, cfg);
            if matches!(e, Expr::Sym(_)) {
                shown_value(&v)
            } else {
                format!("{s} {}", shown_value(&v))
            }
        })
        .collect();
    if vals.is_empty() {
        e.to_string()
    } else {
        format!("{e} ({})", vals.join(", "))
    }
}

fn shown_value(v: &str) -> String {
    if v == "n" {
        "is not set".into()
    } else {
        format!("is {v}")
    }
}

/// The text of a failed check, one line per dropped option.
pub fn report(dropped: &[Dropped], root: &Path) -> String {
    dropped
        .iter()
        .map(|d| {
            let r = &d.request;
            let file = r.file.strip_prefix(root).unwrap_or(&r.file);
            let asked = if r.value == "n" {
                format!("# CONFIG_{} is not set", r.symbol)
            } else {
                format!("CONFIG_{}={}", r.symbol, r.value)
            };
            let got = if d.got == "n" {
                "it is not set in the final .config".to_string()
            } else {
                format!("the final .config has CONFIG_{}={}", r.symbol, d.got)
            };
            format!(
                "  {asked} ({}:{}), but {got}: {}",
                file.display(),
                r.line,
                d.reason
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::super::configfile::{effective, merge, parse_config, parse_fragment};
    use super::*;

    /// A small Kconfig tree shaped like 6.1's for the options at stake.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Kconfig"),
            "config MODULES\n\tbool \"modules\"\n\n\
             config HAVE_KPROBES\n\tdef_bool y\n\n\
             config KPROBES\n\tbool \"Kprobes\"\n\tdepends on MODULES\n\tdepends on HAVE_KPROBES\n\tselect KALLSYMS\n\n\
             config KALLSYMS\n\tbool \"kallsyms\" if EXPERT\n\n\
             config PCI\n\tbool \"PCI\"\n\n\
             menuconfig VIRTIO_MENU\n\tbool \"Virtio drivers\"\n\nif VIRTIO_MENU\n\
             config VIRTIO_PCI\n\ttristate \"PCI driver for virtio devices\"\n\tdepends on PCI\n\
             endif\n\
             config VIRTIO_ANCHOR\n\tbool\n",
        )
        .unwrap();
        dir
    }

    fn run(fragment: &str, final_config: &str) -> String {
        let t = tree();
        let kc = Kconfig::load(t.path(), "x86").unwrap();
        let frag = t.path().join("fragments/vm.config");
        let req = effective(&parse_fragment(&frag, fragment).unwrap());
        let dropped = check(&req, &parse_config(final_config), &kc);
        report(&dropped, t.path())
    }

    #[test]
    fn dropped_option_names_its_missing_dependency() {
        let rep = run(
            "CONFIG_KPROBES=y\nCONFIG_PCI=y\n",
            "CONFIG_PCI=y\nCONFIG_HAVE_KPROBES=y\n# CONFIG_MODULES is not set\n",
        );
        assert_eq!(rep.lines().count(), 1, "{rep}");
        assert!(
            rep.contains("CONFIG_KPROBES=y (fragments/vm.config:1)")
                && rep.contains("missing dependency: MODULES (is not set)")
                && rep.contains("[Kconfig:7]"),
            "{rep}"
        );
    }

    #[test]
    fn enclosing_if_is_a_dependency() {
        let rep = run("CONFIG_VIRTIO_PCI=y\n", "CONFIG_PCI=y\n");
        assert!(rep.contains("CONFIG_VIRTIO_PCI=y"), "{rep}");
        assert!(
            rep.contains("missing dependency: VIRTIO_MENU (is not set)"),
            "{rep}"
        );
        // Once the menu is on, nothing is reported.
        let ok = run(
            "CONFIG_VIRTIO_MENU=y\nCONFIG_VIRTIO_PCI=y\n",
            "CONFIG_PCI=y\nCONFIG_VIRTIO_MENU=y\nCONFIG_VIRTIO_PCI=y\n",
        );
        assert!(ok.is_empty(), "{ok}");
    }

    #[test]
    fn promptless_typo_and_forced_on() {
        let rep = run(
            "CONFIG_VIRTIO_ANCHOR=y\nCONFIG_VIRTIO_PCII=y\n# CONFIG_KALLSYMS is not set\n",
            "CONFIG_KPROBES=y\nCONFIG_KALLSYMS=y\n",
        );
        let lines: Vec<&str> = rep.lines().collect();
        assert_eq!(lines.len(), 3, "{rep}");
        assert!(lines[0].contains("VIRTIO_ANCHOR has no prompt"), "{rep}");
        assert!(lines[1].contains("no option VIRTIO_PCII exists"), "{rep}");
        assert!(lines[2].contains("selected by KPROBES=y"), "{rep}");
    }

    #[test]
    fn merge_then_check_round_trip() {
        let req = effective(&parse_fragment(Path::new("f"), "CONFIG_PCI=y\n").unwrap());
        let merged = merge("# CONFIG_PCI is not set\n", &req);
        let kc = Kconfig::default();
        assert!(check(&req, &parse_config(&merged), &kc).is_empty());
    }
}
