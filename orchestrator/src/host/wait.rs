//! Waiting with a deadline: the one loop behind every "wait for a process,
//! a socket or a message, at most this long, and stop on Ctrl-C".

use std::time::{Duration, Instant};

/// How a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// What the check returned.
    Done(T),
    /// The deadline passed first.
    TimedOut,
    /// Ctrl-C or SIGTERM came first (only when asked to watch for them).
    Interrupted,
}

/// When to stop waiting.
#[derive(Debug, Clone, Copy)]
pub struct Until {
    /// None: no deadline.
    pub deadline: Option<Instant>,
    /// Whether Ctrl-C and SIGTERM end the wait.
    pub interruptible: bool,
}

impl Until {
    /// At most `timeout` from now.
    pub fn after(timeout: Duration) -> Until {
        Until {
            deadline: Some(Instant::now() + timeout),
            interruptible: false,
        }
    }

    /// Until Ctrl-C or SIGTERM, however long.
    pub fn interrupted() -> Until {
        Until {
            deadline: None,
            interruptible: true,
        }
    }
}

/// Calls `check` until it returns `Some`, sleeping `every` between calls,
/// until the deadline passes or (if asked) the process is interrupted.
/// `check` runs at least once, and once more after the last sleep, so a
/// result that arrived while sleeping is never lost to the deadline.
pub fn poll<T>(until: Until, every: Duration, mut check: impl FnMut() -> Option<T>) -> Waited<T> {
    loop {
        if until.interruptible && crate::host::interrupt::interrupted() {
            return Waited::Interrupted;
        }
        let late = until.deadline.is_some_and(|d| Instant::now() >= d);
        if let Some(v) = check() {
            return Waited::Done(v);
        }
        if late {
            return Waited::TimedOut;
        }
        let nap = match until.deadline {
            Some(d) => every.min(d.saturating_duration_since(Instant::now())),
            None => every,
        };
        std::thread::sleep(nap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_check_found() {
        let mut calls = 0;
        let got = poll(Until::after(Duration::from_secs(5)), Duration::ZERO, || {
            calls += 1;
            (calls == 3).then_some(calls)
        });
        assert_eq!(got, Waited::Done(3));
    }

    #[test]
    fn times_out_after_checking_once_more_at_the_deadline() {
        let started = Instant::now();
        let mut calls = 0;
        let got: Waited<()> = poll(
            Until::after(Duration::from_millis(50)),
            Duration::from_millis(20),
            || {
                calls += 1;
                None
            },
        );
        assert_eq!(got, Waited::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(calls >= 3, "{calls}");
    }

    #[test]
    fn a_zero_timeout_still_checks_once() {
        let got = poll(Until::after(Duration::ZERO), Duration::from_secs(1), || {
            Some(7)
        });
        assert_eq!(got, Waited::Done(7));
    }
}
