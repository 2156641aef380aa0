//! A real guest image end to end: `testbed run` builds `images/test-tiny`
//! (mmdebstrap, when not cached), boots the debian-cloud kernel with it as
//! a read-only virtio disk, the agent switches to it and runs the recipe's
//! checks (samtools, mkfs.ext4 from the image), formats an NVMe device
//! with the image's mkfs.ext4 and mounts it; and, without an image, a
//! device formatted with mkfs.ext4 copied into the initramfs.
//!
//! Ignored (boots VMs, builds the image once, needs root); `./x test` runs
//! them. `cargo test -p testbed --test guest_image -- --ignored --nocapture`

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn testbed() -> Command {
    Command::new(env!("CARGO_BIN_EXE_testbed"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run_spec(dir: &Path, body: &str) -> (PathBuf, Output) {
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, body).unwrap();
    let out = dir.join("run");
    let started = Instant::now();
    let o = testbed()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("testbed runs");
    eprintln!(
        "testbed run took {:.1} s:\n{}",
        started.elapsed().as_secs_f64(),
        text(&o)
    );
    (out, o)
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

/// `dumpe2fs -h` of a device's backing file, after the run.
fn superblock(backing: &Path) -> String {
    let o = Command::new("dumpe2fs")
        .arg("-h")
        .arg(backing)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn field<'a>(superblock: &'a str, name: &str) -> &'a str {
    superblock
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim_start_matches(':').trim())
        .unwrap_or_else(|| panic!("no {name} in {superblock}"))
}

const RANDREAD: &str = r#"
[[devices]]
name = "data"
kind = "nvme"
size = "16M"

[[devices]]
name = "scratch"
kind = "nvme"
size = "64M"
filesystem = "ext4"
mount = "/mnt/scratch"

[workload]
kind = "randread"
device = "data"
reads_per_thread = 50
warmup_reads = 5
"#;

#[test]
#[ignore = "builds images/test-tiny with mmdebstrap and boots a QEMU VM with it (minutes)"]
fn a_run_on_the_tiny_image_has_debian_its_tools_and_a_formatted_device() {
    let _g = serial();
    // The image alone first, timed (a no-op when cached).
    let started = Instant::now();
    let o = testbed()
        .args(["image", "build", "test-tiny"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    eprintln!(
        "image build test-tiny: {:.1} s\n{}",
        started.elapsed().as_secs_f64(),
        text(&o)
    );
    let listed = testbed().args(["image", "list"]).output().unwrap();
    assert!(
        text(&listed)
            .lines()
            .any(|l| l.contains("test-tiny") && l.contains("built")),
        "{}",
        text(&listed)
    );

    let t = tempfile::tempdir().unwrap();
    let body = format!(
        "[experiment]\nname = \"image-tiny\"\n\n[vm]\nmemory = \"768M\"\n\n[image]\nname = \"test-tiny\"\n{RANDREAD}"
    );
    let (out, o) = run_spec(t.path(), &body);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");

    // The manifest records the image: name, key, recipe hash, versions.
    let rootfs = &m["inputs"]["rootfs"];
    assert_eq!(rootfs["name"], "test-tiny", "{rootfs}");
    assert_eq!(rootfs["key"].as_str().unwrap().len(), 64);
    assert_eq!(rootfs["recipe_sha256"].as_str().unwrap().len(), 64);
    let samtools = rootfs["installed"]["samtools"].as_str().unwrap();
    assert_eq!(rootfs["candidates"]["samtools"], samtools);
    assert!(
        rootfs["installed"]["libc6"].is_string(),
        "the closure is listed"
    );

    // QEMU had it as a read-only disk.
    let argv: Vec<&str> = m["boots"][0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let argv = argv.join(" ");
    assert!(argv.contains("readonly=on"), "{argv}");
    assert!(argv.contains("serial=testbed-root"), "{argv}");

    // The agent switched to it, ran the recipe's checks in it (samtools
    // and mkfs.ext4 of the image) and formatted the scratch device.
    let console = std::fs::read_to_string(out.join("console.log")).unwrap();
    assert!(console.contains("root is image test-tiny"), "{console}");
    assert!(console.contains(": Debian 12."), "{console}");
    assert!(
        console.contains("check `samtools --version`: samtools 1."),
        "{console}"
    );
    assert!(
        console.contains("check `mkfs.ext4 -V`: mke2fs"),
        "{console}"
    );
    assert!(
        console.contains("formatted scratch (/dev/nvme") && console.contains("on /mnt/scratch"),
        "{console}"
    );
    // The device holds an ext4 file system the guest mounted once.
    let sb = superblock(&out.join("devices/scratch.img"));
    assert_eq!(field(&sb, "Filesystem volume name"), "scratch", "{sb}");
    assert_eq!(field(&sb, "Mount count"), "1", "{sb}");
    // The image itself was not written: still read-only on the host.
    let image = PathBuf::from(rootfs["path"].as_str().unwrap());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&image).unwrap().permissions().mode();
    assert_eq!(mode & 0o222, 0, "{}", image.display());
}

#[test]
#[ignore = "boots a QEMU VM (about a minute under TCG)"]
fn without_an_image_the_initramfs_mkfs_formats_and_mounts_a_device() {
    let _g = serial();
    let t = tempfile::tempdir().unwrap();
    let body = format!(
        "[experiment]\nname = \"image-fs\"\n\n[vm]\nmemory = \"512M\"\n\n[image]\ninclude = [\"mkfs.ext4\"]\n{RANDREAD}"
    );
    let (out, o) = run_spec(t.path(), &body);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(manifest(&out)["status"], "complete");
    assert!(manifest(&out)["inputs"]["rootfs"].is_null());
    let console = std::fs::read_to_string(out.join("console.log")).unwrap();
    assert!(!console.contains("root is image"), "{console}");
    assert!(console.contains("on /mnt/scratch"), "{console}");
    let sb = superblock(&out.join("devices/scratch.img"));
    assert_eq!(field(&sb, "Mount count"), "1", "{sb}");
}

#[test]
fn a_spec_naming_a_missing_recipe_is_refused_at_its_line() {
    let t = tempfile::tempdir().unwrap();
    let spec = t.path().join("spec.toml");
    let body =
        format!("[experiment]\nname = \"x\"\n\n[image]\nname = \"no-such-recipe\"\n{RANDREAD}");
    std::fs::write(&spec, body).unwrap();
    let o = testbed().arg("validate").arg(&spec).output().unwrap();
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("spec.toml:5:1: image.name:"), "{msg}");
    assert!(msg.contains("no-such-recipe.toml"), "{msg}");
}
