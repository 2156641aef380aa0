//! The tokio runtimes the commands run on (named threads, optionally
//! pinned), and a server's ready line: below every command, so servers,
//! clients and the CLI share them without importing each other.

use std::io::Write;

use anyhow::Context;

/// A multi-threaded runtime (`threads` workers, default one per CPU).
pub fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    named_runtime(threads, "tokio-runtime-worker")
}

/// [`runtime`] whose threads are named `name` (at most 15 bytes, what
/// Linux keeps), so their CPU can be told apart (`cpu::threads_cpu_s`).
pub fn named_runtime(
    threads: Option<usize>,
    name: &str,
) -> anyhow::Result<tokio::runtime::Runtime> {
    named_runtime_on(threads, name, None)
}

/// [`named_runtime`] whose every thread starts pinned to `cpus` (checked
/// beforehand: crate::pins).
pub fn named_runtime_on(
    threads: Option<usize>,
    name: &str,
    cpus: Option<Vec<usize>>,
) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all().thread_name(name);
    if let Some(n) = threads {
        b.worker_threads(n.max(1));
    }
    if let Some(cpus) = cpus {
        // The lists were checked against this process's CPUs, so this
        // cannot fail but by a mask changed under the process.
        b.on_thread_start(move || {
            let _ = testbed_proc::affinity::pin_this_thread(&cpus);
        });
    }
    b.build().context("starting the tokio runtime")
}

/// Prints a server's ready line (a parent reads where it listens, port 0
/// resolved) and waits for SIGINT or SIGTERM.
pub async fn announce_and_wait(ready: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    writeln!(out, "{}", serde_json::to_string(ready)?)?;
    out.flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
