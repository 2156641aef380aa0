//! Fetch one pinned Debian package with `apt-get download` and verify it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::KernelError;
use super::cache::downloads_dir;
use super::hashing::sha256_file;

/// A package pinned by name, exact version and .deb sha256.
pub struct Pin<'a> {
    pub package: &'a str,
    pub version: &'a str,
    pub sha256: &'a str,
    /// Descriptor and field holding `sha256`, named in errors.
    pub descriptor: &'a Path,
    pub sha_field: &'a str,
}

/// The variable that names a file to use instead of downloading
/// `package`: `TESTBED_KERNEL_SOURCE_` and the package name in capitals,
/// each other character `_` (`linux-source-6.1` →
/// `TESTBED_KERNEL_SOURCE_LINUX_SOURCE_6_1`).
pub fn local_source_var(package: &str) -> String {
    let name: String = package
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("TESTBED_KERNEL_SOURCE_{name}")
}

/// The file the user supplied for `package` (see [`local_source_var`]), if any.
pub fn local_source(package: &str) -> Option<PathBuf> {
    std::env::var_os(local_source_var(package))
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Whether apt's index still serves `package` at exactly `version`
/// (`apt-cache madison`, which reads the local index: no download); `Err`
/// says why it could not tell.
pub fn served(package: &str, version: &str) -> Result<bool, String> {
    let out = Command::new("apt-cache")
        .args(["madison", package])
        .output()
        .map_err(|e| format!("apt-cache: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(madison_lists(
        &String::from_utf8_lossy(&out.stdout),
        version,
    ))
}

/// Whether `apt-cache madison`'s lines (`pkg | version | source`) list
/// `version`.
fn madison_lists(text: &str, version: &str) -> bool {
    text.lines()
        .filter_map(|l| l.split('|').nth(1))
        .any(|v| v.trim() == version)
}

/// Where a pinned package's copy already is, without apt: the user's file
/// (`TESTBED_KERNEL_SOURCE_<PACKAGE>`) or the download cache.
pub fn local_copy(cache_root: &Path, package: &str, version: &str) -> Option<String> {
    if let Some(p) = local_source(package) {
        return Some(format!("{}={}", local_source_var(package), p.display()));
    }
    let file_name = format!("{package}_{version}.deb").replace(':', "%3a");
    let cached = downloads_dir(cache_root).join(file_name);
    cached
        .is_file()
        .then(|| format!("the download cache ({})", cached.display()))
}

/// Whether a supplied file is a .deb (else a source tarball).
pub fn is_deb(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "deb")
}

/// The user's file `path` for `pin`, if its sha256 is the pinned one;
/// else an error naming the variable, the file and both hashes.
pub fn check_local(path: &Path, pin: &Pin<'_>) -> Result<PathBuf, KernelError> {
    let var = local_source_var(pin.package);
    let actual = sha256_file(path).map_err(|e| match e {
        KernelError::Io { source, .. } => KernelError::Io {
            path: PathBuf::from(format!("{var}={}", path.display())),
            source,
        },
        other => other,
    })?;
    if !actual.eq_ignore_ascii_case(pin.sha256) {
        return Err(KernelError::LocalSourceMismatch {
            var,
            path: path.to_path_buf(),
            pinned: format!(
                "{} pins `{}` = {}: not the pinned {} {}",
                pin.descriptor.display(),
                pin.sha_field,
                pin.sha256,
                pin.package,
                pin.version
            ),
            actual,
        });
    }
    Ok(path.to_path_buf())
}

/// Path of the verified .deb: the user's (`TESTBED_KERNEL_SOURCE_<PACKAGE>`,
/// checked against the pin), else in the download cache, downloading it
/// if needed.
pub fn fetch(
    cache_root: &Path,
    pin: &Pin<'_>,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, KernelError> {
    if let Some(local) = local_source(pin.package) {
        if !is_deb(&local) {
            return Err(KernelError::Descriptor {
                path: pin.descriptor.to_path_buf(),
                message: format!(
                    "{}={}: {} is a .deb package here; give its .deb file",
                    local_source_var(pin.package),
                    local.display(),
                    pin.package
                ),
            });
        }
        progress(&format!(
            "using {} for {} {} ({})",
            local.display(),
            pin.package,
            pin.version,
            local_source_var(pin.package)
        ));
        return check_local(&local, pin);
    }
    let dir = downloads_dir(cache_root);
    std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
    let file_name = format!("{}_{}.deb", pin.package, pin.version).replace(':', "%3a");
    let dest = dir.join(&file_name);
    // One download of a package at a time: a second process waits, then
    // finds it verified in the cache.
    let _lock = super::cache::lock_file(
        &dir.join(format!(".{file_name}.lock")),
        &format!("the download of {} {}", pin.package, pin.version),
        progress,
    )?;
    if dest.is_file() {
        if sha256_file(&dest)?.eq_ignore_ascii_case(pin.sha256) {
            return Ok(dest);
        }
        progress(&format!(
            "cached {} does not match its pinned sha256; downloading again",
            dest.display()
        ));
        std::fs::remove_file(&dest).map_err(|e| KernelError::io(&dest, e))?;
    }

    let tmp = dir.join(format!(".tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| KernelError::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| KernelError::io(&tmp, e))?;
    let result = download_into(&tmp, pin, progress).and_then(|got| {
        let actual = sha256_file(&got)?;
        if !actual.eq_ignore_ascii_case(pin.sha256) {
            return Err(KernelError::Checksum {
                path: got,
                descriptor: pin.descriptor.to_path_buf(),
                field: pin.sha_field.to_string(),
                expected: pin.sha256.to_string(),
                actual,
            });
        }
        std::fs::rename(&got, &dest).map_err(|e| KernelError::io(&dest, e))
    });
    // The temp dir only ever holds this download.
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| dest)
}

fn download_into(
    dir: &Path,
    pin: &Pin<'_>,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, KernelError> {
    let spec = format!("{}={}", pin.package, pin.version);
    progress(&format!("downloading {spec} (apt-get download)"));
    let out = Command::new("apt-get")
        .args(["download", "-q", &spec])
        .current_dir(dir)
        .output()
        .map_err(|e| KernelError::ToolMissing {
            tool: "apt-get".into(),
            hint: "a Debian host with apt".into(),
            source: e,
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("E:")).collect();
        let apt_said = if said.is_empty() {
            stderr.trim().to_string()
        } else {
            said.join(" ")
        };
        return Err(KernelError::PinnedVersionUnavailable {
            package: pin.package.to_string(),
            version: pin.version.to_string(),
            descriptor: pin.descriptor.to_path_buf(),
            apt_said,
        });
    }
    let mut debs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| KernelError::io(dir, e))? {
        let path = entry.map_err(|e| KernelError::io(dir, e))?.path();
        if path.extension().is_some_and(|e| e == "deb") {
            debs.push(path);
        }
    }
    match debs.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(KernelError::Deb {
            path: dir.to_path_buf(),
            message: format!(
                "`apt-get download {spec}` left {} .deb files, expected 1",
                debs.len()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn madison_lines_are_read_by_their_version_column() {
        let text = "linux-source-6.1 | 6.1.192-3 | http://deb.debian.org/debian bookworm/main amd64 Packages\n\
                    linux-source-6.1 | 6.1.158-1 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages\n";
        assert!(madison_lists(text, "6.1.192-3"));
        assert!(madison_lists(text, "6.1.158-1"));
        assert!(!madison_lists(text, "6.1.192"));
        assert!(!madison_lists("", "6.1.192-3"));
    }
    use sha2::{Digest, Sha256};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_supplied_file_is_used_only_with_the_pinned_sha256() {
        assert_eq!(
            local_source_var("linux-source-6.1"),
            "TESTBED_KERNEL_SOURCE_LINUX_SOURCE_6_1"
        );
        let t = tempfile::tempdir().unwrap();
        let good = b"!<arch>\nthe pinned source".to_vec();
        let sha = hex::encode(Sha256::digest(&good));
        let descriptor = t.path().join("vm-base.toml");
        let pin = Pin {
            package: "linux-source-6.1",
            version: "6.1.192-3",
            sha256: &sha,
            descriptor: &descriptor,
            sha_field: "source.deb_sha256",
        };
        let file = t.path().join("linux-source-6.1_6.1.192-3_all.deb");
        std::fs::write(&file, &good).unwrap();
        assert_eq!(check_local(&file, &pin).unwrap(), file);

        std::fs::write(&file, b"!<arch>\nanother version").unwrap();
        let actual = hex::encode(Sha256::digest(b"!<arch>\nanother version"));
        let e = check_local(&file, &pin).unwrap_err();
        assert!(
            matches!(e, KernelError::LocalSourceMismatch { .. }),
            "{e:?}"
        );
        let msg = e.to_string();
        for part in [
            format!("TESTBED_KERNEL_SOURCE_LINUX_SOURCE_6_1={}", file.display()),
            format!("its sha256 is {actual}"),
            format!("`source.deb_sha256` = {sha}"),
            descriptor.display().to_string(),
            "not the pinned linux-source-6.1 6.1.192-3".to_string(),
        ] {
            assert!(msg.contains(&part), "{part:?} not in: {msg}");
        }
        let e = check_local(&t.path().join("absent.deb"), &pin).unwrap_err();
        assert!(
            e.to_string()
                .contains("TESTBED_KERNEL_SOURCE_LINUX_SOURCE_6_1="),
            "{e}"
        );
    }

    #[test]
    fn a_second_process_waits_for_the_download_and_uses_it() {
        let t = tempfile::tempdir().unwrap();
        let cache_root = t.path().to_path_buf();
        let deb = b"!<arch>\npretend package".to_vec();
        let sha = hex::encode(Sha256::digest(&deb));
        let dir = downloads_dir(&cache_root);
        let holder = crate::host::lock::test_support::Holder::exclusive(
            &dir.join(".no-such-package-t_1.0.deb.lock"),
        );
        let (tx, rx) = mpsc::channel();
        let (root, sha2) = (cache_root.clone(), sha.clone());
        let descriptor = t.path().join("t.toml");
        let worker = std::thread::spawn(move || {
            let pin = Pin {
                package: "no-such-package-t",
                version: "1.0",
                sha256: &sha2,
                descriptor: &descriptor,
                sha_field: "package.sha256",
            };
            let r = fetch(&root, &pin, &|_| {});
            tx.send(()).unwrap();
            r
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits for the other process"
        );
        // The other process downloads it, then lets go: apt-get is not run
        // again (it would not find this package).
        let dest = dir.join("no-such-package-t_1.0.deb");
        std::fs::write(&dest, &deb).unwrap();
        holder.release();
        assert_eq!(worker.join().unwrap().unwrap(), dest);
    }
}
