//! The CLI's standard output: [`out!`](crate::out) and
//! [`outln!`](crate::outln) print like `print!` and `println!`, but a
//! closed pipe (`testbed show RUN | head -1`) ends the process quietly
//! instead of panicking with "failed printing to stdout: Broken pipe".
//!
//! Rust ignores SIGPIPE, so the write fails with EPIPE where a C program
//! would have been killed by the signal. The process then exits with
//! status 141 (128 + SIGPIPE), what a shell reports for `cat` or `seq`
//! in the same place: no message, and under `set -o pipefail` not a
//! success, since the output was not all delivered (a gate command's
//! verdict must not read as a pass). Any other write error (a full disk
//! behind a redirection) is named on stderr, exit 1.

use std::fmt;
use std::io::{self, Write};

/// The exit status after a closed pipe: 128 + SIGPIPE.
pub const EXIT_BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

/// What a failed write to stdout ends in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The reader went away: exit quietly with [`EXIT_BROKEN_PIPE`].
    Quiet(i32),
    /// Any other error: named on stderr, exit 1.
    Loud(i32),
}

/// How a write error to stdout ends the process.
pub fn outcome(e: &io::Error) -> Outcome {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Outcome::Quiet(EXIT_BROKEN_PIPE)
    } else {
        Outcome::Loud(1)
    }
}

/// Prints to stdout (used by [`out!`](crate::out)); on a closed pipe the
/// process exits quietly, see the module's documentation.
pub fn print(args: fmt::Arguments<'_>) {
    let written = {
        let mut lock = io::stdout().lock();
        lock.write_fmt(args).and_then(|()| lock.flush())
    };
    if let Err(e) = written {
        match outcome(&e) {
            Outcome::Quiet(code) => std::process::exit(code),
            Outcome::Loud(code) => {
                eprintln!("error: writing to stdout: {e}");
                std::process::exit(code)
            }
        }
    }
}

/// `print!` that ends the process quietly on a closed stdout.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::host::stdout::print(::std::format_args!($($arg)*))
    };
}

/// `println!` that ends the process quietly on a closed stdout.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::host::stdout::print(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::host::stdout::print(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_quiet_and_other_errors_are_not() {
        let pipe = io::Error::from_raw_os_error(libc::EPIPE);
        assert_eq!(outcome(&pipe), Outcome::Quiet(141));
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(outcome(&full), Outcome::Loud(1));
    }
}
