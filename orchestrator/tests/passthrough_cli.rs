//! `testbed run --dry-run` with an NVMe passthrough device, on a fake
//! sysfs/procfs tree ($TESTBED_SYSFS_ROOT: this machine has no NVMe to
//! spare), and `testbed passthrough restore`. Nothing here writes to the
//! real /sys: a dry run writes nothing, and restore finds no state file.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PCI: &str = "0000:01:00.0";

const SPEC: &str = r#"[experiment]
name = "passthrough-demo"

[[devices]]
name = "fast"
kind = "passthrough"
pci = "0000:01:00.0"
bind = true

[workload]
kind = "randread"
device = "fast"
"#;

struct Case {
    t: tempfile::TempDir,
}

impl Case {
    /// A private tempdir with a fake host whose controller 0000:01:00.0 is
    /// on nvme, alone in IOMMU group 1, with namespace nvme0n1 (259:0) and
    /// partition nvme0n1p1 (259:1), nothing mounted; and the spec.
    fn new() -> Case {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let c = Case { t };
        for drv in ["nvme", "vfio-pci"] {
            c.file(&format!("sys/bus/pci/drivers/{drv}/bind"), "");
            c.file(&format!("sys/bus/pci/drivers/{drv}/unbind"), "");
        }
        c.file("sys/bus/pci/drivers_probe", "");
        let dev = format!("sys/bus/pci/devices/{PCI}");
        c.file(&format!("{dev}/class"), "0x010802\n");
        c.file(&format!("{dev}/vendor"), "0x144d\n");
        c.file(&format!("{dev}/device"), "0xa80a\n");
        c.file(&format!("{dev}/driver_override"), "(null)\n");
        c.link(&format!("{dev}/driver"), "sys/bus/pci/drivers/nvme");
        c.link(&format!("{dev}/iommu_group"), "sys/kernel/iommu_groups/1");
        c.link(&format!("sys/kernel/iommu_groups/1/devices/{PCI}"), &dev);
        c.file(&format!("{dev}/nvme/nvme0/nvme0n1/size"), "1000\n");
        c.file("sys/block/nvme0n1/dev", "259:0\n");
        c.file("sys/block/nvme0n1/nvme0n1p1/partition", "1\n");
        c.file("sys/block/nvme0n1/nvme0n1p1/dev", "259:1\n");
        std::fs::create_dir_all(c.path("sys/block/nvme0n1/holders")).unwrap();
        std::fs::create_dir_all(c.path("sys/block/nvme0n1/nvme0n1p1/holders")).unwrap();
        c.file("proc/mounts", "sysfs /sys sysfs rw 0 0\n");
        c.file(
            "proc/self/mountinfo",
            "22 1 0:21 / /sys rw - sysfs sysfs rw\n",
        );
        c.file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
        c.file("spec.toml", SPEC);
        c
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.t.path().join(rel)
    }

    fn file(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(self.path(target), p).unwrap();
    }

    fn testbed(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_testbed"))
            .args(args)
            .env("TESTBED_SYSFS_ROOT", self.t.path())
            .env("TESTBED_CACHE", self.path("cache"))
            .current_dir(self.t.path())
            .output()
            .unwrap()
    }

    fn dry_run(&self) -> Output {
        let spec = self.path("spec.toml");
        let out = self.path("run");
        self.testbed(&[
            "run",
            spec.to_str().unwrap(),
            "--dry-run",
            "--out",
            out.to_str().unwrap(),
        ])
    }

    fn driver(&self) -> String {
        let link = std::fs::read_link(self.path(&format!("sys/bus/pci/devices/{PCI}/driver")));
        link.unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn dry_run_prints_the_writes_and_the_argv_and_does_none_of_them() {
    let c = Case::new();
    let out = c.dry_run();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The README's sample output is this one.
    eprintln!("{stdout}");
    let writes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("  ") && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(str::trim)
        .collect();
    assert_eq!(
        writes,
        [
            "1. write \"0000:01:00.0\" to /sys/bus/pci/devices/0000:01:00.0/driver/unbind",
            "2. write \"vfio-pci\" to /sys/bus/pci/devices/0000:01:00.0/driver_override",
            "3. write \"0000:01:00.0\" to /sys/bus/pci/drivers_probe",
            "4. write \"0000:01:00.0\" to /sys/bus/pci/drivers/vfio-pci/unbind",
            "5. write \"\\n\" to /sys/bus/pci/devices/0000:01:00.0/driver_override",
            "6. write \"0000:01:00.0\" to /sys/bus/pci/drivers/nvme/bind",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("    -device vfio-pci,host=0000:01:00.0"),
        "{stdout}"
    );
    assert!(stdout.contains("    -accel kvm \\\n"), "{stdout}");
    assert!(
        stdout.contains("accelerator: kvm, not probed in a dry run (passthrough needs KVM"),
        "{stdout}"
    );
    assert!(
        stdout.contains("nvme0n1, nvme0n1p1 not mounted, not swap, not root, no holders"),
        "{stdout}"
    );
    // None of it was done.
    assert!(!c.path("run").exists(), "no run directory");
    assert!(!c.path("cache/passthrough").exists(), "no state file");
    assert_eq!(c.driver(), "nvme");
    for f in [
        "sys/bus/pci/drivers_probe".to_string(),
        "sys/bus/pci/drivers/nvme/unbind".into(),
        "sys/bus/pci/drivers/vfio-pci/bind".into(),
    ] {
        assert_eq!(std::fs::read_to_string(c.path(&f)).unwrap(), "", "{f}");
    }
    assert_eq!(
        std::fs::read_to_string(c.path(&format!("sys/bus/pci/devices/{PCI}/driver_override")))
            .unwrap(),
        "(null)\n"
    );
}

#[test]
fn dry_run_refuses_a_mounted_partition_naming_the_device() {
    let c = Case::new();
    c.file(
        "proc/self/mountinfo",
        "22 1 0:21 / /sys rw - sysfs sysfs rw\n41 1 259:1 / /data rw - ext4 /dev/nvme0n1p1 rw\n",
    );
    let out = c.dry_run();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(
            "device \"fast\": passthrough of 0000:01:00.0 refused: partition /dev/nvme0n1p1 is mounted on /data"
        ),
        "{stderr}"
    );
    assert!(!stdout.contains("QEMU command line"), "{stdout}");
}

#[test]
fn restore_without_a_state_file_has_nothing_to_do() {
    let c = Case::new();
    let out = c.testbed(&["passthrough", "restore"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let dir = c.path("cache/passthrough");
    assert_eq!(
        stdout,
        format!("nothing to restore: no state file in {}\n", dir.display())
    );
}

/// A state file a killed testbed left: `testbed run` warns at start-up,
/// naming the device and the command, and the dry run refuses to plan a
/// second bind of it.
#[test]
fn a_left_state_file_is_reported_at_start_up() {
    let c = Case::new();
    let state = serde_json::json!({
        "pci": PCI, "name": "fast", "original_driver": "nvme",
        "vendor": "0x144d", "device": "0xa80a", "run_dir": "/r/old-run",
        "pid": 999_999_999u32, "pid_start_ticks": 1, "time": "2026-01-01T00:00:00Z",
    });
    c.file(
        &format!("cache/passthrough/{PCI}.json"),
        &serde_json::to_string(&state).unwrap(),
    );
    let out = c.dry_run();
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .contains("[testbed] warning: passthrough 0000:01:00.0 (device \"fast\") was left on"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not restored to nvme: run `testbed passthrough restore 0000:01:00.0`"),
        "{stderr}"
    );
    assert!(!out.status.success());
    assert!(
        stderr.contains("already taken by testbed pid 999999999 (gone; restore it with `testbed passthrough restore 0000:01:00.0`)"),
        "{stderr}"
    );
    assert!(Path::new(&c.path(&format!("cache/passthrough/{PCI}.json"))).exists());
}
