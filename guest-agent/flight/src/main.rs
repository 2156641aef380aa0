//! `testbed-flight`: the Flight benchmark binary run in the guest (and on
//! the host); the same subcommands as `testbed flight`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "testbed-flight",
    version,
    about = "Arrow Flight benchmarks of the testbed"
)]
struct Cli {
    #[command(subcommand)]
    cmd: testbed_flight::FlightCommand,
}

fn main() -> anyhow::Result<()> {
    testbed_flight::run_command(Cli::parse().cmd)
}
