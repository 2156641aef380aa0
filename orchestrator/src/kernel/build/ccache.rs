//! A compiler cache for kernel builds (Debian's `ccache`), kept under the
//! testbed cache: kernels that share a configuration (a retry, a patch
//! edit, the same tree under another key) rebuild in minutes. Not part of
//! a kernel's key: ccache returns what the compiler would have produced.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the objects are kept: `<cache>/ccache`.
pub fn dir(cache_root: &Path) -> PathBuf {
    cache_root.join("ccache")
}

/// `ccache`, if present (`./x setup` installs it; without it the build
/// runs as before, uncached).
fn program() -> Option<PathBuf> {
    crate::image::libs::find_program("ccache")
}

/// Makes `make` compile through ccache: `CC="ccache gcc"` and the cache's
/// settings. Work trees differ only in their key's directory under
/// `work_root`, so paths are taken relative to it and the working
/// directory is not hashed: the same sources hit across keys. Returns
/// what the kernel's provenance records ("ccache <dir>" or "none").
pub fn apply(cmd: &mut Command, cache_root: &Path, work_root: &Path) -> String {
    let Some(ccache) = program() else {
        return "none".into();
    };
    let dir = dir(cache_root);
    cmd.arg(format!("CC={} gcc", ccache.display()))
        .env("CCACHE_DIR", &dir)
        .env("CCACHE_BASEDIR", work_root)
        .env("CCACHE_NOHASHDIR", "1")
        // A tinyconfig-based kernel's objects are ~100-200 MB: room for
        // a dozen configurations.
        .env("CCACHE_MAXSIZE", "5G");
    format!("ccache {}", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_lives_under_the_testbed_cache_and_make_gets_ccache_as_cc() {
        let mut cmd = Command::new("make");
        let used = apply(&mut cmd, Path::new("/c"), Path::new("/c/kernel-work"));
        if program().is_none() {
            assert_eq!(used, "none");
            assert_eq!(cmd.get_args().count(), 0);
            return;
        }
        assert_eq!(used, "ccache /c/ccache");
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            args[0].starts_with("CC=") && args[0].ends_with("ccache gcc"),
            "{args:?}"
        );
        let env: Vec<_> = cmd
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        assert!(env.contains(&("CCACHE_DIR".into(), Some("/c/ccache".into()))));
        assert!(env.contains(&("CCACHE_BASEDIR".into(), Some("/c/kernel-work".into()))));
    }
}
