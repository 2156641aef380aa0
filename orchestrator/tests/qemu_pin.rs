//! QMP gives each vCPU's host thread, and pinning puts those threads (and
//! QEMU's others) where the plan says: read back from the kernel, on a real
//! QEMU stopped before its guest starts.

use std::path::Path;
use std::time::Duration;

use testbed::machine::qemu::pin::{PinSetting, Pinning, apply, host_cpus};
use testbed::machine::qemu::process::GroupProcess;
use testbed::machine::qemu::qmp::Qmp;

/// The CPUs a thread may run on, as the kernel says.
fn allowed(pid: u32, tid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

fn start_qemu(dir: &Path, vcpus: u32) -> (GroupProcess, Qmp) {
    let qemu = testbed::machine::qemu::qemu_binary().expect("qemu-system-x86_64 is a host tool");
    let sock = dir.join("qmp.sock");
    let argv: Vec<String> = [
        qemu.to_string_lossy().as_ref(),
        "-nodefaults",
        "-S",
        "-display",
        "none",
        "-accel",
        "tcg,thread=multi",
        "-smp",
        &vcpus.to_string(),
        "-m",
        "128",
        "-qmp",
        &format!("unix:{},server=on,wait=off", sock.display()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let vm = GroupProcess::spawn(&argv, &dir.join("qemu.log")).unwrap();
    let qmp = Qmp::connect(&sock, Duration::from_secs(20)).unwrap();
    (vm, qmp)
}

/// Every thread in the record is where the kernel says it may run.
fn check_against_kernel(pid: u32, p: &Pinning) {
    for t in p.vcpus.iter().chain(&p.others) {
        let now = allowed(pid, t.thread_id);
        match &t.not_pinned {
            None => assert_eq!(
                now,
                testbed::machine::qemu::pin::cpu_list(&t.host_cpus),
                "thread {}",
                t.thread_id
            ),
            Some(_) => assert!(t.host_cpus.is_empty(), "{t:?}"),
        }
    }
}

#[test]
#[ignore = "runs qemu-system-x86_64 (stopped before the guest starts)"]
fn qmp_names_each_vcpu_thread_and_pinning_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let (vm, mut qmp) = start_qemu(dir.path(), 2);
    let vcpus = qmp.vcpu_threads().unwrap();
    assert_eq!(
        vcpus.iter().map(|v| v.cpu_index).collect::<Vec<_>>(),
        [0, 1]
    );
    for v in &vcpus {
        assert!(
            Path::new(&format!("/proc/{}/task/{}", vm.pid, v.thread_id)).exists(),
            "vCPU {} thread {} is not a thread of QEMU {}",
            v.cpu_index,
            v.thread_id,
            vm.pid
        );
    }
    let host = host_cpus();
    assert!(!host.is_empty());

    let auto = apply(vm.pid, &vcpus, &PinSetting::Auto, &host);
    eprintln!("{}", auto.describe());
    assert_eq!(auto.vcpus.len(), 2);
    assert!(!auto.others.is_empty(), "QEMU has a main thread");
    check_against_kernel(vm.pid, &auto);
    if host.len() >= 2 {
        // One CPU per vCPU at least: every vCPU is pinned to one CPU alone.
        for v in &auto.vcpus {
            assert_eq!(v.host_cpus.len(), 1, "{v:?}");
        }
        assert_ne!(auto.vcpus[0].host_cpus, auto.vcpus[1].host_cpus);
    }

    // An explicit list, reversed: vCPU 0 on the last CPU.
    if host.len() >= 2 {
        let list = vec![host[1], host[0]];
        let p = apply(vm.pid, &vcpus, &PinSetting::Cpus(list.clone()), &host);
        assert_eq!(p.vcpus[0].host_cpus, [list[0]]);
        assert_eq!(p.vcpus[1].host_cpus, [list[1]]);
        check_against_kernel(vm.pid, &p);
        for o in &p.others {
            assert!(
                o.not_pinned
                    .as_deref()
                    .is_some_and(|w| w.contains("no CPU after the vCPUs'")),
                "{o:?}"
            );
        }
    }
    drop(vm);
}
