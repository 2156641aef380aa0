//! CPU utilisation over time (asam-cpu): /proc/stat read at a fixed rate
//! on a thread, each interval turned into busy % per CPU and overall.
//! Busy is everything but idle and iowait, as `top` counts it; guest and
//! steal time are already inside user/system/steal of the guest's own view.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Jiffies of one CPU line: (busy, total).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ticks {
    pub busy: u64,
    pub total: u64,
}

/// One interval's utilisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds since the sampler's origin, at the interval's end.
    pub second: f64,
    /// "all" or the CPU number.
    pub cpu: String,
    pub utilisation: f64,
}

/// Parses the `cpu`/`cpuN` lines of /proc/stat: ("all" | "N", ticks).
pub fn parse_stat(text: &str) -> Vec<(String, Ticks)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let name = f.next()?.strip_prefix("cpu")?;
            // user nice system idle iowait irq softirq steal (guest times
            // are already counted in user and nice).
            let v: Vec<u64> = f.take(8).map_while(|x| x.parse().ok()).collect();
            if v.len() < 4 {
                return None;
            }
            let idle = v[3] + v.get(4).copied().unwrap_or(0);
            let total: u64 = v.iter().sum();
            let cpu = if name.is_empty() { "all" } else { name };
            Some((
                cpu.to_string(),
                Ticks {
                    busy: total - idle,
                    total,
                },
            ))
        })
        .collect()
}

/// Busy % per CPU between two readings; CPUs with no ticks in between
/// (the interval was shorter than a jiffy) are left out.
pub fn utilisation(before: &[(String, Ticks)], after: &[(String, Ticks)]) -> Vec<(String, f64)> {
    after
        .iter()
        .filter_map(|(cpu, a)| {
            let (_, b) = before.iter().find(|(c, _)| c == cpu)?;
            let total = a.total.checked_sub(b.total)?;
            let busy = a.busy.checked_sub(b.busy)?;
            (total > 0).then(|| (cpu.clone(), 100.0 * busy as f64 / total as f64))
        })
        .collect()
}

/// A running sampler; [`Sampler::stop`] returns what it saw.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Samples `path` (normally /proc/stat) every `interval`, seconds
    /// counted from `origin`.
    pub fn start(path: &str, interval: Duration, origin: Instant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = path.to_string();
        let handle =
            std::thread::spawn(move || {
                let read = || std::fs::read_to_string(&path).map(|t| parse_stat(&t));
                let mut out = Vec::new();
                let Ok(mut before) = read() else {
                    return out;
                };
                let mut next = Instant::now() + interval;
                while !flag.load(Ordering::Relaxed) {
                    // Sleep to a fixed schedule so the intervals do not drift.
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep((next - now).min(Duration::from_millis(50)));
                        continue;
                    }
                    next += interval;
                    let Ok(after) = read() else { break };
                    let second = origin.elapsed().as_secs_f64();
                    out.extend(utilisation(&before, &after).into_iter().map(
                        |(cpu, utilisation)| Sample {
                            second,
                            cpu,
                            utilisation,
                        },
                    ));
                    before = after;
                }
                out
            });
        Sampler { stop, handle }
    }

    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_A: &str = "cpu  100 0 100 700 100 0 0 0 0 0\n\
                          cpu0 50 0 50 350 50 0 0 0 0 0\n\
                          cpu1 50 0 50 350 50 0 0 0 0 0\n\
                          intr 1 2 3\nctxt 5\n";
    const STAT_B: &str = "cpu  250 0 150 800 100 0 0 0 0 0\n\
                          cpu0 150 0 100 350 50 0 0 0 0 0\n\
                          cpu1 100 0 50 450 50 0 0 0 0 0\n";

    #[test]
    fn busy_excludes_idle_and_iowait() {
        let a = parse_stat(STAT_A);
        assert_eq!(a.len(), 3);
        assert_eq!(
            a[0],
            (
                "all".to_string(),
                Ticks {
                    busy: 200,
                    total: 1000
                }
            )
        );
        let u = utilisation(&a, &parse_stat(STAT_B));
        // all: busy +200 of +300; cpu0: +150 of +150; cpu1: +50 of +150.
        assert_eq!(u[0].0, "all");
        assert!((u[0].1 - 200.0 / 3.0).abs() < 1e-9, "{u:?}");
        assert_eq!(u[1], ("0".to_string(), 100.0));
        assert!((u[2].1 - 100.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_busy_thread_shows_up_in_the_samples() {
        let origin = Instant::now();
        let s = Sampler::start("/proc/stat", Duration::from_millis(100), origin);
        let spin_until = Instant::now() + Duration::from_millis(600);
        let mut x = 0u64;
        while Instant::now() < spin_until {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let samples = s.stop();
        assert!(x > 0);
        let all: Vec<&Sample> = samples.iter().filter(|s| s.cpu == "all").collect();
        assert!(all.len() >= 3, "{samples:?}");
        // One of the machine's CPUs was kept busy: overall utilisation is
        // at least 1/ncpu of it in most intervals (allowing for jitter).
        let n = samples.iter().filter(|s| s.cpu != "all").count() / all.len().max(1);
        let floor = 0.5 * 100.0 / n.max(1) as f64;
        let busy = all.iter().filter(|s| s.utilisation >= floor).count();
        assert!(busy * 2 >= all.len(), "{all:?}");
        assert!(all.windows(2).all(|w| w[0].second < w[1].second));
    }
}
