//! The cache key of a root filesystem image: the recipe's canonical hash
//! plus the candidate versions of the packages the recipe names, resolved
//! with this host's apt (`apt-cache policy`; the host is Debian 12 too).
//!
//! Only the named packages' candidates count, not their dependency
//! closure: a new version of a library alone does not make a new key.
//! What was really installed is recorded after the build (the sidecar's
//! `installed`, from dpkg-query in the image).

use std::collections::BTreeMap;
use std::process::Command;

use sha2::{Digest, Sha256};

use super::RootfsError;
use crate::inputs::image::recipe::Recipe;

/// Bumped when the build itself changes (flags, file system layout), so
/// images of the old build are not taken for new ones.
const BUILD_VERSION: &str = "testbed-rootfs-v1";

/// Each of the recipe's packages with its candidate version on this host;
/// a package apt does not know, or knows with no candidate, is an error
/// at the recipe line that names it.
pub fn resolve_candidates(recipe: &Recipe) -> Result<BTreeMap<String, String>, RootfsError> {
    let packages = recipe.all_packages();
    let out = Command::new("apt-cache")
        .arg("policy")
        .args(&packages)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| RootfsError::Tool {
            program: "apt-cache".into(),
            reason: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(RootfsError::Tool {
            program: "apt-cache policy".into(),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let policy = parse_policy(&String::from_utf8_lossy(&out.stdout));
    let mut resolved = BTreeMap::new();
    for p in packages {
        match policy.get(&p) {
            Some(Some(v)) => {
                resolved.insert(p, v.clone());
            }
            Some(None) => {
                return Err(recipe
                    .package_error(&p, format!("{p}: apt has no candidate version of it"))
                    .into());
            }
            None => {
                return Err(recipe
                    .package_error(
                        &p,
                        format!("{p}: apt does not know this package (apt-get update?)"),
                    )
                    .into());
            }
        }
    }
    Ok(resolved)
}

/// Package -> candidate (None for "(none)") from `apt-cache policy` output.
pub fn parse_policy(text: &str) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            // "samtools:" (or "libc6:amd64:" for a foreign architecture).
            current = line
                .strip_suffix(':')
                .map(|n| n.split(':').next().unwrap_or(n).to_string());
            continue;
        }
        if let (Some(pkg), Some(v)) = (&current, line.trim().strip_prefix("Candidate:")) {
            let v = v.trim();
            let v = (v != "(none)" && !v.is_empty()).then(|| v.to_string());
            out.insert(pkg.clone(), v);
        }
    }
    out
}

/// sha256 over the build version, the recipe hash and `pkg=version` lines.
pub fn cache_key(recipe_sha256: &str, candidates: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    h.update(format!("{BUILD_VERSION}\n{recipe_sha256}\n"));
    for (p, v) in candidates {
        h.update(format!("{p}={v}\n"));
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_output_gives_candidates() {
        let text = "samtools:\n  Installed: 1.16.1-1\n  Candidate: 1.16.1-1\n  Version table:\n \
                    *** 1.16.1-1 500\n        500 http://deb.debian.org/debian bookworm/main amd64 Packages\n\
                    virtual-thing:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n";
        let p = parse_policy(text);
        assert_eq!(p["samtools"].as_deref(), Some("1.16.1-1"));
        assert_eq!(p["virtual-thing"], None);
        assert!(!p.contains_key("bwa"));
    }

    #[test]
    fn the_key_changes_with_a_version_or_the_recipe() {
        let mut c = BTreeMap::from([("samtools".to_string(), "1.16.1-1".to_string())]);
        let k = cache_key("r1", &c);
        assert_eq!(k, cache_key("r1", &c));
        assert_ne!(k, cache_key("r2", &c));
        c.insert("samtools".into(), "1.16.1-2".into());
        assert_ne!(k, cache_key("r1", &c));
    }

    #[test]
    fn this_hosts_apt_resolves_a_real_recipe() {
        let dir = crate::host::paths::repo_root().join("images");
        let r = crate::inputs::image::recipe::load(&dir, "test-tiny").unwrap();
        let c = resolve_candidates(&r).unwrap();
        assert!(c["samtools"].starts_with("1."), "{c:?}");
        let mut bad = r.clone();
        bad.extra = vec!["no-such-package-xyz".into()];
        let e = resolve_candidates(&bad).unwrap_err();
        assert!(e.to_string().contains("no-such-package-xyz"), "{e}");
    }
}
