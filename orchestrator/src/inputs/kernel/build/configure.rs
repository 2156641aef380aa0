//! Configure a tree: base config, fragments on top, `olddefconfig`, then check
//! that every requested option survived.

use std::path::{Path, PathBuf};

use super::check;
use super::configfile::{self, Request};
use super::kconfig::Kconfig;
use super::{KTree, run};
use crate::inputs::kernel::KernelError;

/// Requests of all fragments, later ones overriding earlier ones.
pub fn requests(fragments: &[PathBuf]) -> Result<Vec<Request>, KernelError> {
    let mut all = Vec::new();
    for f in fragments {
        let text = std::fs::read_to_string(f).map_err(|e| KernelError::io(f, e))?;
        all.extend(configfile::parse_fragment(f, &text)?);
    }
    Ok(configfile::effective(&all))
}

/// Writes the final `.config` in `tree`; fails listing every dropped option.
pub fn configure(
    tree: &KTree,
    base: &str,
    requests: &[Request],
    configs_dir: &Path,
    descriptor: &Path,
    log: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), KernelError> {
    progress(&format!(
        "configuring: {base} + {} requested options",
        requests.len()
    ));
    run::run(&mut tree.make(&[base]), &tree.src, log, &mut |_| {})?;
    let config = tree.obj.join(".config");
    let text = std::fs::read_to_string(&config).map_err(|e| KernelError::io(&config, e))?;
    let merged = configfile::merge(&text, requests);
    std::fs::write(&config, merged).map_err(|e| KernelError::io(&config, e))?;
    run::run(
        &mut tree.make(&["olddefconfig"]),
        &tree.src,
        log,
        &mut |_| {},
    )?;

    let text = std::fs::read_to_string(&config).map_err(|e| KernelError::io(&config, e))?;
    let final_cfg = configfile::parse_config(&text);
    let kc = Kconfig::load(&tree.src, super::SRCARCH)?;
    let dropped = check::check(requests, &final_cfg, &kc);
    if dropped.is_empty() {
        progress(&format!(
            "config check: all {} requested options set",
            requests.len()
        ));
        return Ok(());
    }
    Err(KernelError::ConfigDropped {
        descriptor: descriptor.to_path_buf(),
        report: format!(
            "{} requested option(s) did not make it into the final .config (Kconfig drops options whose dependencies are off):\n{}",
            dropped.len(),
            check::report(&dropped, configs_dir)
        ),
    })
}
