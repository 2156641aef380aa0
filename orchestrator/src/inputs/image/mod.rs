//! Guest images: the initramfs the orchestrator builds in Rust, holding the
//! static agent as /init, busybox, kernel modules in load order and any host
//! programs a spec includes (with their shared libraries).

pub mod cli;
pub mod cpio;
pub mod kernel_needs;
pub mod libs;
pub mod recipe;
pub mod rootfs;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use cpio::{Archive, Entry};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("program {0:?} is not installed on this host (looked in PATH, /usr/sbin, /sbin)")]
    ProgramMissing(String),
    #[error("cannot find the shared libraries of {program}: {reason}")]
    Libraries { program: String, reason: String },
    #[error(transparent)]
    Lock(#[from] crate::host::lock::LockError),
}

/// Where the image recipes are: `images/` in the source tree.
pub fn recipes_dir() -> PathBuf {
    crate::host::paths::repo_root().join("images")
}

fn read(path: &Path) -> Result<Vec<u8>, ImageError> {
    std::fs::read(path).map_err(|source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A module to put in the image; loaded in the order given.
#[derive(Debug, Clone)]
pub struct ModuleInput {
    pub name: String,
    pub path: PathBuf,
}

#[derive(Debug, Clone, Default)]
pub struct InitramfsInputs {
    /// The static agent binary; becomes /init.
    pub agent: PathBuf,
    /// busybox-static, for a shell and tools in the guest.
    pub busybox: Option<PathBuf>,
    pub kernel_release: String,
    pub modules: Vec<ModuleInput>,
    /// Host programs copied with their shared-library closure.
    pub include: Vec<String>,
    /// Files placed verbatim: (guest path, host path).
    pub files: Vec<(String, PathBuf)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltImage {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    pub entries: usize,
    pub modules: Vec<String>,
    pub include: Vec<String>,
}

/// Builds (or finds in the cache) the initramfs for these inputs.
pub fn build_initramfs(
    inputs: &InitramfsInputs,
    cache_root: &Path,
) -> Result<BuiltImage, ImageError> {
    let archive = assemble(inputs)?;
    let bytes = archive.to_bytes();
    let sha = hex::encode(Sha256::digest(&bytes));
    let dir = cache_root.join("initramfs");
    let path = dir.join(format!("{sha}.cpio"));
    if !path.exists()
        && let Some(why) = crate::host::paths::no_build()
    {
        return Err(ImageError::Io {
            path,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, why),
        });
    }
    if !path.exists() {
        // One writer per image: another process writing the same one is
        // waited for, and its file used.
        let lock_path = dir.join(format!(".{sha}.lock"));
        let _lock = crate::host::lock::lock_or_wait(
            &lock_path,
            crate::host::lock::Mode::Exclusive,
            &format!("initramfs {} in the cache", &sha[..12]),
        )?;
        if !path.exists() {
            crate::host::fsutil::write_atomic(&path, &bytes).map_err(|source| ImageError::Io {
                path: path.clone(),
                source,
            })?;
        }
    }
    Ok(BuiltImage {
        path,
        sha256: sha,
        bytes: bytes.len() as u64,
        entries: archive.len(),
        modules: inputs.modules.iter().map(|m| m.name.clone()).collect(),
        include: inputs.include.clone(),
    })
}

/// The archive's contents, before serialisation.
pub fn assemble(inputs: &InitramfsInputs) -> Result<Archive, ImageError> {
    let mut a = Archive::new();
    for dir in [
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "mnt",
        "etc/testbed",
        "root",
    ] {
        a.add(dir, Entry::Dir);
    }
    // The kernel opens /dev/console for init's stdio before devtmpfs exists.
    a.add(
        "dev/console",
        Entry::CharDev {
            major: 5,
            minor: 1,
            mode: 0o600,
        },
    );
    a.add_file("init", read(&inputs.agent)?, 0o755);
    a.add(
        "bin/testbed-agent",
        Entry::Symlink {
            target: "/init".into(),
        },
    );
    if let Some(busybox) = &inputs.busybox {
        a.add_file("bin/busybox", read(busybox)?, 0o755);
        for applet in busybox_applets(busybox) {
            let name = applet.rsplit('/').next().unwrap_or(&applet).to_string();
            if name == "busybox" || name.is_empty() {
                continue;
            }
            a.add(
                &format!("bin/{name}"),
                Entry::Symlink {
                    target: "/bin/busybox".into(),
                },
            );
        }
    }
    let mut list = String::new();
    for m in &inputs.modules {
        let guest = format!("lib/modules/{}/{}.ko", inputs.kernel_release, m.name);
        a.add_file(&guest, read(&m.path)?, 0o644);
        list.push_str(&format!("/{guest}\n"));
    }
    a.add_file("etc/testbed/modules", list.into_bytes(), 0o644);
    for program in &inputs.include {
        let host = crate::host::hosttools::find_program(program)
            .ok_or_else(|| ImageError::ProgramMissing(program.clone()))?;
        a.add_file(&format!("usr/bin/{program}"), read(&host)?, 0o755);
        for lib in libs::library_closure(&host).map_err(|e| ImageError::Libraries {
            program: program.clone(),
            reason: e.to_string(),
        })? {
            a.add_file(lib.trim_start_matches('/'), read(Path::new(&lib))?, 0o755);
        }
    }
    for (guest, host) in &inputs.files {
        a.add_file(guest, read(host)?, 0o755);
    }
    a.add_file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
        0o644,
    );
    a.add_file("etc/group", b"root:x:0:\n".to_vec(), 0o644);
    Ok(a)
}

fn busybox_applets(busybox: &Path) -> Vec<String> {
    let Ok(out) = std::process::Command::new(busybox).arg("--list").output() else {
        return Vec::new();
    };
    let mut applets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.contains('/'))
        .collect();
    applets.sort();
    applets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_holds_agent_modules_in_order_and_included_programs() {
        let t = tempfile::tempdir().unwrap();
        let agent = t.path().join("agent");
        std::fs::write(&agent, b"agent").unwrap();
        let m1 = t.path().join("a.ko");
        let m2 = t.path().join("b.ko");
        std::fs::write(&m1, b"a").unwrap();
        std::fs::write(&m2, b"b").unwrap();
        let inputs = InitramfsInputs {
            agent,
            busybox: None,
            kernel_release: "6.1.0-test".into(),
            modules: vec![
                ModuleInput {
                    name: "zz_first".into(),
                    path: m2,
                },
                ModuleInput {
                    name: "aa_second".into(),
                    path: m1,
                },
            ],
            include: vec!["true".into()],
            files: vec![],
        };
        let a = assemble(&inputs).unwrap();
        let paths: Vec<&str> = a.paths().collect();
        assert!(paths.contains(&"init"));
        assert!(paths.contains(&"usr/bin/true"));
        assert!(paths.iter().any(|p| p.contains("libc.so")), "{paths:?}");
        let built = build_initramfs(&inputs, t.path()).unwrap();
        let again = build_initramfs(&inputs, t.path()).unwrap();
        assert_eq!(built.sha256, again.sha256);
        let bytes = std::fs::read(&built.path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        // Load order is the given order, not alphabetical.
        let list_at =
            text.find("/lib/modules/6.1.0-test/zz_first.ko\n/lib/modules/6.1.0-test/aa_second.ko");
        assert!(list_at.is_some());
    }

    #[test]
    fn a_second_process_waits_for_the_image_and_uses_it() {
        use std::os::unix::fs::MetadataExt;
        use std::sync::mpsc;
        use std::time::Duration;

        let t = tempfile::tempdir().unwrap();
        let agent = t.path().join("agent");
        std::fs::write(&agent, b"agent").unwrap();
        let inputs = InitramfsInputs {
            agent,
            ..Default::default()
        };
        let bytes = assemble(&inputs).unwrap().to_bytes();
        let sha = hex::encode(Sha256::digest(&bytes));
        let cache = t.path().join("cache");
        let holder = crate::host::lock::test_support::Holder::exclusive(
            &cache.join("initramfs").join(format!(".{sha}.lock")),
        );
        let (tx, rx) = mpsc::channel();
        let (i2, c2) = (inputs.clone(), cache.clone());
        let worker = std::thread::spawn(move || {
            let r = build_initramfs(&i2, &c2);
            tx.send(()).unwrap();
            r
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits for the other process"
        );
        // The other process writes the image, then lets go.
        let path = cache.join("initramfs").join(format!("{sha}.cpio"));
        std::fs::write(&path, &bytes).unwrap();
        let theirs = std::fs::metadata(&path).unwrap().ino();
        holder.release();
        let built = worker.join().unwrap().unwrap();
        assert_eq!(built.path, path);
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            theirs,
            "their file is used, not written again"
        );
    }

    #[test]
    fn a_missing_program_is_named() {
        let t = tempfile::tempdir().unwrap();
        let agent = t.path().join("agent");
        std::fs::write(&agent, b"agent").unwrap();
        let inputs = InitramfsInputs {
            agent,
            include: vec!["no-such-program-xyz".into()],
            ..Default::default()
        };
        let e = assemble(&inputs).unwrap_err();
        assert!(e.to_string().contains("no-such-program-xyz"), "{e}");
    }
}
