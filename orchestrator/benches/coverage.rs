//! `./x bench coverage`: how often the intervals claims are decided on
//! cover the truth, and how often a claim is decided the wrong way, over
//! simulated runs with known truth (testbed::drawing::figures::coverage): lognormal,
//! bimodal and heavy-tailed units, boot effects of 0–20 %, 2 to 20 boots
//! and boots of three repetitions, points in the same boots and apart.
//! Targets: every interval called 95 % covers ≥ 93 % in every setting;
//! wrong decided verdicts ≤ 5 %. Trials per setting: $COVERAGE_TRIALS
//! (default 1000; the Monte Carlo error of 95 % is then ±0.7 %).

use std::time::Instant;

use testbed::drawing::figures::coverage::{self, ClaimCase, Kind};

fn main() {
    // `cargo bench` passes --bench; nothing else is read.
    let trials: usize = std::env::var("COVERAGE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let start = Instant::now();
    let grid = coverage::grid(&[2, 3, 4, 5, 6, 8, 10, 20]);
    let mut covers = Vec::new();
    for kind in Kind::ALL {
        for (i, s) in grid.iter().enumerate() {
            covers.push(coverage::coverage(kind, s, trials, true, 1 + i as u64));
        }
    }
    println!(
        "Coverage of the 95 % intervals ({trials} trials per setting; the smallest over \
         4 noises x 3 boot effects per row; 'before': the percentile bootstrap of medians):\n"
    );
    print!("{}", coverage::coverage_table(&covers));
    let worst = covers.iter().map(|c| c.now).fold(1.0, f64::min);
    println!(
        "\nsmallest coverage now: {:.1} % (target >= 93 %)\n",
        worst * 100.0
    );

    let claim_trials = (trials / 2).max(100);
    let mut rates = Vec::new();
    for case in ClaimCase::ALL {
        for (i, s) in grid.iter().enumerate() {
            rates.push(coverage::rates(case, s, claim_trials, 1000 + i as u64));
        }
    }
    println!(
        "Wrong verdicts through claims::evaluate ({claim_trials} trials each way; true claims \
         5 % inside their bound, false ones 5 % outside; the largest over the noises and boot \
         effects per row):\n"
    );
    print!("{}", coverage::rates_table(&rates));
    let worst = rates
        .iter()
        .map(|r| r.holds_when_false.max(r.fails_when_true))
        .fold(0.0, f64::max);
    println!(
        "\nlargest wrong-verdict rate: {:.1} % (target <= 5 %)\nelapsed: {:.0} s",
        worst * 100.0,
        start.elapsed().as_secs_f64()
    );
}
