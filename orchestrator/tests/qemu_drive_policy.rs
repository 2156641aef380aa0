//! QEMU accepts the storage arguments the testbed builds, error policy
//! (`werror=report,rerror=report`) included, for every device kind and
//! backend: a typo there would only show when a VM fails to start.

use std::io::Write;
use std::process::{Command, Stdio};

use testbed::machine::qemu::argv::{Accel, Backing, QemuDevice, VmConfig, build_argv};

#[test]
#[ignore = "runs qemu-system-x86_64 (stopped before the guest starts)"]
fn qemu_accepts_the_drive_error_policy_of_every_backend() {
    let qemu = testbed::machine::qemu::qemu_binary().expect("qemu-system-x86_64 is a host tool");
    let t = tempfile::tempdir().unwrap();
    // One file per drive: QEMU locks each image.
    let file = |name: &str| {
        let path = t.path().join(name);
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        Backing::File {
            path,
            direct: false,
        }
    };
    let null = Backing::Null {
        size: 1 << 20,
        latency_ns: 0,
    };
    let config = VmConfig {
        qemu: qemu.clone(),
        accel: Accel::Tcg,
        vcpus: 1,
        memory_mib: 128,
        kernel: "/unused".into(),
        initrd: "/unused".into(),
        append: String::new(),
        console_log: t.path().join("console.log"),
        agent_socket: t.path().join("agent.sock"),
        qmp_socket: None,
        devices: vec![
            QemuDevice::Nvme {
                serial: "n".into(),
                namespaces: vec![file("n1.img"), null.clone()],
                logical_block_size: 512,
                queues: None,
            },
            QemuDevice::VirtioBlk {
                serial: "v".into(),
                backing: file("v.img"),
                logical_block_size: 512,
                queues: None,
            },
            QemuDevice::VirtioBlk {
                serial: "z".into(),
                backing: null,
                logical_block_size: 512,
                queues: None,
            },
        ],
        nics: vec![],
        clock: Default::default(),
    };
    let argv = build_argv(&config);
    // Only the storage: the controllers and drives, in order.
    let mut storage = Vec::new();
    let mut drives = 0;
    for w in argv.windows(2) {
        let is_storage = w[1].starts_with("nvme") || w[1].starts_with("virtio-blk");
        if w[0] == "-drive" || (w[0] == "-device" && is_storage) {
            drives += usize::from(w[0] == "-drive");
            storage.extend([w[0].clone(), w[1].clone()]);
        }
    }
    assert_eq!(drives, 4, "{argv:?}");
    let mut child = Command::new(&qemu)
        .args(["-nodefaults", "-S", "-display", "none", "-accel", "tcg"])
        .args(["-monitor", "stdio"])
        .args(&storage)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"quit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "qemu refused {storage:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
