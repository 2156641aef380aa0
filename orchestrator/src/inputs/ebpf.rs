//! The storage-hook BPF programs (`ebpf-programs/*.bpf.c`): built with clang
//! against the vmlinux.h of the kernel that will run them (it defines
//! `struct storage_chain_ctx`), cached per kernel, and placed in the guest
//! image under /lib/testbed/bpf/ where the agent loads them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::inputs::kernel::KernelArtifact;

/// Where the agent looks for the objects (`engine_hook::BPF_DIR`).
pub const GUEST_DIR: &str = "lib/testbed/bpf";
/// A kernel with the storage hooks has this in its BTF.
const HOOK_MARKER: &str = "BPF_PROG_TYPE_STORAGE_CHAIN";

#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    #[error(
        "kernel {kernel} has no vmlinux.h ({path} missing): the storage hooks need a built kernel with BTF, e.g. kernel.name = \"vm-hooks\""
    )]
    NoVmlinuxH { kernel: String, path: PathBuf },
    #[error(
        "kernel {kernel} lacks the storage hooks ({HOOK_MARKER} is not in its BTF): use kernel.name = \"vm-hooks\""
    )]
    NoHooks { kernel: String },
    #[error("{0}")]
    ToolsMissing(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("building the BPF programs failed ({command}):\n{output}")]
    Build { command: String, output: String },
    #[error(transparent)]
    Lock(#[from] crate::host::lock::LockError),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> EbpfError + '_ {
    move |source| EbpfError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Builds the programs for `kernel` into `cache`/bpf/<kernel key>/ and
/// returns (guest path, host path) for the image.
pub fn build_for(
    kernel: &KernelArtifact,
    src_dir: &Path,
    cache: &Path,
) -> Result<Vec<(String, PathBuf)>, EbpfError> {
    let kernel_dir = kernel.bzimage.parent().unwrap_or(Path::new("."));
    let vmlinux_h = kernel_dir.join("vmlinux.h");
    if !vmlinux_h.is_file() {
        return Err(EbpfError::NoVmlinuxH {
            kernel: kernel.name.clone(),
            path: vmlinux_h,
        });
    }
    let header = std::fs::read_to_string(&vmlinux_h).map_err(io(&vmlinux_h))?;
    if !header.contains(HOOK_MARKER) {
        return Err(EbpfError::NoHooks {
            kernel: kernel.name.clone(),
        });
    }
    crate::host::hosttools::preflight(&["bpf"])
        .map_err(|e| EbpfError::ToolsMissing(e.to_string()))?;
    let out = cache.join("bpf").join(&kernel.key);
    crate::host::phases::time("images", || build(src_dir, &vmlinux_h, &out))
}

/// `make -C src_dir OUT=out VMLINUX_H=vmlinux_h`; returns the objects.
/// One process builds into `out` at a time; another waits (saying so once)
/// and then finds the objects up to date, so make does nothing.
pub fn build(
    src_dir: &Path,
    vmlinux_h: &Path,
    out: &Path,
) -> Result<Vec<(String, PathBuf)>, EbpfError> {
    let lock_path = out.with_extension("lock");
    let _lock = crate::host::lock::lock_or_wait(
        &lock_path,
        crate::host::lock::Mode::Exclusive,
        &format!("the BPF objects in {}", out.display()),
    )?;
    std::fs::create_dir_all(out).map_err(io(out))?;
    if let Some(why) = crate::host::paths::no_build() {
        // A Slurm task uses the objects the submitting host built.
        let objects = built_objects(out)?;
        if objects.is_empty() {
            return Err(EbpfError::Build {
                command: format!("make -C {}", src_dir.display()),
                output: format!("no BPF objects in {}: {why}", out.display()),
            });
        }
        return Ok(objects);
    }
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(src_dir)
        .arg(format!("OUT={}", out.display()))
        .arg(format!("VMLINUX_H={}", vmlinux_h.display()));
    let command = format!("{cmd:?}");
    let output = cmd.output().map_err(|e| EbpfError::Build {
        command: command.clone(),
        output: e.to_string(),
    })?;
    if !output.status.success() {
        return Err(EbpfError::Build {
            command,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    built_objects(out)
}

/// The `*.bpf.o` files in `out`, with their paths in the guest.
fn built_objects(out: &Path) -> Result<Vec<(String, PathBuf)>, EbpfError> {
    let mut objects: Vec<(String, PathBuf)> = std::fs::read_dir(out)
        .map_err(io(out))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".bpf.o"))
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some((format!("{GUEST_DIR}/{name}"), p))
        })
        .collect();
    objects.sort();
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_in(dir: &Path, header: Option<&str>) -> KernelArtifact {
        if let Some(h) = header {
            std::fs::write(dir.join("vmlinux.h"), h).unwrap();
        }
        KernelArtifact {
            name: "k".into(),
            key: "abc".into(),
            bzimage: dir.join("bzImage"),
            release: "6.1".into(),
            modules_dir: None,
            config_sha256: None,
            patches: vec![],
            description: String::new(),
            needed_modules: vec![],
        }
    }

    #[test]
    fn only_hook_jobs_need_the_programs() {
        let needed = |w: testbed_agent::workload::Workload| w.needs().bpf_programs;
        let w = |extra: &str| {
            serde_json::from_str(&format!(r#"{{"kind": "btree", "device": "d"{extra}}}"#)).unwrap()
        };
        assert!(!needed(w("")));
        assert!(!needed(w(r#", "engines": ["read", "io-uring"]"#)));
        assert!(needed(w(r#", "engines": ["read", "nvme-hook"]"#)));
        assert!(needed(w(r#", "engine": "syscall-hook-uring""#)));
        assert!(needed(w(r#", "mode": "hook-safety""#)));
    }

    #[test]
    fn a_kernel_without_btf_or_without_the_hooks_is_named() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let e = build_for(&kernel_in(t.path(), None), &src, t.path()).unwrap_err();
        assert!(e.to_string().contains("no vmlinux.h"), "{e}");
        let k = kernel_in(t.path(), Some("struct task_struct { int pid; };\n"));
        let e = build_for(&k, &src, t.path()).unwrap_err();
        assert!(e.to_string().contains("lacks the storage hooks"), "{e}");
    }

    #[test]
    fn a_second_process_waits_for_the_objects_and_make_has_nothing_to_do() {
        use std::sync::mpsc;
        use std::time::Duration;

        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        // Counts its builds; the object is up to date once made.
        std::fs::write(
            src.join("Makefile"),
            "$(OUT)/x.bpf.o: x.bpf.c\n\techo built >> $(OUT)/builds\n\tcp x.bpf.c $@\n",
        )
        .unwrap();
        std::fs::write(src.join("x.bpf.c"), "int x;\n").unwrap();
        let h = t.path().join("vmlinux.h");
        std::fs::write(&h, "").unwrap();
        let out = t.path().join("bpf/key");
        let holder =
            crate::host::lock::test_support::Holder::exclusive(&t.path().join("bpf/key.lock"));
        let (tx, rx) = mpsc::channel();
        let (s2, h2, o2) = (src.clone(), h.clone(), out.clone());
        let worker = std::thread::spawn(move || {
            let r = build(&s2, &h2, &o2);
            tx.send(()).unwrap();
            r
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "waits for the other process"
        );
        // The other process builds, then lets go.
        std::fs::create_dir_all(&out).unwrap();
        let ok = Command::new("make")
            .arg("-C")
            .arg(&src)
            .arg(format!("OUT={}", out.display()))
            .status()
            .unwrap()
            .success();
        assert!(ok);
        holder.release();
        let objects = worker.join().unwrap().unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(
            std::fs::read_to_string(out.join("builds")).unwrap(),
            "built\n",
            "built once"
        );
    }

    #[test]
    fn a_compile_error_is_reported_with_clangs_message() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        let repo_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf-programs");
        std::fs::copy(repo_src.join("Makefile"), src.join("Makefile")).unwrap();
        std::fs::copy(repo_src.join("chain_abi.h"), src.join("chain_abi.h")).unwrap();
        std::fs::write(
            src.join("broken.bpf.c"),
            "int f(void) { return undeclared; }\n",
        )
        .unwrap();
        let h = t.path().join("vmlinux.h");
        std::fs::write(&h, "/* empty */\n").unwrap();
        let e = build(&src, &h, &t.path().join("out"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("undeclared"), "{e}");
    }
}
