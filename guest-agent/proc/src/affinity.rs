//! Pinning a client and a server to separate host CPUs. A child process
//! starts with the CPU mask of the thread that spawned it, and every thread
//! it creates inherits that, so [`with_thread_pinned`] pins whatever is
//! spawned inside it (a server, PostgreSQL, a Python client) without
//! touching how it is spawned; [`pin_this_thread`] pins a runtime's worker
//! as it starts.

/// Why a CPU list cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    #[error("CPU list {0:?}: {1}")]
    Parse(String, String),
    #[error("CPU {cpu} is not one this process may run on (allowed: {allowed})")]
    NotAllowed { cpu: usize, allowed: String },
    #[error("{0}: {1}")]
    Sys(&'static str, std::io::Error),
}

/// `0,2-3` → [0, 2, 3], sorted, without repeats.
pub fn parse_list(s: &str) -> Result<Vec<usize>, AffinityError> {
    let bad = |why: &str| AffinityError::Parse(s.to_string(), why.to_string());
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| bad("not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(bad("a range runs low to high"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(bad("CPU number too large"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `[0, 2, 3]` → `0,2,3`.
pub fn format_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs the calling thread may run on.
pub fn this_thread_cpus() -> Result<Vec<usize>, AffinityError> {
    // SAFETY: a zeroed cpu_set_t is an empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Err(AffinityError::Sys(
            "sched_getaffinity",
            std::io::Error::last_os_error(),
        ));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Checks that the calling thread may run on every CPU of `cpus`, so that a
/// spec naming a CPU the machine or its cgroup lacks is an error, not a
/// silent fallback to the CPUs that remain. Check before pinning anything.
pub fn check_allowed(cpus: &[usize]) -> Result<(), AffinityError> {
    let allowed = this_thread_cpus()?;
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(AffinityError::NotAllowed {
            cpu,
            allowed: format_list(&allowed),
        }),
        None => Ok(()),
    }
}

/// Restricts the calling thread to `cpus` ([`check_allowed`] first).
pub fn pin_this_thread(cpus: &[usize]) -> Result<(), AffinityError> {
    // SAFETY: as above; CPU_SET is given numbers below CPU_SETSIZE only.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_setaffinity(0, size, &set) } != 0 {
        return Err(AffinityError::Sys(
            "sched_setaffinity",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Runs `f` with the calling thread pinned to `cpus` (nothing changes for
/// `None`), then gives the thread its mask back. What `f` spawns keeps
/// the pinned mask.
pub fn with_thread_pinned<T>(
    cpus: Option<&[usize]>,
    f: impl FnOnce() -> T,
) -> Result<T, AffinityError> {
    let Some(cpus) = cpus else {
        return Ok(f());
    };
    let before = this_thread_cpus()?;
    pin_this_thread(cpus)?;
    let out = f();
    pin_this_thread(&before)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_bad_ones_say_why() {
        assert_eq!(parse_list("0").unwrap(), vec![0]);
        assert_eq!(parse_list("3, 0-1,1").unwrap(), vec![0, 1, 3]);
        assert_eq!(format_list(&[0, 2, 3]), "0,2,3");
        for bad in ["", "a", "2-1", "1-", "99999"] {
            let e = parse_list(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn a_child_spawned_while_pinned_keeps_the_mask_and_the_thread_gets_its_own_back() {
        let mine = this_thread_cpus().unwrap();
        let cpu = *mine.last().unwrap();
        let out = with_thread_pinned(Some(&[cpu]), || {
            assert_eq!(this_thread_cpus().unwrap(), vec![cpu]);
            std::process::Command::new("sh")
                .args(["-c", "grep Cpus_allowed_list /proc/self/status"])
                .output()
                .unwrap()
        })
        .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
        assert_eq!(this_thread_cpus().unwrap(), mine);
    }

    #[test]
    fn a_cpu_the_process_may_not_use_is_refused_by_number() {
        let e = check_allowed(&[libc::CPU_SETSIZE as usize - 1]).unwrap_err();
        assert!(e.to_string().contains("CPU 1023"), "{e}");
        assert!(check_allowed(&this_thread_cpus().unwrap()).is_ok());
        // The kernel refuses a mask with no CPU the thread may use.
        assert!(with_thread_pinned(Some(&[1023]), || ()).is_err());
    }
}
