//! Base qualities and sequencing errors of one read.
//!
//! Qualities fall along the read (Illumina's phasing): the mean is ~37 at
//! the start and ~28 at the end, two lower on read 2 and in the first
//! three cycles, with a per-read offset, per-base noise and, in 5 % of
//! reads, a tail of Q2 from a random late cycle on. Each base is then
//! wrong with the probability its quality reports, times three
//! systematic factors a real run has and BQSR learns:
//! - context: ×3 after `GG` (the GGC motif of Illumina errors);
//! - cycle: ×1.5 in the last quarter of the read;
//! - lane: ×[`LANE_ERROR`] by lane (lanes differ in real runs).
//!
//! A wrong base is drawn with a bias: A↔C and G↔T swaps are the most
//! likely (these dye pairs share a laser in Illumina's four-colour
//! chemistry), then transitions, then the rest.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::rng::normal;

/// Error-rate factor of lanes 1, 2, 3, 4 (then repeating).
pub const LANE_ERROR: [f64; 4] = [1.0, 1.3, 0.8, 1.5];
/// Factor after two G's.
pub const GG_ERROR: f64 = 3.0;
/// Factor in the last quarter of the read.
pub const LATE_CYCLE_ERROR: f64 = 1.5;
/// Chance a base is called N (quality 2).
const N_RATE: f64 = 0.0005;

/// 10^(-q/10) for q = 0..=41: the error probability a quality reports.
static PHRED: std::sync::LazyLock<[f64; 42]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|q| 10f64.powf(-(q as f64) / 10.0)));

/// A cheap draw with mean 0 and variance 1, close to normal (the sum of
/// four uniforms): per-base noise is drawn hundreds of millions of times
/// for the larger sizes, where ln and cos would dominate.
fn near_normal(rng: &mut ChaCha8Rng) -> f64 {
    let s: f64 = (0..4).map(|_| rng.random::<f64>()).sum();
    (s - 2.0) * 3f64.sqrt()
}

/// Mean reported quality at `cycle` (0-based) of a read of `len` bases.
pub fn mean_quality(cycle: usize, len: usize, mate: u8) -> f64 {
    let x = cycle as f64 / len.max(1) as f64;
    let mut q = 37.5 - 9.0 * x * x;
    if mate == 2 {
        q -= 2.0;
    }
    if cycle < 3 {
        q -= 2.0;
    }
    q
}

/// Sequences `truth` (the fragment's bases in read order) as read `mate`
/// (1 or 2) on `lane`: the called bases and their Phred qualities.
pub fn sequence(truth: &[u8], mate: u8, lane: u32, rng: &mut ChaCha8Rng) -> (Vec<u8>, Vec<u8>) {
    let len = truth.len();
    let offset = 1.5 * normal(rng);
    let tail = if rng.random_bool(0.05) {
        rng.random_range(len * 6 / 10..len.max(1))
    } else {
        len
    };
    let lane_factor = LANE_ERROR[(lane.max(1) as usize - 1) % LANE_ERROR.len()];
    let mut bases = Vec::with_capacity(len);
    let mut quals = Vec::with_capacity(len);
    for (c, &b) in truth.iter().enumerate() {
        let q = if c >= tail {
            2.0
        } else {
            (mean_quality(c, len, mate) + offset + 2.5 * near_normal(rng))
                .round()
                .clamp(2.0, 41.0)
        };
        if rng.random_bool(N_RATE) {
            bases.push(b'N');
            quals.push(2);
            continue;
        }
        let mut p = PHRED[q as usize] * lane_factor;
        if c >= 2 && truth[c - 2] == b'G' && truth[c - 1] == b'G' {
            p *= GG_ERROR;
        }
        if c >= len * 3 / 4 {
            p *= LATE_CYCLE_ERROR;
        }
        let called = if rng.random_bool(p.min(0.75)) {
            wrong_base(b, rng)
        } else {
            b
        };
        bases.push(called);
        quals.push(q as u8);
    }
    (bases, quals)
}

/// The base called instead of `b`: the dye-pair partner half the time, the
/// transition partner 30 %, the remaining base 20 %.
fn wrong_base(b: u8, rng: &mut ChaCha8Rng) -> u8 {
    let (dye, transition, other) = match b {
        b'A' => (b'C', b'G', b'T'),
        b'C' => (b'A', b'T', b'G'),
        b'G' => (b'T', b'A', b'C'),
        b'T' => (b'G', b'C', b'A'),
        _ => return b'N',
    };
    match rng.random_range(0..10) {
        0..5 => dye,
        5..8 => transition,
        _ => other,
    }
}

#[cfg(test)]
mod tests {
    use super::super::rng::{Stream, stream};
    use super::*;

    /// Observed error rate of bases with reported quality in `qs`.
    fn rate(truth: &[u8], lane: u32, keep: impl Fn(usize, u8) -> bool) -> (f64, f64) {
        let mut rng = stream(1, Stream::Pair, 0);
        let (mut err, mut n, mut expect) = (0u64, 0u64, 0f64);
        for _ in 0..4000 {
            let (b, q) = sequence(truth, 1, lane, &mut rng);
            for c in 0..truth.len() {
                if keep(c, q[c]) && b[c] != b'N' {
                    n += 1;
                    expect += 10f64.powf(-f64::from(q[c]) / 10.0);
                    err += u64::from(b[c] != truth[c]);
                }
            }
        }
        (err as f64 / n as f64, expect / n as f64)
    }

    #[test]
    fn quality_falls_along_the_read_and_errors_follow_the_documented_factors() {
        let truth: Vec<u8> = b"ACGTTGCAAC".repeat(10);
        let mut rng = stream(2, Stream::Pair, 0);
        let mut first = 0.0;
        let mut last = 0.0;
        for _ in 0..2000 {
            let (_, q) = sequence(&truth, 1, 1, &mut rng);
            first += q[5..15].iter().map(|&x| f64::from(x)).sum::<f64>();
            last += q[85..95].iter().map(|&x| f64::from(x)).sum::<f64>();
        }
        assert!(first > last * 1.1, "{first} vs {last}");
        // Early cycles, no GG in this read, lane 1: as reported.
        let (obs, exp) = rate(&truth, 1, |c, q| c < 70 && q > 10);
        assert!((obs / exp - 1.0).abs() < 0.25, "{obs} vs {exp}");
        // Lane 4 is 1.5 times worse.
        let (obs4, exp4) = rate(&truth, 4, |c, q| c < 70 && q > 10);
        assert!((obs4 / exp4 / 1.5 - 1.0).abs() < 0.25, "{obs4} vs {exp4}");
        // After GG: three times.
        let gg: Vec<u8> = b"AGGCATGGTA".repeat(10);
        let (obs, exp) = rate(&gg, 1, |c, q| c < 70 && q > 10 && c % 10 == 3);
        assert!((obs / exp / GG_ERROR - 1.0).abs() < 0.3, "{obs} vs {exp}");
    }
}
