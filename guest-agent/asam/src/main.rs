//! `testbed-asam prepare | bench-preproc`: the binary the agent's
//! `asam-preproc` workload runs; the same subcommands as `testbed asam`
//! (see [`testbed_asam::cli`]).

use clap::Parser;

#[derive(Parser)]
#[command(name = "testbed-asam", about = "ArrowSAM pre-processing benchmark")]
struct Cli {
    #[command(subcommand)]
    command: testbed_asam::AsamCommand,
}

fn main() -> anyhow::Result<()> {
    testbed_asam::run_command(Cli::parse().command)
}
