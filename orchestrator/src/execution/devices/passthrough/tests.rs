//! Binding and restoring on a fake host: every refusal leaves the tree
//! untouched, the happy path makes exactly the expected writes, and a
//! failure mid-bind is put right (at once, or later from the state file).

use std::cell::RefCell;
use std::rc::Rc;

use super::*;
use crate::execution::devices::fake::{FakeHost, FakeKernel, PCI, state_dir};
use crate::execution::devices::tests::passthrough_spec;

fn w(file: &str, value: &str) -> SysWrite {
    SysWrite::new(file, value)
}

const BIND: [(&str, &str); 3] = [
    (
        "sys/bus/pci/devices/0000:01:00.0/driver/unbind",
        "0000:01:00.0",
    ),
    (
        "sys/bus/pci/devices/0000:01:00.0/driver_override",
        "vfio-pci",
    ),
    ("sys/bus/pci/drivers_probe", "0000:01:00.0"),
];

const RESTORE: [(&str, &str); 3] = [
    ("sys/bus/pci/drivers/vfio-pci/unbind", "0000:01:00.0"),
    ("sys/bus/pci/devices/0000:01:00.0/driver_override", "\n"),
    ("sys/bus/pci/drivers/nvme/bind", "0000:01:00.0"),
];

fn writes(list: &[(&str, &str)]) -> Vec<SysWrite> {
    list.iter().map(|(f, v)| w(f, v)).collect()
}

fn prepared(f: &FakeHost) -> Vec<PreparedDevice> {
    let (p, _) =
        crate::execution::devices::check_passthrough(&passthrough_spec("fast", PCI, true), &f.host)
            .expect("the good fake controller passes the checks");
    vec![p]
}

/// Binds on the fake host; the writes the kernel saw, and the outcome.
fn bind_with(
    f: &FakeHost,
    kernel: FakeKernel,
) -> (Rc<RefCell<Vec<SysWrite>>>, Result<Bound, DeviceError>) {
    let log = kernel.log.clone();
    let specs = [passthrough_spec("fast", PCI, true)];
    let devices: Vec<PreparedDevice> = specs
        .iter()
        .map(|s| PreparedDevice {
            spec: s.clone(),
            qemu: crate::machine::qemu::argv::QemuDevice::Vfio { host: PCI.into() },
            files: vec![],
            host_direct: true,
            note: None,
        })
        .collect();
    let r = bind_all(
        &devices,
        f.host.clone(),
        Box::new(kernel),
        &state_dir(f),
        Path::new("/r/run"),
    );
    (log, r)
}

/// The checks (as prepare runs them) and the bind (which checks again):
/// both refuse, with `fragment` in the reason, and nothing is written.
fn assert_refused(f: &FakeHost, fragment: &str) {
    let e =
        crate::execution::devices::check_passthrough(&passthrough_spec("fast", PCI, true), &f.host)
            .map(|_| ())
            .unwrap_err()
            .to_string();
    assert!(
        e.starts_with("device \"fast\": passthrough of 0000:01:00.0 refused: "),
        "{e}"
    );
    assert!(e.contains(fragment), "wanted {fragment:?} in: {e}");
    let (log, r) = bind_with(f, FakeKernel::new());
    let e2 = r.map(|_| ()).unwrap_err().to_string();
    assert_eq!(e2, e);
    assert!(log.borrow().is_empty(), "written: {:?}", log.borrow());
    assert!(!state_dir(f).exists(), "no state file");
    assert_eq!(
        f.read("sys/bus/pci/devices/0000:01:00.0/driver_override"),
        "(null)\n"
    );
}

#[test]
fn refuses_a_mounted_partition_by_name() {
    let f = FakeHost::good();
    f.append("proc/mounts", "/dev/nvme0n1p1 /data ext4 rw 0 0\n");
    assert_refused(&f, "partition /dev/nvme0n1p1 is mounted on /data");
}

#[test]
fn refuses_a_partition_mounted_only_by_its_numbers() {
    // Mounted through another name (a /dev/disk/by-uuid link, a copy of the
    // node): only mountinfo's major:minor tells.
    let f = FakeHost::good();
    f.append(
        "proc/self/mountinfo",
        "40 1 259:1 / /srv rw,relatime - xfs /dev/disk/by-uuid/abc rw\n",
    );
    assert_refused(&f, "partition /dev/nvme0n1p1 is mounted on /srv");
}

#[test]
fn refuses_the_root_disk() {
    let f = FakeHost::good();
    f.append(
        "proc/self/mountinfo",
        "30 1 259:0 / / rw,relatime - ext4 /dev/root rw\n",
    );
    assert_refused(&f, "namespace /dev/nvme0n1 holds the root filesystem");
}

#[test]
fn refuses_swap() {
    let f = FakeHost::good();
    f.append("proc/swaps", "/dev/nvme0n1p1 partition 1048572 0 -2\n");
    assert_refused(&f, "partition /dev/nvme0n1p1 is in use as swap");
}

#[test]
fn refuses_a_device_mapper_holder_and_follows_it() {
    let f = FakeHost::good();
    f.holder(
        "sys/block/nvme0n1/nvme0n1p1",
        "dm-0",
        "253:0",
        Some(("vg-data", "LVM-abcdef")),
    );
    // Unmounted, a holder is still a refusal.
    assert_refused(
        &f,
        "partition /dev/nvme0n1p1 is held by dm-0 (LVM volume \"vg-data\"): a holder",
    );
    // Mounted through /dev/mapper, the message says where.
    f.append("proc/mounts", "/dev/mapper/vg-data /data xfs rw 0 0\n");
    assert_refused(
        &f,
        "held by dm-0 (LVM volume \"vg-data\"), which is mounted on /data",
    );
    // A holder of the holder (dm-crypt on LVM), used as swap by number.
    f.file("proc/mounts", "");
    f.holder(
        "sys/block/dm-0",
        "dm-1",
        "253:1",
        Some(("cryptswap", "CRYPT-LUKS2-x")),
    );
    f.append("proc/swaps", "/dev/dm-1 partition 1024 0 -2\n");
    assert_refused(
        &f,
        "itself held by dm-1 (dm-crypt device \"cryptswap\"), which is in use as swap",
    );
}

#[test]
fn refuses_an_md_holder_of_the_whole_namespace() {
    let f = FakeHost::good();
    f.holder("sys/block/nvme0n1", "md0", "9:0", None);
    f.file("sys/block/md0/md/level", "raid1\n");
    assert_refused(&f, "namespace /dev/nvme0n1 is held by md0 (md RAID)");
}

#[test]
fn refuses_a_shared_iommu_group_but_allows_bridges_and_stubs() {
    let f = FakeHost::good();
    f.controller("0000:00:01.0", "0x060400", Some("pcieport"), Some("1"));
    f.controller("0000:01:00.2", "0x0c0330", Some("pci-stub"), Some("1"));
    f.controller("0000:01:00.3", "0x0c0330", None, Some("1"));
    let (_, c) =
        crate::execution::devices::check_passthrough(&passthrough_spec("fast", PCI, true), &f.host)
            .unwrap();
    assert_eq!(
        c.group_peers,
        [
            "0000:00:01.0 (a bridge)",
            "0000:01:00.2 (bound to a stub driver)",
            "0000:01:00.3 (bound to no driver)"
        ]
    );
    f.controller("0000:01:00.1", "0x020000", Some("e1000e"), Some("1"));
    assert_refused(
        &f,
        "its IOMMU group 1 also holds 0000:01:00.1 (class 0x020000, bound to e1000e)",
    );
}

#[test]
fn refuses_without_an_iommu() {
    let f = FakeHost::good();
    std::fs::remove_file(f.path("sys/bus/pci/devices/0000:01:00.0/iommu_group")).unwrap();
    assert_refused(&f, "it has no IOMMU group");
    std::fs::remove_dir_all(f.path("sys/kernel/iommu_groups")).unwrap();
    assert_refused(&f, "the IOMMU is off");
}

#[test]
fn refuses_without_the_vfio_pci_driver() {
    let f = FakeHost::good();
    std::fs::remove_dir_all(f.path("sys/bus/pci/drivers/vfio-pci")).unwrap();
    assert_refused(&f, "the vfio-pci driver is not loaded");
}

#[test]
fn refuses_what_is_not_an_nvme_controller_or_not_on_nvme() {
    let f = FakeHost::good();
    f.file("sys/bus/pci/devices/0000:01:00.0/class", "0x010601\n");
    assert_refused(
        &f,
        "class \"0x010601\" is not an NVMe controller (0x010802)",
    );
    let f = FakeHost::good();
    f.link(
        "sys/bus/pci/devices/0000:01:00.0/driver",
        "sys/bus/pci/drivers/e1000e",
    );
    assert_refused(
        &f,
        "bound to e1000e: bind = true takes a controller from the nvme driver only",
    );
}

#[test]
fn binds_with_exactly_these_writes_and_restores_when_dropped() {
    let f = FakeHost::good();
    let (log, r) = bind_with(&f, FakeKernel::new());
    let bound = r.unwrap();
    assert_eq!(*log.borrow(), writes(&BIND));
    assert_eq!(f.driver(PCI).as_deref(), Some("vfio-pci"));
    // The state file was written first, and names everything needed.
    let s = state::read(&state_dir(&f).join("0000:01:00.0.json")).unwrap();
    assert_eq!(
        (s.pci.as_str(), s.name.as_str(), s.original_driver.as_str()),
        (PCI, "fast", "nvme")
    );
    assert_eq!((s.vendor.as_str(), s.device.as_str()), ("0x144d", "0xa80a"));
    assert_eq!(s.run_dir, Path::new("/r/run"));
    assert_eq!(s.pid, std::process::id());
    assert!(s.owner_alive());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(state_dir(&f))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    // While bound, a second bind of the same controller is refused.
    let again = check_not_taken(&state_dir(&f), "other", PCI)
        .unwrap_err()
        .to_string();
    assert!(again.contains("already taken by testbed pid"), "{again}");
    assert!(again.contains("(running)"), "{again}");
    drop(bound);
    let mut all = writes(&BIND);
    all.extend(writes(&RESTORE));
    assert_eq!(*log.borrow(), all);
    assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
    assert_eq!(
        f.read("sys/bus/pci/devices/0000:01:00.0/driver_override"),
        "\n"
    );
    assert!(!state_dir(&f).join("0000:01:00.0.json").exists());
}

#[test]
fn a_probe_that_binds_nothing_is_rolled_back_at_once() {
    let f = FakeHost::good();
    let mut k = FakeKernel::new();
    k.probe_binds = false;
    let (log, r) = bind_with(&f, k);
    let e = r.map(|_| ()).unwrap_err().to_string();
    assert_eq!(
        e,
        "device \"fast\": passthrough of 0000:01:00.0: binding to vfio-pci failed: \
         it ended on no driver, not vfio-pci; it is back on nvme"
    );
    // No vfio-pci unbind: it never got there.
    let mut expected = writes(&BIND);
    expected.extend(writes(&RESTORE[1..]));
    assert_eq!(*log.borrow(), expected);
    assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
    assert!(!state_dir(&f).join("0000:01:00.0.json").exists());
}

#[test]
fn a_failure_between_unbind_and_bind_is_restored_from_the_state_file() {
    let f = FakeHost::good();
    // Everything after the unbind fails, the rollback too: as if the
    // testbed died right after the unbind.
    let mut k = FakeKernel::new();
    k.fail_from = Some(1);
    let (log, r) = bind_with(&f, k);
    let e = r.map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("binding to vfio-pci failed: write \"vfio-pci\" to /sys/bus/pci/devices/0000:01:00.0/driver_override: simulated failure"), "{e}");
    assert!(e.contains("restoring nvme failed"), "{e}");
    assert!(
        e.contains("run `testbed passthrough restore 0000:01:00.0` as root"),
        "{e}"
    );
    assert_eq!(*log.borrow(), writes(&BIND[..1]));
    assert_eq!(f.driver(PCI), None, "left on no driver");
    let file = state_dir(&f).join("0000:01:00.0.json");
    assert!(file.exists());
    // The next testbed warns about it once its owner is gone ...
    let mut s = state::read(&file).unwrap();
    assert!(
        unrestored(&f.host, &state_dir(&f)).is_empty(),
        "its owner (us) runs"
    );
    s.pid_start_ticks = Some(u64::MAX);
    state::write(&state_dir(&f), &s).unwrap();
    let warn = unrestored(&f.host, &state_dir(&f));
    assert_eq!(warn.len(), 1, "{warn:?}");
    assert!(
        warn[0].contains("passthrough 0000:01:00.0 (device \"fast\") was left on no driver"),
        "{warn:?}"
    );
    assert!(
        warn[0].contains("run `testbed passthrough restore 0000:01:00.0`"),
        "{warn:?}"
    );
    // ... and `testbed passthrough restore` gives it back to nvme.
    let k = FakeKernel::new();
    let log = k.log.clone();
    let mut k = k;
    let r = restore_from_state(&f.host, &mut k, &state_dir(&f), None, false);
    assert!(!r.failed, "{:?}", r.lines);
    assert_eq!(
        r.lines,
        ["passthrough 0000:01:00.0: device \"fast\" is back on nvme"]
    );
    assert_eq!(*log.borrow(), writes(&RESTORE[1..]));
    assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
    assert!(!file.exists());
    assert!(unrestored(&f.host, &state_dir(&f)).is_empty());
    let r = restore_from_state(&f.host, &mut k, &state_dir(&f), None, false);
    assert!(
        r.lines[0].starts_with("nothing to restore: no state file in "),
        "{:?}",
        r.lines
    );
}

#[test]
fn restore_leaves_a_device_of_a_running_testbed_alone_unless_forced() {
    let f = FakeHost::good();
    let (_, r) = bind_with(&f, FakeKernel::new());
    let mut bound = r.unwrap();
    let mut k = FakeKernel::new();
    let r = restore_from_state(&f.host, &mut k, &state_dir(&f), Some(PCI), false);
    assert!(r.failed);
    assert!(r.lines[0].contains("still runs with it"), "{:?}", r.lines);
    assert_eq!(f.driver(PCI).as_deref(), Some("vfio-pci"));
    let r = restore_from_state(&f.host, &mut k, &state_dir(&f), Some("0000:02:00.0"), false);
    assert!(r.lines[0].starts_with("nothing to restore: no state file for 0000:02:00.0"));
    let r = restore_from_state(&f.host, &mut k, &state_dir(&f), Some(PCI), true);
    assert!(!r.failed, "{:?}", r.lines);
    assert_eq!(*k.log.borrow(), writes(&RESTORE));
    // The guard finds it back on nvme: it only clears the override again.
    let after = bound.restore_all();
    assert_eq!(after.len(), 1);
    assert!(after[0].is_ok(), "{after:?}");
    assert_eq!(k.log.borrow().len(), 3);
    assert_eq!(f.driver(PCI).as_deref(), Some("nvme"));
}

#[test]
fn passthrough_needs_kvm() {
    let f = FakeHost::good();
    let p = prepared(&f);
    let tcg = AccelDecision {
        requested: crate::planning::spec::AccelChoice::Auto,
        used: Accel::Tcg,
        reasons: vec![
            "/dev/kvm does not open: No such file".into(),
            "falling back to TCG".into(),
        ],
        probe: None,
    };
    let e = require_kvm(&p, &tcg).unwrap_err().to_string();
    assert_eq!(
        e,
        "device \"fast\": passthrough needs KVM: /dev/kvm does not open: No such file; falling back to TCG"
    );
    let kvm = AccelDecision {
        used: Accel::Kvm,
        ..tcg.clone()
    };
    require_kvm(&p, &kvm).unwrap();
    require_kvm(&[], &tcg).unwrap();
}

#[test]
fn a_controller_already_on_vfio_pci_is_used_without_writes() {
    let f = FakeHost::good();
    f.link(
        "sys/bus/pci/devices/0000:01:00.0/driver",
        "sys/bus/pci/drivers/vfio-pci",
    );
    let (log, r) = bind_with(&f, FakeKernel::new());
    assert!(r.unwrap().is_empty());
    assert!(log.borrow().is_empty());
    assert!(!state_dir(&f).exists());
}
