//! Where things live: the source tree, the cache, the guest binaries.

use std::path::{Path, PathBuf};

/// The testbed source tree: $TESTBED_ROOT, else the tree this binary was
/// built from, else the nearest directory at or above the current one that
/// holds `kernel-configs/`, else the current directory.
///
/// The built-from tree can be gone: cargo reuses a release binary built in
/// another checkout of the same sources (a CI clone sharing the target
/// dir), so the binary must not trust the path it was compiled at alone.
pub fn repo_root() -> PathBuf {
    if let Ok(r) = std::env::var("TESTBED_ROOT") {
        return PathBuf::from(r);
    }
    let is_tree = |p: &Path| p.join("kernel-configs").is_dir();
    if let Some(built) = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .filter(|p| is_tree(p))
    {
        return built.to_path_buf();
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    cwd.ancestors()
        .find(|p| is_tree(p))
        .map(Path::to_path_buf)
        .unwrap_or(cwd)
}

/// Content-addressed cache: $TESTBED_CACHE, else ~/.cache/testbed.
pub fn cache_root() -> PathBuf {
    if let Ok(c) = std::env::var("TESTBED_CACHE") {
        return PathBuf::from(c);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    Path::new(&home).join(".cache/testbed")
}

/// Set in a Slurm batch script: a task must find every input in the cache.
pub const NO_BUILD_ENV: &str = "TESTBED_NO_BUILD";

/// Why nothing may be built into the cache here, when this process is a
/// Slurm task (every input builder asks).
pub fn no_build() -> Option<&'static str> {
    std::env::var_os(NO_BUILD_ENV).is_some().then_some(
        "a Slurm task builds nothing: the submitting host builds kernels, images and the \
         agent into the shared cache (is TESTBED_CACHE on a path every node shares?)",
    )
}

/// The directory of figure definitions in this source tree.
pub fn figure_defs() -> PathBuf {
    repo_root().join("experiments/figures")
}

pub fn kernel_configs() -> PathBuf {
    repo_root().join("kernel-configs")
}

/// busybox-static's binary, if installed.
pub fn busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}
