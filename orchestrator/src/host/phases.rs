//! Time by phase (kernels, images, runs, figures, rust build), so a long
//! job can say where its time went. Phases nest: a kernel built while a run
//! prepares counts as "kernels", not also as "runs". When `$TESTBED_PHASES`
//! names a file (`./x` sets it), each phase's time is appended there as
//! `name<TAB>seconds`, and `./x` prints the whole invocation's table.

use std::cell::RefCell;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static TOTALS: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

struct Frame {
    started: Instant,
    nested: Duration,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f`, counting its time to `phase` minus the time of phases nested in it.
pub fn time<T>(phase: &str, f: impl FnOnce() -> T) -> T {
    STACK.with(|s| {
        s.borrow_mut().push(Frame {
            started: Instant::now(),
            nested: Duration::ZERO,
        })
    });
    let out = f();
    let frame = STACK.with(|s| s.borrow_mut().pop());
    if let Some(frame) = frame {
        let elapsed = frame.started.elapsed();
        record(phase, elapsed.saturating_sub(frame.nested));
        parent_add(elapsed);
    }
    out
}

/// Counts `d`, measured by the caller (a child build, say), to `phase`.
pub fn add(phase: &str, d: Duration) {
    record(phase, d);
    parent_add(d);
}

fn parent_add(d: Duration) {
    STACK.with(|s| {
        if let Some(parent) = s.borrow_mut().last_mut() {
            parent.nested += d;
        }
    });
}

fn record(phase: &str, d: Duration) {
    if let Ok(mut t) = TOTALS.lock() {
        match t.iter_mut().find(|(n, _)| n == phase) {
            Some((_, total)) => *total += d,
            None => t.push((phase.to_string(), d)),
        }
    }
    if let Some(path) = std::env::var_os("TESTBED_PHASES") {
        // Best effort: the table is a report, never a reason to fail.
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
            let _ = writeln!(f, "{phase}\t{:.1}", d.as_secs_f64());
        }
    }
}

/// The phases seen so far in this process, in first-seen order.
pub fn totals() -> Vec<(String, Duration)> {
    TOTALS.lock().map(|t| t.clone()).unwrap_or_default()
}

/// `kernels 8m 12s · runs 4m 01s · figures 2.5s`.
pub fn render(totals: &[(String, Duration)]) -> String {
    totals
        .iter()
        .map(|(n, d)| format!("{n} {}", minutes(*d)))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_phases_are_not_counted_twice() {
        time("outer-test", || {
            std::thread::sleep(Duration::from_millis(30));
            time("inner-test", || {
                std::thread::sleep(Duration::from_millis(60))
            });
            // As a child build measured by its caller.
            let child = Instant::now();
            std::thread::sleep(Duration::from_millis(40));
            add("added-test", child.elapsed());
        });
        let t = totals();
        let get = |n: &str| t.iter().find(|(x, _)| x == n).unwrap().1;
        assert!(get("inner-test") >= Duration::from_millis(60));
        assert!(get("added-test") >= Duration::from_millis(40));
        // 30 ms of its own; the 60 ms and the 40 ms belong to the others.
        let outer = get("outer-test");
        assert!(
            outer >= Duration::from_millis(30) && outer < Duration::from_millis(60),
            "{outer:?}"
        );
    }

    #[test]
    fn the_summary_reads_in_minutes() {
        let line = render(&[
            ("kernels".into(), Duration::from_secs(492)),
            ("figures".into(), Duration::from_millis(2500)),
        ]);
        assert_eq!(line, "kernels 8m 12s · figures 2.5s");
    }
}
