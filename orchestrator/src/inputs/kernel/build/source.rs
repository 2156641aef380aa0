//! The pinned kernel source tarball: the user's
//! (`TESTBED_KERNEL_SOURCE_<PACKAGE>`, a tarball or the .deb) if it matches
//! the pin, else the installed one if it matches, else extracted from the
//! pinned `linux-source-*` .deb fetched with apt.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::run;
use crate::inputs::kernel::KernelError;
use crate::inputs::kernel::apt::{self, Pin};
use crate::inputs::kernel::cache::downloads_dir;
use crate::inputs::kernel::deb::{self, Extract};
use crate::inputs::kernel::descriptor::{Descriptor, SourcePin};
use crate::inputs::kernel::hashing::sha256_file;

/// A verified tarball for `pin`.
pub fn tarball(
    cache_root: &Path,
    desc: &Descriptor,
    pin: &SourcePin,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, KernelError> {
    // A tarball the user supplied (a .deb goes to apt::fetch below).
    if let Some(local) = apt::local_source(&pin.package).filter(|p| !apt::is_deb(p)) {
        progress(&format!(
            "using {} for the {} {} tarball ({})",
            local.display(),
            pin.package,
            pin.version,
            apt::local_source_var(&pin.package)
        ));
        return apt::check_local(
            &local,
            &Pin {
                package: &pin.package,
                version: &pin.version,
                sha256: &pin.sha256,
                descriptor: &desc.path,
                sha_field: "source.sha256",
            },
        );
    }
    let installed = PathBuf::from(&pin.tarball);
    if installed.is_file() {
        if sha256_file(&installed)?.eq_ignore_ascii_case(&pin.sha256) {
            return Ok(installed);
        }
        progress(&format!(
            "{} is not the pinned {} {}; using the pinned package instead",
            installed.display(),
            pin.package,
            pin.version
        ));
    }
    let name = installed.file_name().map_or_else(
        || "source.tar.xz".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let cached_name = format!("{}_{}_{name}", pin.package, pin.version);
    let cached = downloads_dir(cache_root).join(&cached_name);
    // The tarball is extracted in place, shared by every build of this
    // source: one process extracts it while the others wait, then use it.
    let _lock = crate::inputs::kernel::cache::lock_file(
        &downloads_dir(cache_root).join(format!(".{cached_name}.lock")),
        &format!("the extracted {} source", pin.package),
        progress,
    )?;
    if cached.is_file() && sha256_file(&cached)?.eq_ignore_ascii_case(&pin.sha256) {
        return Ok(cached);
    }
    let deb = apt::fetch(
        cache_root,
        &Pin {
            package: &pin.package,
            version: &pin.version,
            sha256: &pin.deb_sha256,
            descriptor: &desc.path,
            sha_field: "source.deb_sha256",
        },
        progress,
    )?;
    progress(&format!(
        "extracting {} from {}",
        pin.tarball,
        deb.display()
    ));
    let member = PathBuf::from(pin.tarball.trim_start_matches('/'));
    let dest_name = cached
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(&name));
    let written = deb::unpack(&deb, &downloads_dir(cache_root), &|p: &Path| {
        (p == member).then(|| Extract {
            dest: dest_name.clone(),
            decompress: None,
        })
    })?;
    if written.is_empty() {
        return Err(KernelError::Descriptor {
            path: desc.path.clone(),
            message: format!(
                "source.tarball: {} is not in {}",
                pin.tarball,
                deb.display()
            ),
        });
    }
    let actual = sha256_file(&cached)?;
    if !actual.eq_ignore_ascii_case(&pin.sha256) {
        let _ = std::fs::remove_file(&cached);
        return Err(KernelError::Checksum {
            path: cached,
            descriptor: desc.path.clone(),
            field: "source.sha256".into(),
            expected: pin.sha256.clone(),
            actual,
        });
    }
    Ok(cached)
}

/// Unpack `tarball` into the empty directory `work`; returns the source tree.
pub fn unpack(tarball: &Path, work: &Path, log: &Path) -> Result<PathBuf, KernelError> {
    let src = work.join("src");
    std::fs::create_dir_all(&src).map_err(|e| KernelError::io(&src, e))?;
    run::run(
        Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&src),
        work,
        log,
        &mut |_| {},
    )?;
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(&src).map_err(|e| KernelError::io(&src, e))? {
        let path = entry.map_err(|e| KernelError::io(&src, e))?.path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    match dirs.as_slice() {
        [one] if one.join("Makefile").is_file() => Ok(one.clone()),
        _ => Err(KernelError::Deb {
            path: tarball.to_path_buf(),
            message: "expected one top-level directory holding a kernel Makefile".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::kernel::descriptor::Kind;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_second_process_waits_for_the_extraction_and_uses_it() {
        let t = tempfile::tempdir().unwrap();
        let cache_root = t.path().to_path_buf();
        let text = b"pretend kernel source".to_vec();
        let pin = SourcePin {
            package: "linux-source-t".into(),
            version: "1.0".into(),
            deb_sha256: "00".repeat(32),
            // Not installed on this host: the cache is the only way.
            tarball: t
                .path()
                .join("absent/linux-source-t.tar.xz")
                .display()
                .to_string(),
            sha256: hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(
                <sha2::Sha256 as sha2::Digest>::new(),
                &text,
            ))),
        };
        let desc = Descriptor {
            name: "t".into(),
            path: t.path().join("t.toml"),
            text: String::new(),
            modules: vec![],
            kind: Kind::DebianBinary(crate::inputs::kernel::descriptor::PackagePin {
                name: String::new(),
                version: String::new(),
                sha256: String::new(),
            }),
        };
        let cached = downloads_dir(&cache_root).join("linux-source-t_1.0_linux-source-t.tar.xz");
        let holder = crate::host::lock::test_support::Holder::exclusive(
            &downloads_dir(&cache_root).join(".linux-source-t_1.0_linux-source-t.tar.xz.lock"),
        );
        let (tx, rx) = mpsc::channel();
        let (root, p2) = (cache_root.clone(), pin.clone());
        let worker = std::thread::spawn(move || {
            let r = tarball(&root, &desc, &p2, &|_| {});
            tx.send(()).unwrap();
            r
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits for the other process"
        );
        // The other process extracts it, then lets go: no download follows.
        std::fs::write(&cached, &text).unwrap();
        holder.release();
        assert_eq!(worker.join().unwrap().unwrap(), cached);
    }
}
