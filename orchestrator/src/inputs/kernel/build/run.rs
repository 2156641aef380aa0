//! Run a build command, log all output, stream progress, and keep the last
//! lines for the error message.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::inputs::kernel::KernelError;
use crate::machine::qemu::process::GroupProcess;

const TAIL_LINES: usize = 40;

/// Run `cmd` in `dir`, appending its output to `log`; `on_line` sees each
/// stdout line. Fails with the last lines of output.
pub fn run(
    cmd: &mut Command,
    dir: &Path,
    log: &Path,
    on_line: &mut dyn FnMut(&str),
) -> Result<(), KernelError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| KernelError::io(log, e))?;
    let log_file = Mutex::new(log_file);
    let tail = Mutex::new(VecDeque::with_capacity(TAIL_LINES));
    let interrupted = || KernelError::Interrupted {
        command: shown.clone(),
    };
    if crate::host::interrupt::interrupted() {
        return Err(interrupted());
    }
    // A group of its own that dies with us and that the signal handler's
    // kill_all reaches: a SIGTERM sent to `testbed` alone stops make too.
    let mut group = GroupProcess::spawn_command(
        cmd.current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|e| tool_error(cmd, e))?;
    // A signal between the check above and the spawn found no group to kill.
    if crate::host::interrupt::interrupted() {
        group.kill();
        return Err(interrupted());
    }
    let child = group.child_mut();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let keep = |line: &str| {
        if let Ok(mut f) = log_file.lock() {
            // The log is a convenience; a failed write must not fail the build.
            let _ = writeln!(f, "{line}");
        }
        if let Ok(mut t) = tail.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line.to_string());
        }
    };
    std::thread::scope(|s| {
        if let Some(err) = stderr {
            s.spawn(|| for_each_line(err, &mut |l| keep(l)));
        }
        if let Some(out) = stdout {
            for_each_line(out, &mut |l| {
                keep(l);
                on_line(l);
            });
        }
    });
    let Some(status) = group.wait_or_interrupt() else {
        return Err(interrupted());
    };
    if status.success() {
        return Ok(());
    }
    let tail = tail
        .into_inner()
        .map(|t| t.into_iter().collect::<Vec<_>>().join("\n"))
        .unwrap_or_default();
    Err(KernelError::CommandFailed {
        command: shown,
        dir: dir.to_path_buf(),
        status: status.to_string(),
        tail: format!("{tail}\n(full log: {})", log.display()),
    })
}

/// Run a command and return its stdout (for small queries like `gcc --version`).
pub fn capture(cmd: &mut Command) -> Result<String, KernelError> {
    let out = cmd.output().map_err(|e| tool_error(cmd, e))?;
    if !out.status.success() {
        return Err(KernelError::CommandFailed {
            command: format!("{cmd:?}").replace('"', ""),
            dir: std::env::current_dir().unwrap_or_default(),
            status: out.status.to_string(),
            tail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tool_error(cmd: &Command, e: std::io::Error) -> KernelError {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    let hint = match tool.as_str() {
        "make" | "gcc" => "apt-get install build-essential flex bison bc libelf-dev libssl-dev",
        "pahole" => "apt-get install dwarves",
        "bpftool" => "apt-get install bpftool",
        "objcopy" => "apt-get install binutils",
        "tar" | "xz" => "apt-get install tar xz-utils",
        _ => "apt-get install the package providing it",
    };
    KernelError::ToolMissing {
        tool,
        hint: hint.into(),
        source: e,
    }
}

fn for_each_line(stream: impl Read, f: &mut dyn FnMut(&str)) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    // Lines may not be UTF-8 (compiler quotes source); read bytes.
    while let Ok(n) = reader.read_until(b'\n', &mut buf) {
        if n == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        f(line.trim_end_matches(['\n', '\r']));
        buf.clear();
    }
}

/// Turns kbuild's `  CC      path` lines into throttled progress messages.
pub struct KbuildProgress<'a> {
    progress: &'a dyn Fn(&str),
    steps: u64,
    last: Option<Instant>,
}

impl<'a> KbuildProgress<'a> {
    pub fn new(progress: &'a dyn Fn(&str)) -> Self {
        KbuildProgress {
            progress,
            steps: 0,
            last: None,
        }
    }

    pub fn line(&mut self, line: &str) {
        let is_step = line.starts_with("  ")
            && line[2..].split_whitespace().next().is_some_and(|w| {
                w.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            });
        if is_step {
            self.steps += 1;
        }
        let word = line.split_whitespace().next().unwrap_or("");
        // Steps are thousands: report at most one a second, except the few
        // slow milestones (linking, BTF); other lines always.
        let routine = is_step && !matches!(word, "LD" | "BTF" | "BUILD" | "OBJCOPY");
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !routine || due {
            self.last = Some(Instant::now());
            (self.progress)(&format!("[{:>5}] {}", self.steps, line.trim()));
        }
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reports_tail_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("build.log");
        let mut seen = Vec::new();
        let err = run(
            Command::new("sh").args(["-c", "echo out1; echo err1 >&2; exit 3"]),
            dir.path(),
            &log,
            &mut |l| seen.push(l.to_string()),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(seen, vec!["out1"]);
        assert!(
            err.contains("err1") && err.contains("out1") && err.contains("build.log"),
            "{err}"
        );
        assert!(err.contains("exit status: 3"), "{err}");
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(logged.contains("out1") && logged.contains("err1"));
    }

    #[test]
    fn missing_tool_names_package() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(
            &mut Command::new("bpftool-not-here"),
            dir.path(),
            &dir.path().join("l"),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("bpftool-not-here"), "{err}");
    }

    #[test]
    fn kbuild_lines_are_counted_and_throttled() {
        let seen = std::cell::RefCell::new(Vec::new());
        let cb = |m: &str| seen.borrow_mut().push(m.to_string());
        let mut p = KbuildProgress::new(&cb);
        for i in 0..100 {
            p.line(&format!("  CC      kernel/f{i}.o"));
        }
        p.line("  LD      vmlinux");
        p.line("Kernel: arch/x86/boot/bzImage is ready  (#1)");
        assert_eq!(p.steps(), 101);
        let seen = seen.into_inner();
        assert!(seen.len() < 10, "{seen:?}");
        assert!(seen.iter().any(|m| m.contains("LD      vmlinux")));
        assert!(seen.last().unwrap().contains("bzImage is ready"));
    }
}
