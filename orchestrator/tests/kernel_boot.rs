//! Boot the resolved kernels under QEMU TCG with a throwaway busybox
//! initramfs and check the guest sees NVMe, virtio-blk, virtio-serial and
//! virtio-net. Ignored by default: needs qemu-system-x86, busybox-static and
//! cpio, and vm-hooks needs a full kernel build first.
//! `cargo test -p testbed --test kernel_boot -- --ignored --nocapture`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use testbed::inputs::kernel::{self, KernelArtifact};

fn configs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel-configs")
}

/// A newc initramfs with static busybox, `/init` = `script`, and `files`.
fn initramfs(work: &Path, script: &str, files: &[(String, PathBuf)]) -> PathBuf {
    let root = work.join("root");
    for d in ["bin", "proc", "sys", "dev", "mods"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for (name, from) in files {
        std::fs::copy(from, root.join("mods").join(name)).unwrap();
    }
    let init = root.join("init");
    std::fs::write(
        &init,
        format!("#!/bin/busybox sh\n/bin/busybox --install -s /bin\n{script}"),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&init).status().unwrap();
    let cpio = work.join("initramfs.cpio");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && find . | cpio -o -H newc --quiet > {}",
            root.display(),
            cpio.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    cpio
}

const PROBE: &str = "mount -t proc proc /proc\nmount -t sysfs sys /sys\n";
const REPORT: &str = "echo \"UNAME=$(uname -r)\"\necho \"VERSION=$(cat /proc/version)\"\n\
echo \"CPUS=$(grep -c ^processor /proc/cpuinfo)\"\necho \"BLOCK=$(ls /sys/block | tr '\\n' ' ')\"\n\
echo \"NET=$(ls /sys/class/net | tr '\\n' ' ')\"\necho \"PORTS=$(ls /sys/class/virtio-ports | tr '\\n' ' ')\"\n\
echo \"BTF=$(ls /sys/kernel/btf 2>/dev/null | tr '\\n' ' ')\"\necho DONE\npoweroff -f\n";

/// Boot and return the serial console text.
fn boot(a: &KernelArtifact, initrd: &Path, work: &Path) -> String {
    let log = work.join("console.log");
    let drive = |id: &str| {
        let disk = work.join(format!("{id}.img"));
        std::fs::File::create(&disk)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        format!("file={},if=none,id={id},format=raw", disk.display())
    };
    let status = Command::new("timeout")
        .arg("180")
        .arg("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg,thread=multi",
            "-cpu",
            "max",
            "-m",
            "512",
            "-smp",
            "2",
        ])
        .args(["-nodefaults", "-no-reboot", "-display", "none"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&a.bzimage)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyS0 panic=-1 tsc=reliable"])
        .args([
            "-drive",
            &drive("nv0"),
            "-device",
            "nvme,serial=tb0,drive=nv0",
        ])
        .args([
            "-drive",
            &drive("vd0"),
            "-device",
            "virtio-blk-pci,drive=vd0",
        ])
        .args(["-device", "virtio-serial-pci", "-chardev", "null,id=c0"])
        .args(["-device", "virtserialport,chardev=c0,name=testbed.0"])
        .args([
            "-netdev",
            "user,id=n0,restrict=on",
            "-device",
            "virtio-net-pci,netdev=n0",
        ])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    let console = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "qemu: {status}\n{console}");
    console
}

fn field<'c>(console: &'c str, key: &str) -> &'c str {
    console
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in console:\n{console}"))
}

fn check_devices(console: &str, a: &KernelArtifact) {
    assert!(console.contains("DONE"), "{console}");
    assert_eq!(field(console, "UNAME"), a.release);
    assert_eq!(field(console, "CPUS"), "2");
    let block = field(console, "BLOCK");
    assert!(
        block.contains("nvme0n1") && block.contains("vda"),
        "{block}"
    );
    assert!(field(console, "NET").contains("eth0"), "{console}");
    assert!(field(console, "PORTS").contains("vport"), "{console}");
}

#[test]
#[ignore = "boots QEMU (TCG)"]
fn debian_cloud_modules_load_in_computed_order() {
    let a = kernel::resolve(
        &configs_dir(),
        "debian-cloud",
        &kernel::default_cache_root(),
        &|m| eprintln!("  {m}"),
    )
    .unwrap();
    let order = a.module_load_order(&a.default_modules()).unwrap();
    let names: Vec<&str> = order.iter().map(|m| m.name.as_str()).collect();
    eprintln!("load order: {names:?}");
    let files: Vec<(String, PathBuf)> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("{i:02}-{}.ko", m.name), m.path.clone()))
        .collect();
    let mut script = PROBE.to_string();
    for (f, _) in &files {
        script.push_str(&format!(
            "insmod /mods/{f} && echo \"LOADED {f}\" || echo \"FAILED {f}\"\n"
        ));
    }
    script.push_str("sleep 1\n");
    script.push_str(REPORT);
    let work = tempfile::tempdir().unwrap();
    let initrd = initramfs(work.path(), &script, &files);
    let console = boot(&a, &initrd, work.path());
    assert!(!console.contains("FAILED"), "{console}");
    assert_eq!(console.matches("LOADED ").count(), files.len(), "{console}");
    check_devices(&console, &a);
}

#[test]
#[ignore = "boots QEMU (TCG); needs the vm-hooks build"]
fn our_kernel_boots_with_everything_built_in() {
    // vm-hooks: vm-base's options plus the storage hooks, built by CI anyway.
    let a = kernel::build(
        &configs_dir(),
        "vm-hooks",
        &kernel::default_cache_root(),
        &|m| eprintln!("  {m}"),
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let initrd = initramfs(work.path(), &format!("{PROBE}{REPORT}"), &[]);
    let console = boot(&a, &initrd, work.path());
    eprintln!("{}", field(&console, "VERSION"));
    check_devices(&console, &a);
    // /proc/version names the cache key (KBUILD_BUILD_HOST).
    assert!(
        field(&console, "VERSION").contains(&a.key[..16]),
        "{console}"
    );
    assert!(field(&console, "BTF").contains("vmlinux"), "{console}");
}
