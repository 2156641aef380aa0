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
    crate::host::hosttools::find_program("ccache")
}

/// Makes `make` compile through ccache: `CC="ccache gcc"` and the cache's
/// settings. Work trees differ only in their key's directory under
/// `work_root`, so paths are taken relative to it and the working
/// directory is not hashed: the same sources hit across keys. This
/// build's own counters go to `stats_log` (the cache's global ones mix
/// every build). Returns what the kernel's provenance records
/// ("ccache <dir>" or "none").
pub fn apply(cmd: &mut Command, cache_root: &Path, work_root: &Path, stats_log: &Path) -> String {
    let Some(ccache) = program() else {
        return "none".into();
    };
    let dir = dir(cache_root);
    cmd.arg(format!("CC={} gcc", ccache.display()))
        .env("CCACHE_DIR", &dir)
        .env("CCACHE_BASEDIR", work_root)
        .env("CCACHE_NOHASHDIR", "1")
        .env("CCACHE_STATSLOG", stats_log)
        // A tinyconfig-based kernel's objects are ~100-200 MB: room for
        // a dozen configurations.
        .env("CCACHE_MAXSIZE", "5G");
    format!("ccache {}", dir.display())
}

/// What one build's compilations found in the cache, from its stats log:
/// one `# <file>` line per compilation, then its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hits {
    pub hits: u64,
    pub misses: u64,
}

impl Hits {
    pub fn read(stats_log: &Path) -> Option<Hits> {
        let text = std::fs::read_to_string(stats_log).ok()?;
        Some(Hits::parse(&text))
    }

    fn parse(text: &str) -> Hits {
        let mut h = Hits::default();
        for line in text.lines() {
            match line.trim() {
                "direct_cache_hit" | "preprocessed_cache_hit" => h.hits += 1,
                "cache_miss" => h.misses += 1,
                _ => {}
            }
        }
        h
    }

    /// "1290 of 1302 compilations from the cache".
    pub fn text(&self) -> String {
        format!(
            "{} of {} compilations from the cache",
            self.hits,
            self.hits + self.misses
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_log_counts_hits_and_misses_per_compilation() {
        let log = "# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_miss\npreprocessed_cache_miss\n\
                   # a.c\ndirect_cache_hit\nlocal_storage_hit\n# b.c\npreprocessed_cache_hit\n";
        let h = Hits::parse(log);
        assert_eq!(h, Hits { hits: 2, misses: 1 });
        assert_eq!(h.text(), "2 of 3 compilations from the cache");
    }

    #[test]
    fn the_cache_lives_under_the_testbed_cache_and_make_gets_ccache_as_cc() {
        let mut cmd = Command::new("make");
        let used = apply(
            &mut cmd,
            Path::new("/c"),
            Path::new("/c/kernel-work"),
            Path::new("/c/kernel-work/k/ccache-stats.log"),
        );
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
