//! The QEMU command line, built by one pure function from a `VmConfig` so
//! that every flag is covered by golden tests.

use std::path::PathBuf;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        })
    }
}

/// What the guest's clock counts. `Instructions`: QEMU's icount with
/// `shift=0`, sleep and align off — the guest's clock advances one
/// nanosecond per instruction it executes, in one TCG thread, so every
/// time the guest reads is an instruction count, the same on every run of
/// the same work (issue 51). Only under TCG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    #[default]
    Wall,
    Instructions,
}

impl Clock {
    pub fn is_wall(&self) -> bool {
        *self == Clock::Wall
    }
}

/// A storage device as QEMU sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum QemuDevice {
    Nvme {
        serial: String,
        /// One backing per namespace, nsid = index + 1.
        namespaces: Vec<Backing>,
        logical_block_size: u32,
        queues: Option<u32>,
    },
    VirtioBlk {
        serial: String,
        backing: Backing,
        logical_block_size: u32,
        queues: Option<u32>,
    },
    /// A host PCI device handed to the guest whole.
    Vfio { host: String },
    /// A guest root filesystem image: a read-only virtio disk the agent
    /// finds by its serial.
    RootImage { path: PathBuf, serial: String },
    /// A device a kind spells out itself (`spec::device_kinds`): its
    /// drives, each an id and a backing, then its `-device` values in
    /// order (a controller before what sits on its bus).
    Custom {
        drives: Vec<(String, Backing)>,
        devices: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Backing {
    /// A raw file; `direct` = O_DIRECT on the host (cache=none).
    File { path: PathBuf, direct: bool },
    /// null-co: reads return zeroes after `latency_ns`.
    Null { size: u64, latency_ns: u64 },
}

/// A guest network interface.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Nic {
    pub mac: String,
    /// `-netdev` backend options after the id, e.g. "socket,listen=127.0.0.1:5000".
    pub netdev: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmConfig {
    pub qemu: PathBuf,
    pub accel: Accel,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub append: String,
    pub console_log: PathBuf,
    pub agent_socket: PathBuf,
    /// QMP, for the vCPU threads' ids (pinning, the boot record).
    pub qmp_socket: Option<PathBuf>,
    pub devices: Vec<QemuDevice>,
    pub nics: Vec<Nic>,
    /// The guest's clock (TCG only: instructions).
    pub clock: Clock,
}

/// QEMU escapes a comma inside an option value by doubling it.
fn esc(p: &std::path::Path) -> String {
    p.to_string_lossy().replace(',', ",,")
}

pub fn build_argv(c: &VmConfig) -> Vec<String> {
    let mut a: Vec<String> = vec![c.qemu.to_string_lossy().into_owned()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-nodefaults", "-no-reboot", "-nographic", "-no-user-config"]);
    match c.accel {
        // -cpu host exposes the real CPU; KVM would refuse a model it lacks.
        Accel::Kvm => push(&["-accel", "kvm", "-cpu", "host"]),
        // multi-threaded TCG: one host thread per vCPU. Nehalem, not max:
        // QEMU 7.2's TCG advertises with max features it mis-executes (the
        // JVM's JIT code died with SIGILL in Picard in the guest, with or
        // without AVX); Nehalem (SSE4.2, POPCNT) runs everything we ship.
        Accel::Tcg if c.clock == Clock::Instructions => {
            // icount needs single-threaded TCG; sleep=off: an idle guest's
            // clock jumps to its next timer at once instead of waiting for
            // the host's; align=off: no pacing against the host's clock.
            push(&["-accel", "tcg,thread=single", "-cpu", "Nehalem"]);
            push(&["-icount", "shift=0,sleep=off,align=off"]);
        }
        Accel::Tcg => push(&["-accel", "tcg,thread=multi", "-cpu", "Nehalem"]),
    }
    let smp = c.vcpus.to_string();
    let mem = format!("{}M", c.memory_mib);
    push(&["-smp", &smp, "-m", &mem]);
    let kernel = c.kernel.to_string_lossy().into_owned();
    let initrd = c.initrd.to_string_lossy().into_owned();
    push(&["-kernel", &kernel, "-initrd", &initrd, "-append", &c.append]);
    let serial = format!("file:{}", c.console_log.to_string_lossy());
    push(&["-serial", &serial, "-monitor", "none"]);
    if let Some(q) = &c.qmp_socket {
        let qmp = format!("unix:{},server=on,wait=off", esc(q));
        push(&["-qmp", &qmp]);
    }
    let chardev = format!(
        "socket,id=agent,path={},server=on,wait=off",
        esc(&c.agent_socket)
    );
    push(&[
        "-device",
        "virtio-serial-pci,id=vser0",
        "-chardev",
        &chardev,
        "-device",
        "virtserialport,bus=vser0.0,chardev=agent,name=org.testbed.agent",
    ]);
    for (i, d) in c.devices.iter().enumerate() {
        match d {
            QemuDevice::Nvme {
                serial,
                namespaces,
                logical_block_size,
                queues,
            } => {
                let mut ctrl = format!("nvme,id=nvme{i},serial={serial}");
                if let Some(q) = queues {
                    ctrl.push_str(&format!(",max_ioqpairs={q}"));
                }
                push(&["-device", &ctrl]);
                for (n, backing) in namespaces.iter().enumerate() {
                    let id = format!("nvme{i}n{}", n + 1);
                    let drive = drive_opts(&id, backing);
                    let ns = format!(
                        "nvme-ns,drive={id},bus=nvme{i},nsid={},logical_block_size={lbs},physical_block_size={lbs}",
                        n + 1,
                        lbs = logical_block_size
                    );
                    push(&["-drive", &drive, "-device", &ns]);
                }
            }
            QemuDevice::VirtioBlk {
                serial,
                backing,
                logical_block_size,
                queues,
            } => {
                let id = format!("vblk{i}");
                let drive = drive_opts(&id, backing);
                let mut dev = format!(
                    "virtio-blk-pci,drive={id},serial={serial},logical_block_size={lbs},physical_block_size={lbs}",
                    lbs = logical_block_size
                );
                if let Some(q) = queues {
                    dev.push_str(&format!(",num-queues={q}"));
                }
                push(&["-drive", &drive, "-device", &dev]);
            }
            QemuDevice::Vfio { host } => {
                let dev = format!("vfio-pci,host={host}");
                push(&["-device", &dev]);
            }
            QemuDevice::RootImage { path, serial } => {
                // Shared by every run of the image: the guest cannot write
                // it, and the host's page cache serves all of them.
                let id = format!("root{i}");
                let drive = format!(
                    "file={},if=none,id={id},format=raw,readonly=on,cache=writeback,{ERROR_POLICY}",
                    esc(path)
                );
                let dev = format!("virtio-blk-pci,drive={id},serial={serial}");
                push(&["-drive", &drive, "-device", &dev]);
            }
            QemuDevice::Custom { drives, devices } => {
                for (id, backing) in drives {
                    let drive = drive_opts(id, backing);
                    push(&["-drive", &drive]);
                }
                for dev in devices {
                    push(&["-device", dev]);
                }
            }
        }
    }
    for (i, nic) in c.nics.iter().enumerate() {
        let netdev = format!("{},id=net{i}", nic.netdev);
        let dev = format!("virtio-net-pci,netdev=net{i},mac={}", nic.mac);
        push(&["-netdev", &netdev, "-device", &dev]);
    }
    a
}

/// A host I/O error (ENOSPC on a full disk above all) reaches the guest as
/// an I/O error on the device; QEMU's default for writes would pause the
/// VM instead, which the testbed could only report as a hang.
const ERROR_POLICY: &str = "werror=report,rerror=report";

fn drive_opts(id: &str, b: &Backing) -> String {
    match b {
        Backing::File { path, direct } => {
            let cache = if *direct { "none" } else { "writeback" };
            format!(
                "file={},if=none,id={id},format=raw,cache={cache},{ERROR_POLICY}",
                esc(path)
            )
        }
        Backing::Null { size, latency_ns } => {
            format!(
                "driver=null-co,size={size},latency-ns={latency_ns},read-zeroes=on,if=none,id={id},{ERROR_POLICY}"
            )
        }
    }
}

/// Kernel command line: console on the serial port, a panic ends QEMU
/// (panic=-1 reboots, -no-reboot exits), and under TCG the TSC is declared
/// reliable, else the guest falls back to a 4 ms jiffies clock.
pub fn kernel_append(accel: Accel, nonce: &str, probe: bool, extra: &[String]) -> String {
    let mut words: Vec<String> = [
        "console=ttyS0",
        "panic=-1",
        "oops=panic",
        "loglevel=4",
        "rdinit=/init",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if accel == Accel::Tcg {
        words.push("tsc=reliable".into());
        words.push(format!("{}=tcg", testbed_agent::protocol::CMDLINE_ACCEL));
    }
    words.push(format!(
        "{}={nonce}",
        testbed_agent::protocol::CMDLINE_NONCE
    ));
    if probe {
        words.push(format!("{}=probe", testbed_agent::protocol::CMDLINE_MODE));
    }
    words.extend(extra.iter().cloned());
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> VmConfig {
        VmConfig {
            qemu: "qemu-system-x86_64".into(),
            accel: Accel::Tcg,
            vcpus: 2,
            memory_mib: 1024,
            kernel: "/c/k/bzImage".into(),
            initrd: "/c/i/x.cpio".into(),
            append: kernel_append(Accel::Tcg, "n0nce", false, &[]),
            console_log: "/r/console.log".into(),
            agent_socket: "/r/agent.sock".into(),
            qmp_socket: None,
            devices: vec![],
            nics: vec![],
            clock: Default::default(),
        }
    }

    /// Every -drive, of every backend, makes a host I/O error (ENOSPC) a
    /// guest I/O error instead of pausing the VM.
    #[test]
    fn every_drive_reports_host_errors_to_the_guest() {
        let mut c = base();
        let file = Backing::File {
            path: "/r/a.img".into(),
            direct: true,
        };
        let null = Backing::Null {
            size: 1 << 20,
            latency_ns: 0,
        };
        c.devices = vec![
            QemuDevice::Nvme {
                serial: "n".into(),
                namespaces: vec![file.clone(), null.clone()],
                logical_block_size: 512,
                queues: None,
            },
            QemuDevice::VirtioBlk {
                serial: "v".into(),
                backing: file,
                logical_block_size: 512,
                queues: None,
            },
            QemuDevice::VirtioBlk {
                serial: "z".into(),
                backing: null,
                logical_block_size: 512,
                queues: None,
            },
        ];
        let argv = build_argv(&c);
        let drives: Vec<&String> = argv
            .windows(2)
            .filter(|w| w[0] == "-drive")
            .map(|w| &w[1])
            .collect();
        assert_eq!(drives.len(), 4, "{argv:?}");
        for d in drives {
            assert!(d.ends_with(",werror=report,rerror=report"), "{d}");
        }
    }

    #[test]
    fn an_instruction_clock_is_single_threaded_tcg_with_icount() {
        let mut c = base();
        c.vcpus = 1;
        c.clock = Clock::Instructions;
        let joined = build_argv(&c).join(" ");
        assert!(
            joined.contains(
                "-accel tcg,thread=single -cpu Nehalem -icount shift=0,sleep=off,align=off -smp 1"
            ),
            "{joined}"
        );
        assert!(!joined.contains("thread=multi"), "{joined}");
        // The wall clock keeps multi-threaded TCG and no icount.
        c.clock = Clock::Wall;
        let joined = build_argv(&c).join(" ");
        assert!(
            joined.contains("tcg,thread=multi") && !joined.contains("-icount"),
            "{joined}"
        );
    }

    #[test]
    fn golden_tcg_with_nvme_file() {
        let mut c = base();
        c.devices.push(QemuDevice::Nvme {
            serial: "data".into(),
            namespaces: vec![Backing::File {
                path: "/r/data.img".into(),
                direct: true,
            }],
            logical_block_size: 512,
            queues: Some(2),
        });
        assert_eq!(
            build_argv(&c).join(" "),
            "qemu-system-x86_64 -nodefaults -no-reboot -nographic -no-user-config \
             -accel tcg,thread=multi -cpu Nehalem -smp 2 -m 1024M \
             -kernel /c/k/bzImage -initrd /c/i/x.cpio \
             -append console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init tsc=reliable testbed.accel=tcg testbed.nonce=n0nce \
             -serial file:/r/console.log -monitor none \
             -device virtio-serial-pci,id=vser0 \
             -chardev socket,id=agent,path=/r/agent.sock,server=on,wait=off \
             -device virtserialport,bus=vser0.0,chardev=agent,name=org.testbed.agent \
             -device nvme,id=nvme0,serial=data,max_ioqpairs=2 \
             -drive file=/r/data.img,if=none,id=nvme0n1,format=raw,cache=none,werror=report,rerror=report \
             -device nvme-ns,drive=nvme0n1,bus=nvme0,nsid=1,logical_block_size=512,physical_block_size=512"
        );
    }

    #[test]
    fn golden_root_image_is_a_read_only_virtio_disk() {
        let mut c = base();
        c.devices.push(QemuDevice::RootImage {
            path: "/c/images/k,1.ext4".into(),
            serial: "testbed-root".into(),
        });
        let argv = build_argv(&c);
        assert_eq!(
            argv[argv.len() - 4..].join(" "),
            "-drive file=/c/images/k,,1.ext4,if=none,id=root0,format=raw,readonly=on,cache=writeback,werror=report,rerror=report \
             -device virtio-blk-pci,drive=root0,serial=testbed-root"
        );
    }

    #[test]
    fn golden_kvm_null_nvme_two_namespaces_virtio_vfio_and_nic() {
        let mut c = base();
        c.accel = Accel::Kvm;
        c.append = kernel_append(Accel::Kvm, "x", true, &["quiet".into()]);
        c.agent_socket = "/r,1/agent.sock".into();
        c.qmp_socket = Some("/r,1/qmp.sock".into());
        c.devices = vec![
            QemuDevice::Nvme {
                serial: "fast".into(),
                namespaces: vec![
                    Backing::Null {
                        size: 1 << 30,
                        latency_ns: 10_000,
                    },
                    Backing::File {
                        path: "/r/fast.ns2.img".into(),
                        direct: false,
                    },
                ],
                logical_block_size: 4096,
                queues: None,
            },
            QemuDevice::VirtioBlk {
                serial: "cmp".into(),
                backing: Backing::File {
                    path: "/r/cmp.img".into(),
                    direct: true,
                },
                logical_block_size: 512,
                queues: Some(4),
            },
            QemuDevice::Vfio {
                host: "0000:3b:00.0".into(),
            },
        ];
        c.nics.push(Nic {
            mac: "52:54:00:12:34:01".into(),
            netdev: "socket,listen=127.0.0.1:5000".into(),
        });
        let argv = build_argv(&c);
        let joined = argv.join(" ");
        assert!(joined.contains("-accel kvm -cpu host"), "{joined}");
        assert!(
            !joined.contains("tsc=reliable"),
            "KVM guests keep their own clock choice"
        );
        assert!(joined.contains("testbed.nonce=x testbed.mode=probe quiet"));
        assert!(
            joined.contains("path=/r,,1/agent.sock"),
            "commas in paths are escaped: {joined}"
        );
        assert!(
            joined.contains("-monitor none -qmp unix:/r,,1/qmp.sock,server=on,wait=off -device"),
            "{joined}"
        );
        let expected_tail = [
            "-device",
            "nvme,id=nvme0,serial=fast",
            "-drive",
            "driver=null-co,size=1073741824,latency-ns=10000,read-zeroes=on,if=none,id=nvme0n1,werror=report,rerror=report",
            "-device",
            "nvme-ns,drive=nvme0n1,bus=nvme0,nsid=1,logical_block_size=4096,physical_block_size=4096",
            "-drive",
            "file=/r/fast.ns2.img,if=none,id=nvme0n2,format=raw,cache=writeback,werror=report,rerror=report",
            "-device",
            "nvme-ns,drive=nvme0n2,bus=nvme0,nsid=2,logical_block_size=4096,physical_block_size=4096",
            "-drive",
            "file=/r/cmp.img,if=none,id=vblk1,format=raw,cache=none,werror=report,rerror=report",
            "-device",
            "virtio-blk-pci,drive=vblk1,serial=cmp,logical_block_size=512,physical_block_size=512,num-queues=4",
            "-device",
            "vfio-pci,host=0000:3b:00.0",
            "-netdev",
            "socket,listen=127.0.0.1:5000,id=net0",
            "-device",
            "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:01",
        ];
        assert_eq!(&argv[argv.len() - expected_tail.len()..], expected_tail);
    }
}
