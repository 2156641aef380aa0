//! Seeded random streams and the few distributions the generator needs
//! (rand 0.9 has no normal distribution without rand_distr).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a stream is drawn for. Each part of the generator has its own
/// stream, so changing how many numbers one part draws leaves the others'
/// output as it was.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    Genome = 1,
    Targets = 2,
    Variants = 3,
    KnownSites = 4,
    Fragments = 5,
    /// One stream per pair (`index` is the pair's number).
    Pair = 6,
    /// One stream per contaminant fragment (`index` is its number).
    Contaminant = 7,
    /// One stream per chimeric fragment.
    Chimera = 8,
}

/// The stream `s` of `seed`; `index` numbers streams of one kind (pairs).
pub fn stream(seed: u64, s: Stream, index: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(((s as u64) << 48) | (index & ((1 << 48) - 1)));
    r
}

/// A standard normal draw (Box-Muller).
pub fn normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A log-normal draw with median `median` and log-scale spread `sigma`.
pub fn lognormal(rng: &mut impl Rng, median: f64, sigma: f64) -> f64 {
    median * (sigma * normal(rng)).exp()
}

/// A geometric draw >= 1: P(k) = (1-p)^(k-1) p.
pub fn geometric(rng: &mut impl Rng, p: f64) -> u32 {
    let mut k = 1;
    while k < 1000 && !rng.random_bool(p) {
        k += 1;
    }
    k
}

/// An exponential draw with the given mean.
pub fn exponential(rng: &mut impl Rng, mean: f64) -> f64 {
    let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    -mean * u.ln()
}

/// Draws indices with probability proportional to fixed weights, in
/// O(log n) (a fragment picks one of thousands of targets).
#[derive(Debug, Clone)]
pub struct Weighted(Vec<u64>);

impl Weighted {
    pub fn new(weights: impl IntoIterator<Item = usize>) -> Self {
        let mut total = 0u64;
        Weighted(
            weights
                .into_iter()
                .map(|w| {
                    total += w as u64;
                    total
                })
                .collect(),
        )
    }

    /// An index; 0 when every weight is 0.
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        let total = self.0.last().copied().unwrap_or(0);
        if total == 0 {
            return 0;
        }
        let x = rng.random_range(0..total);
        self.0.partition_point(|&c| c <= x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_and_repeat() {
        let a: u64 = stream(1, Stream::Genome, 0).random();
        let b: u64 = stream(1, Stream::Variants, 0).random();
        assert_ne!(a, b);
        assert_eq!(a, stream(1, Stream::Genome, 0).random::<u64>());
        let mut r = stream(3, Stream::Pair, 7);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| normal(&mut r)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
    }
}
