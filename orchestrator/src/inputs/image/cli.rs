//! `testbed image build NAME` and `testbed image list`.

use std::time::Instant;

use super::recipe;
use super::rootfs::{self, RootfsError};

/// Builds (or finds) the image of recipe `name`; what to print.
pub fn build(name: &str) -> Result<String, RootfsError> {
    let started = Instant::now();
    let r = recipe::load(&super::recipes_dir(), name)?;
    let cache = crate::host::paths::cache_root();
    let built = crate::host::phases::time("images", || {
        rootfs::ensure(&r, &cache, &mut |s| eprintln!("[testbed] image: {s}"))
    })?;
    let how = if built.built_now {
        "built"
    } else {
        "in the cache"
    };
    Ok(format!(
        "{name} {how}\n  key     {}\n  path    {}\n  size    {}\n  recipe  {}\n  packages {} installed ({} named)\n  time    {:.1} s\n",
        built.info.key,
        built.path.display(),
        mib(built.info.bytes),
        built.info.recipe_sha256,
        built.info.installed.len(),
        built.info.candidates.len(),
        started.elapsed().as_secs_f64()
    ))
}

/// Every recipe, and whether its image (for this host's package
/// versions) is built, with its size.
pub fn list() -> Result<String, RootfsError> {
    let dir = super::recipes_dir();
    let mut out = format!("recipes in {}:\n", dir.display());
    for (r, built) in rootfs::list(&dir, &crate::host::paths::cache_root())? {
        let state = match built {
            Ok(Some(b)) => format!("built {} key {}", mib(b.info.bytes), &b.info.key[..12]),
            Ok(None) => "not built".to_string(),
            Err(e) => format!("unknown: {e}"),
        };
        out.push_str(&format!(
            "  {:<16} {:<3} packages  {state}\n",
            r.name,
            r.packages.len()
        ));
    }
    Ok(out)
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1 << 20))
}
