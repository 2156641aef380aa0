//! Facts about a process from `/proc`: when it started (to tell it from a
//! later process that reuses its pid) and its command name.

/// A process's start time in clock ticks since boot (field 22 of
/// /proc/PID/stat), `None` if it does not exist.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `ticks` still runs (a zombie
/// counts as gone: it runs nothing).
pub fn alive(pid: u32, ticks: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    state != Some("Z") && fields.nth(18).and_then(|t| t.parse().ok()) == Some(ticks)
}

/// The command name of `pid` (`/proc/PID/comm`), "?" if it is gone.
pub fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let ticks = start_ticks(me).unwrap();
        assert!(alive(me, ticks));
        assert!(
            !alive(me, ticks + 1),
            "another start time is another process"
        );
        assert!(!alive(u32::MAX - 1, ticks));
        assert!(!command_name(me).is_empty());
    }
}
