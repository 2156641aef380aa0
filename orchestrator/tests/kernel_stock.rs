//! The stock Debian cloud kernel: real apt download of the pinned package.
//! Needs apt sources with bookworm-security (`apt-get update` done).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use testbed::inputs::kernel::{self, KernelError};

fn configs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel-configs")
}

/// Runs `f` with a progress callback and returns what it reported.
fn with_progress<T>(f: impl FnOnce(&dyn Fn(&str)) -> T) -> (T, Vec<String>) {
    let seen = RefCell::new(Vec::new());
    let out = f(&|m: &str| seen.borrow_mut().push(m.to_string()));
    (out, seen.into_inner())
}

fn position(order: &[String], name: &str) -> usize {
    order
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("{name} missing from {order:?}"))
}

#[test]
#[ignore = "downloads the pinned debian-cloud kernel .deb (apt-get download)"]
fn debian_cloud_fetch_closure_and_cache_hit() {
    let cache = tempfile::tempdir().unwrap();
    let configs = configs_dir();
    assert!(
        kernel::lookup_cached(&configs, "debian-cloud", cache.path())
            .unwrap()
            .is_none()
    );

    let (a, msgs) = with_progress(|p| kernel::resolve(&configs, "debian-cloud", cache.path(), p));
    let a = a.unwrap();
    assert!(
        msgs.iter().any(|m| m.starts_with("downloading")),
        "{msgs:?}"
    );
    assert_eq!(a.name, "debian-cloud");
    assert_eq!(a.release, "6.1.0-57-cloud-amd64");
    assert_eq!(
        a.description,
        "Debian linux-image-6.1.0-57-cloud-amd64 6.1.192-3"
    );
    assert!(a.patches.is_empty());
    assert_eq!(a.config_sha256.as_deref().map(str::len), Some(64));
    // bzImage boot protocol magic "HdrS" at 0x202.
    let image = std::fs::read(&a.bzimage).unwrap();
    assert_eq!(&image[0x202..0x206], b"HdrS");

    // Closure: the order machine-notes gives for virtio-net, as constraints.
    let order = a.module_load_order(&a.default_modules()).unwrap();
    let names: Vec<String> = order.iter().map(|m| m.name.clone()).collect();
    for m in &order {
        assert!(m.path.is_file(), "{}", m.path.display());
        assert_eq!(m.path.extension().unwrap(), "ko");
    }
    let notes = [
        "virtio_ring",
        "virtio",
        "virtio_pci_modern_dev",
        "virtio_pci_legacy_dev",
        "virtio_pci",
        "failover",
        "net_failover",
        "virtio_net",
    ];
    for m in notes.iter().chain(&["virtio_console", "virtio_blk"]) {
        position(&names, m);
    }
    for (before, after) in [
        ("virtio_ring", "virtio"),
        ("virtio", "virtio_pci"),
        ("virtio_pci_modern_dev", "virtio_pci"),
        ("virtio_pci_legacy_dev", "virtio_pci"),
        ("failover", "net_failover"),
        ("net_failover", "virtio_net"),
        ("virtio_pci", "virtio_net"),
        ("virtio", "virtio_console"),
        ("virtio", "virtio_blk"),
    ] {
        assert!(
            position(&names, before) < position(&names, after),
            "{before} must load before {after}: {names:?}"
        );
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicates in {names:?}");
    // Deterministic.
    let again: Vec<String> = a
        .module_load_order(&a.default_modules())
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(again, names);

    // NVMe and ext4 are built in: nothing to load, not an error.
    let builtin = a
        .module_load_order(&["nvme".to_string(), "ext4".to_string()])
        .unwrap();
    assert!(builtin.is_empty(), "{builtin:?}");
    let err = a
        .module_load_order(&["no_such_module".to_string()])
        .unwrap_err();
    assert!(matches!(err, KernelError::ModuleNotFound { .. }), "{err}");

    // Second resolve: a pure cache hit, nothing downloaded or unpacked.
    let meta = a.bzimage.parent().unwrap().join("meta.json");
    let mtime = std::fs::metadata(&meta).unwrap().modified().unwrap();
    let (b, msgs) = with_progress(|p| kernel::resolve(&configs, "debian-cloud", cache.path(), p));
    assert_eq!(b.unwrap(), a);
    assert!(msgs.is_empty(), "cache hit reported work: {msgs:?}");
    assert_eq!(std::fs::metadata(&meta).unwrap().modified().unwrap(), mtime);
    assert_eq!(
        kernel::lookup_cached(&configs, "debian-cloud", cache.path()).unwrap(),
        Some(a.clone())
    );
    assert_eq!(kernel::list_cached(cache.path()).unwrap(), vec![a.clone()]);

    // Without the unpacked entry, the verified .deb is reused: no download.
    std::fs::remove_dir_all(a.bzimage.parent().unwrap()).unwrap();
    let (c, msgs) = with_progress(|p| kernel::resolve(&configs, "debian-cloud", cache.path(), p));
    assert_eq!(c.unwrap().key, a.key);
    assert!(msgs.iter().any(|m| m.starts_with("unpacking")), "{msgs:?}");
    assert!(
        !msgs.iter().any(|m| m.starts_with("downloading")),
        "{msgs:?}"
    );
}

/// A copy of debian-cloud.toml with one line replaced, in a temp configs dir.
fn altered_descriptor(from: &str, to: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(configs_dir().join("debian-cloud.toml")).unwrap();
    assert!(text.contains(from));
    std::fs::write(dir.path().join("alt.toml"), text.replace(from, to)).unwrap();
    dir
}

#[test]
#[ignore = "downloads the debian-cloud kernel .deb (apt-get download) to check its sha256"]
fn wrong_sha256_is_a_clear_error() {
    let good = "4fdd0172a8c3f41a97e92465b2ac1867e1c10d82d7aeed3d26ee7a5d14df1754";
    let bad = "0000000000000000000000000000000000000000000000000000000000000000";
    let configs = altered_descriptor(good, bad);
    let cache = tempfile::tempdir().unwrap();
    let err = kernel::resolve(configs.path(), "alt", cache.path(), &|_| {}).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, KernelError::Checksum { .. }), "{msg}");
    assert!(
        msg.contains(bad) && msg.contains(good) && msg.contains("alt.toml"),
        "{msg}"
    );
    assert!(msg.contains("package.sha256"), "{msg}");
    // Nothing half-done is left in the cache.
    assert!(kernel::list_cached(cache.path()).unwrap().is_empty());
    assert!(
        kernel::lookup_cached(configs.path(), "alt", cache.path())
            .unwrap()
            .is_none()
    );
}

#[test]
fn vanished_version_says_how_to_update_the_pin() {
    let configs = altered_descriptor("version = \"6.1.192-3\"", "version = \"6.1.0-0testbed0\"");
    let cache = tempfile::tempdir().unwrap();
    let err = kernel::resolve(configs.path(), "alt", cache.path(), &|_| {}).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, KernelError::PinnedVersionUnavailable { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("6.1.0-0testbed0") && msg.contains("alt.toml"),
        "{msg}"
    );
    assert!(
        msg.contains("apt-cache policy linux-image-6.1.0-57-cloud-amd64"),
        "{msg}"
    );
}

#[test]
fn unknown_descriptor_lists_known_ones() {
    let cache = tempfile::tempdir().unwrap();
    let err = kernel::resolve(&configs_dir(), "nope", cache.path(), &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nope.toml") && err.contains("debian-cloud"),
        "{err}"
    );
    assert!(
        kernel::list_descriptors(&configs_dir())
            .unwrap()
            .contains(&"debian-cloud".to_string())
    );
}
