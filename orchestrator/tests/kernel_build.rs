//! Kernel builds from the real pinned source. All ignored by default (they
//! unpack ~1.4 GB; the full build takes ~8 min on 2 cores):
//! `cargo test -p testbed --test kernel_build -- --ignored --nocapture`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Instant;

use testbed::inputs::kernel::{self, KernelError};

fn configs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel-configs")
}

fn printing(m: &str) {
    eprintln!("  {m}");
}

/// A configs dir holding vm-base.toml (with `edit` applied) and vm-base's fragment.
fn variant(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(configs_dir().join("vm-base.toml")).unwrap();
    std::fs::write(dir.path().join("vm-base.toml"), edit(&text)).unwrap();
    std::fs::create_dir_all(dir.path().join("fragments")).unwrap();
    std::fs::copy(
        configs_dir().join("fragments/vm-base.config"),
        dir.path().join("fragments/vm-base.config"),
    )
    .unwrap();
    dir
}

/// The source-built kernel CI builds anyway (vm-base's options plus the
/// storage-hook patches): building vm-base too would cost CI ~8 min more.
const BUILT_KERNEL: &str = "vm-hooks";

#[test]
#[ignore = "full kernel build, ~8 min on 2 cores"]
fn our_kernel_builds_and_rebuild_does_nothing() {
    let cache = kernel::default_cache_root();
    let started = Instant::now();
    let a = kernel::build(&configs_dir(), BUILT_KERNEL, &cache, &printing).unwrap();
    eprintln!("build took {:?}: {a:#?}", started.elapsed());
    let dir = a.bzimage.parent().unwrap();
    let image = std::fs::read(&a.bzimage).unwrap();
    assert_eq!(&image[0x202..0x206], b"HdrS");
    assert_eq!(a.release, "6.1.192");
    assert!(a.modules_dir.is_none());
    let config = std::fs::read_to_string(dir.join("config")).unwrap();
    for opt in [
        "CONFIG_BLK_DEV_NVME=y",
        "CONFIG_VIRTIO_PCI=y",
        "CONFIG_VIRTIO_CONSOLE=y",
        "CONFIG_DEBUG_INFO_BTF=y",
        "CONFIG_KPROBES=y",
        "CONFIG_BPF_EVENTS=y",
    ] {
        assert!(config.lines().any(|l| l == opt), "{opt} missing");
    }
    let vmlinux_h = std::fs::read_to_string(dir.join("vmlinux.h")).unwrap();
    assert!(vmlinux_h.contains("struct task_struct {"));
    assert!(dir.join("headers/include/linux/bpf.h").is_file());
    assert!(dir.join("System.map").is_file());
    // Built-in drivers need no loading.
    let none = a
        .module_load_order(&["virtio_blk".to_string(), "nvme".to_string()])
        .unwrap();
    assert!(none.is_empty());

    let seen = RefCell::new(Vec::new());
    let again = Instant::now();
    let b = kernel::build(&configs_dir(), BUILT_KERNEL, &cache, &|m: &str| {
        seen.borrow_mut().push(m.to_string())
    })
    .unwrap();
    assert_eq!(b, a);
    assert!(seen.borrow().is_empty(), "{:?}", seen.borrow());
    assert!(again.elapsed().as_secs() < 5);
    assert_eq!(
        kernel::lookup_cached(&configs_dir(), BUILT_KERNEL, &cache).unwrap(),
        Some(a)
    );
}

#[test]
#[ignore = "unpacks and configures the real source (~1 min)"]
fn option_with_unmet_dependency_fails_naming_both() {
    let configs = variant(|t| {
        t.replace(
            "fragments = [\"vm-base\"]",
            "fragments = [\"vm-base\", \"no-modules\"]",
        )
    });
    std::fs::write(
        configs.path().join("fragments/no-modules.config"),
        "# CONFIG_MODULES is not set\n",
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let err = kernel::build(configs.path(), "vm-base", cache.path(), &printing).unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, KernelError::ConfigDropped { .. }), "{msg}");
    let line = msg
        .lines()
        .find(|l| l.contains("CONFIG_KPROBES=y"))
        .unwrap_or_else(|| panic!("KPROBES not reported: {msg}"));
    assert!(line.contains("fragments/vm-base.config:"), "{line}");
    assert!(
        line.contains("missing dependency: MODULES (is not set)"),
        "{line}"
    );
    assert!(line.contains("[arch/Kconfig:"), "{line}");
    assert!(kernel::list_cached(cache.path()).unwrap().is_empty());
}

#[test]
#[ignore = "unpacks the real source (~30 s)"]
fn stale_patch_fails_naming_file_and_hunk() {
    let configs = variant(|t| format!("{t}\n[patches]\nseries = \"stale\"\n"));
    let series = configs.path().join("patches/stale");
    std::fs::create_dir_all(&series).unwrap();
    std::fs::write(series.join("series"), "0001-ok.patch\n0002-stale.patch\n").unwrap();
    std::fs::write(
        series.join("0001-ok.patch"),
        "--- a/Makefile\n+++ b/Makefile\n@@ -3,5 +3,5 @@ VERSION = 6\n PATCHLEVEL = 1\n SUBLEVEL = 192\n-EXTRAVERSION =\n+EXTRAVERSION = -tb\n NAME = Curry Ramen\n \n",
    )
    .unwrap();
    // Context from an older kernel: hunk #1 no longer matches.
    std::fs::write(
        series.join("0002-stale.patch"),
        "--- a/Makefile\n+++ b/Makefile\n@@ -2,5 +2,5 @@\n VERSION = 6\n PATCHLEVEL = 1\n-SUBLEVEL = 150\n+SUBLEVEL = 151\n EXTRAVERSION = -tb\n NAME = Curry Ramen\n",
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let err = kernel::build(configs.path(), "vm-base", cache.path(), &printing).unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, KernelError::PatchFailed { .. }), "{msg}");
    assert!(msg.contains("0002-stale.patch"), "{msg}");
    assert!(
        msg.contains("file Makefile: hunk #1 `@@ -2,5 +2,5 @@` FAILED at 2"),
        "{msg}"
    );
}
