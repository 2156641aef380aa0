//! CPU time: this process's (getrusage), its named threads' and a process
//! tree's (/proc), and a Flight server's, asked
//! over Flight: the `cpu` action answers with the serving process's user +
//! system CPU seconds so far, so a client on another machine (the pair
//! topology's other VM) can charge a run the server's CPU by asking before
//! and after it.

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use arrow_flight::{Action, FlightClient};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::addr::Addr;
use crate::error::{FlightError, Result};
use crate::settings::TransportSettings;

/// The action's type.
pub const CPU_ACTION: &str = "cpu";

/// The action's one result body (JSON).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuReply {
    pub cpu_s: f64,
}

/// User and system CPU seconds of this whole process so far (every
/// thread: the runtime's workers included).
pub fn process_cpu() -> Option<(f64, f64)> {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((s(u.ru_utime), s(u.ru_stime)))
}

/// [`process_cpu`]'s user and system seconds added up.
pub fn process_cpu_s() -> Option<f64> {
    process_cpu().map(|(user, system)| user + system)
}

/// User and system CPU seconds of this process's waited-for children
/// (getrusage RUSAGE_CHILDREN): a child process counts once reaped.
pub fn children_cpu_s() -> Option<f64> {
    // SAFETY: as in process_cpu.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(s(u.ru_utime) + s(u.ru_stime))
}

/// CPU seconds so far of this process's threads whose name starts with
/// `prefix` (a tokio runtime names its workers and blocking threads by its
/// `thread_name`), so one process can hold a server and its client and
/// still charge each its own. Nanoseconds from `schedstat` where the
/// kernel has it, else clock ticks from `stat`. A thread that exited
/// meanwhile is no longer counted here.
pub fn threads_cpu_s(prefix: &str) -> Option<f64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut total = 0.0;
    for task in tasks.flatten() {
        let dir = task.path();
        let named = std::fs::read_to_string(dir.join("comm"))
            .is_ok_and(|comm| comm.trim_end().starts_with(prefix));
        if !named {
            continue;
        }
        let on_cpu_ns = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok());
        total += match on_cpu_ns {
            Some(ns) => ns as f64 / 1e9,
            // The thread may have just exited: then it adds nothing.
            None => stat_fields(&dir.join("stat")).map_or(0.0, |f| ticks(f.utime + f.stime)),
        };
    }
    Some(total)
}

/// CPU seconds so far of process `pid`, its reaped children and its live
/// children (a PostgreSQL postmaster, its backends and background
/// workers), in clock ticks: 10 ms steps. A child that has exited but is
/// not yet reaped counts in neither: wait for [`live_children`] to drop
/// back before reading.
pub fn tree_cpu_s(pid: u32) -> Option<f64> {
    let own = stat_fields(Path::new(&format!("/proc/{pid}/stat")))?;
    let mut t = own.utime + own.stime + own.cutime + own.cstime;
    for child in live_children(pid) {
        if let Some(f) = stat_fields(Path::new(&format!("/proc/{child}/stat"))) {
            t += f.utime + f.stime;
        }
    }
    Some(ticks(t))
}

/// The pids whose parent is `pid`.
pub fn live_children(pid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            stat_fields(Path::new(&format!("/proc/{p}/stat"))).is_some_and(|f| f.ppid == pid)
        })
        .collect()
}

/// The fields of /proc/…/stat this module reads.
struct StatFields {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

fn stat_fields(path: &Path) -> Option<StatFields> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Field 3 (state) is the first there.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(StatFields {
        ppid: u32::try_from(num(4)?).ok()?,
        utime: num(14)?,
        stime: num(15)?,
        cutime: num(16)?,
        cstime: num(17)?,
    })
}

fn ticks(t: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    t as f64 / if per_s > 0 { per_s as f64 } else { 100.0 }
}

type ActionStream =
    Pin<Box<dyn Stream<Item = std::result::Result<arrow_flight::Result, Status>> + Send + 'static>>;

/// The server side: this process's CPU as the action's result, or
/// Unimplemented for any other action.
pub fn answer(action: &Action) -> std::result::Result<ActionStream, Status> {
    if action.r#type != CPU_ACTION {
        return Err(Status::unimplemented(format!(
            "no action {:?} (only {CPU_ACTION:?})",
            action.r#type
        )));
    }
    let cpu_s = process_cpu_s().ok_or_else(|| Status::internal("getrusage failed"))?;
    let body =
        serde_json::to_vec(&CpuReply { cpu_s }).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Box::pin(futures::stream::once(async {
        Ok(arrow_flight::Result { body: body.into() })
    })))
}

/// The client side: the CPU seconds of the server at `addr` so far.
pub async fn ask(addr: &Addr, tls_ca: Option<&Path>, timeout: Duration) -> Result<f64> {
    let tls = tls_ca.map(crate::tls::client_config).transpose()?;
    let channel = crate::transport::connect(
        addr,
        tls.as_ref(),
        &TransportSettings::library_defaults(),
        timeout,
    )
    .await?;
    let mut client = FlightClient::new(channel);
    let err = |e: String| FlightError::Other(format!("the CPU time of the server at {addr}: {e}"));
    let mut replies = client
        .do_action(Action::new(CPU_ACTION, ""))
        .await
        .map_err(|e| err(e.to_string()))?;
    let body = replies
        .next()
        .await
        .ok_or_else(|| err("no reply".into()))?
        .map_err(|e| err(e.to_string()))?;
    let reply: CpuReply = serde_json::from_slice(&body).map_err(|e| err(e.to_string()))?;
    Ok(reply.cpu_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < d {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn named_threads_are_charged_their_own_cpu() {
        let before = threads_cpu_s("cpu-test-busy").unwrap();
        let idle_before = threads_cpu_s("cpu-test-idle").unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let idle = std::thread::Builder::new()
            .name("cpu-test-idle".into())
            .spawn(move || wait.recv())
            .unwrap();
        let busy = std::thread::Builder::new()
            .name("cpu-test-busy".into())
            .spawn(|| {
                spin(Duration::from_millis(300));
                // Still alive when read.
                threads_cpu_s("cpu-test-busy").unwrap()
            })
            .unwrap();
        let busy_cpu = busy.join().unwrap() - before;
        let idle_cpu = threads_cpu_s("cpu-test-idle").unwrap() - idle_before;
        go.send(()).unwrap();
        idle.join().unwrap().unwrap();
        assert!(busy_cpu > 0.2, "{busy_cpu}");
        assert!(idle_cpu < 0.05, "{idle_cpu}");
        assert_eq!(threads_cpu_s("no-such-thread-name").unwrap(), 0.0);
    }

    /// Kills a test's shell and its children however the test ends.
    struct Reap(std::process::Child);

    impl Drop for Reap {
        fn drop(&mut self) {
            for child in live_children(self.0.id()) {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(child as i32, libc::SIGKILL) };
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_process_tree_counts_its_live_and_reaped_children() {
        // sh runs one busy child to the end (reaped: cutime), then keeps
        // one busy child running while we read.
        let sh = Reap(
            std::process::Command::new("sh")
                .args([
                    "-c",
                    "timeout 0.3 sh -c 'while :; do :; done'; \
                     sh -c 'while :; do :; done' & sleep 0.4; wait",
                ])
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(650));
        let pid = sh.0.id();
        let children = live_children(pid);
        let cpu = tree_cpu_s(pid).unwrap();
        drop(sh);
        assert!(!children.is_empty(), "the running child is listed");
        // ~0.3 s reaped + ~0.3 s of the running one, in 10 ms ticks.
        assert!(cpu > 0.4, "{cpu}");
        assert!(tree_cpu_s(u32::MAX).is_none());
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stat");
        std::fs::write(
            &p,
            "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 10 5 20 0 1 0 1 1 1\n",
        )
        .unwrap();
        let f = stat_fields(&p).unwrap();
        assert_eq!(
            (f.ppid, f.utime, f.stime, f.cutime, f.cstime),
            (7, 250, 50, 10, 5)
        );
    }
}
