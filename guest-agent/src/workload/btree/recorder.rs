//! Measurements of one engine on one thread. Summary statistics use every
//! lookup; raw samples keep lookup `i` when `i % sample_every == 0`, together
//! with that lookup's hops, so memory stays bounded for long runs.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::workload::WorkloadError;

pub struct Recorder {
    sample_every: u64,
    /// Every lookup's latency, ns (for the histogram summary).
    pub lookups_ns: Vec<f64>,
    /// Latency per hop index, all hops.
    pub hop_hist: Vec<Histogram<u64>>,
    /// Latency per hop index, only hops of kept lookups.
    pub kept_hops_ns: Vec<Vec<f64>>,
    pub verified: u64,
}

impl Recorder {
    pub fn new(hops: usize, sample_every: u64) -> Result<Self, WorkloadError> {
        let hist =
            || Histogram::new(3).map_err(|e| WorkloadError::Other(format!("histogram: {e}")));
        Ok(Recorder {
            sample_every: sample_every.max(1),
            lookups_ns: Vec::new(),
            hop_hist: (0..hops).map(|_| hist()).collect::<Result<_, _>>()?,
            kept_hops_ns: vec![Vec::new(); hops],
            verified: 0,
        })
    }

    /// Records one verified lookup and the latency of each of its I/Os.
    pub fn record(&mut self, lookup_ns: u64, hops_ns: &[u64]) {
        let keep = (self.lookups_ns.len() as u64).is_multiple_of(self.sample_every);
        self.lookups_ns.push(lookup_ns as f64);
        self.verified += 1;
        for (h, &ns) in hops_ns.iter().enumerate().take(self.hop_hist.len()) {
            // Auto-resizing histogram: recording cannot fail on range.
            let _ = self.hop_hist[h].record(ns.max(1));
            if keep {
                self.kept_hops_ns[h].push(ns as f64);
            }
        }
    }

    /// The lookup latencies kept as raw samples.
    pub fn kept_lookups_ns(&self) -> Vec<f64> {
        self.lookups_ns
            .iter()
            .step_by(self.sample_every as usize)
            .copied()
            .collect()
    }
}

/// Nanoseconds since `t`, the unit every engine records lookups and hops in.
pub fn ns_since(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_nth_lookup_with_its_hops() {
        let mut r = Recorder::new(2, 3).unwrap();
        for i in 0..10u64 {
            r.record(1000 + i, &[i, 100 + i]);
        }
        assert_eq!(r.lookups_ns.len(), 10);
        assert_eq!(r.kept_lookups_ns(), vec![1000.0, 1003.0, 1006.0, 1009.0]);
        assert_eq!(r.kept_hops_ns[1], vec![100.0, 103.0, 106.0, 109.0]);
        assert_eq!(r.hop_hist[0].len(), 10);
        assert_eq!(r.verified, 10);
    }
}
