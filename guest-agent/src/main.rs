//! testbed-agent: PID 1 in the guest's initramfs, or with `--stdio` a plain
//! process on the host speaking the same protocol on stdin/stdout.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use testbed_agent::agent::{devices, init, rootfs, serve};
use testbed_agent::protocol::{
    CMDLINE_MODE, CMDLINE_NET, CMDLINE_NONCE, Hello, PORT_NAME, PROTOCOL_VERSION,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--stdio") {
        std::process::exit(match run_stdio() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("testbed-agent: {e}");
                1
            }
        });
    }
    if args.iter().any(|a| a == "--version") {
        println!("testbed-agent {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    if std::process::id() != 1 {
        eprintln!("testbed-agent: run as PID 1 in a VM, or with --stdio on a host");
        std::process::exit(2);
    }
    // PID 1 adopts every orphan (a job's daemon, a killed tool's children)
    // and must wait for it, or it stays a zombie until the VM ends. Waiting
    // for any child from the agent would take the statuses its own waits
    // expect, so the agent runs as PID 1's child, and PID 1 only reaps
    // (tini's model).
    match init::fork_agent() {
        Ok(Some(agent)) => init::reap_until(agent),
        Ok(None) => {}
        Err(e) => {
            eprintln!("testbed-agent: cannot fork the agent off PID 1 ({e}): orphans stay zombies")
        }
    }
    if let Err(e) = run_pid1() {
        eprintln!("testbed-agent: fatal: {e}");
    }
    init::power_off();
}

fn run_stdio() -> Result<(), String> {
    let nonce = std::env::var("TESTBED_NONCE").unwrap_or_default();
    let hello = hello(nonce, String::new(), Vec::new(), &BTreeMap::new());
    let writer: serve::SharedWriter = Arc::new(Mutex::new(Box::new(std::io::stdout())));
    let reader = BufReader::new(std::io::stdin());
    serve::serve(reader, writer, hello, &BTreeMap::new()).map_err(|e| e.to_string())
}

fn run_pid1() -> Result<(), String> {
    for problem in init::mount_pseudo_filesystems() {
        eprintln!("testbed-agent: {problem}");
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let nonce = init::cmdline_value(&cmdline, CMDLINE_NONCE).unwrap_or_default();
    if let Some(accel) = init::cmdline_value(&cmdline, testbed_agent::protocol::CMDLINE_ACCEL) {
        // SAFETY: PID 1 has started no thread yet; nothing reads the
        // environment concurrently.
        unsafe { std::env::set_var("TESTBED_ACCEL", accel) };
    }
    let modules = init::load_modules(std::path::Path::new(init::MODULE_LIST))?;
    // The root image and the devices to format need the modules just
    // loaded (virtio_blk, ext4, overlay); everything after, the control
    // port and the points included, runs in the new root.
    for line in rootfs::prepare()? {
        eprintln!("testbed-agent: {line}");
    }
    let net_addr = init::cmdline_value(&cmdline, CMDLINE_NET);
    let net = match init::setup_network(net_addr.as_deref()) {
        Ok(n) => n,
        // Without a network only network workloads fail; say so and go on.
        Err(e) if net_addr.is_none() => {
            eprintln!("testbed-agent: loopback: {e}");
            None
        }
        Err(e) => return Err(format!("network: {e}")),
    };
    let port = init::find_port(PORT_NAME, Duration::from_secs(20))?;
    let found = devices::discover(std::path::Path::new("/sys"));
    let mut hello = hello(nonce, cmdline.trim().to_string(), modules, &found);
    hello.net = net;
    eprintln!("testbed-agent: ready on {port}");
    // The open blocks nothing; the first write blocks until the host connects.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&port)
        .map_err(|e| format!("open {port}: {e}"))?;
    let reader = BufReader::new(file.try_clone().map_err(|e| e.to_string())?);
    let writer: serve::SharedWriter = Arc::new(Mutex::new(Box::new(file)));
    if init::cmdline_value(&cmdline, CMDLINE_MODE).as_deref() == Some("probe") {
        // An accelerator probe only needs to see the agent come up.
        testbed_agent::protocol::send(
            &mut *writer.lock().map_err(|_| "poisoned")?,
            &testbed_agent::protocol::GuestMsg::Hello(hello),
        )
        .map_err(|e| e.to_string())?;
        return Ok(());
    }
    serve::serve(reader, writer, hello, &found).map_err(|e| e.to_string())
}

fn hello(
    nonce: String,
    kernel_cmdline: String,
    modules_loaded: Vec<String>,
    found: &BTreeMap<String, devices::FoundDevice>,
) -> Hello {
    let uname = nix::sys::utsname::uname()
        .map(|u| {
            format!(
                "{} {} {} {}",
                u.sysname().to_string_lossy(),
                u.release().to_string_lossy(),
                u.version().to_string_lossy(),
                u.machine().to_string_lossy()
            )
        })
        .unwrap_or_default();
    let uptime_ms = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_total_kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Hello {
        protocol: PROTOCOL_VERSION,
        nonce,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        uname,
        kernel_cmdline,
        uptime_ms,
        ncpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        mem_total_kib,
        modules_loaded,
        devices: found
            .iter()
            .map(|(k, v)| (k.clone(), v.path.clone()))
            .collect(),
        net: None,
    }
}
