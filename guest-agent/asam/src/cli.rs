//! `testbed asam <cmd>` and `testbed-asam <cmd>`: the same subcommands
//! (`prepare`, `bench-preproc`), the CLI the agent's `asam-preproc`
//! workload runs; results are JSON lines on stdout.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::bench::{BenchOptions, bench};
use crate::prepare::{DatasetParams, prepare};

#[derive(Debug, clap::Subcommand)]
pub enum AsamCommand {
    /// Make (or find cached) a synthetic aligned data set; prints its JSON.
    Prepare {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value = "tiny")]
        name: String,
        #[arg(long, default_value_t = 2)]
        chromosomes: u32,
        #[arg(long, default_value_t = 200_000)]
        chromosome_length: u64,
        #[arg(long, default_value_t = 5.0)]
        coverage: f64,
        #[arg(long, default_value_t = 0.1)]
        dup_fraction: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Time sort and duplicate marking per tool; one JSON line per stage.
    BenchPreproc {
        #[arg(long)]
        sam: PathBuf,
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "picard,sambamba,samtools,arrowsam"
        )]
        tools: Vec<String>,
        #[arg(long)]
        workdir: PathBuf,
        /// Where the ArrowSAM store's private directory (mode 0700) is
        /// made; default /dev/shm.
        #[arg(long)]
        store_dir: Option<PathBuf>,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// JSON lines (the only output format; accepted for symmetry with testbed-flight).
        #[arg(long)]
        json: bool,
    },
}

/// Runs one subcommand to completion.
pub fn run_command(cmd: AsamCommand) -> anyhow::Result<()> {
    let lines = match cmd {
        AsamCommand::Prepare {
            dir,
            name,
            chromosomes,
            chromosome_length,
            coverage,
            dup_fraction,
            seed,
            threads,
        } => {
            let p = DatasetParams {
                name,
                chromosomes,
                chromosome_length,
                coverage,
                dup_fraction,
                seed,
            };
            let prepared = prepare(&p, &dir, threads)
                .with_context(|| format!("prepare data set in {}", dir.display()))?;
            vec![serde_json::to_string(&prepared)?]
        }
        AsamCommand::BenchPreproc {
            sam,
            tools,
            workdir,
            store_dir,
            threads,
            json: _,
        } => {
            let store_dir = store_dir.unwrap_or_else(crate::store::default_dir);
            let o = BenchOptions {
                sam,
                tools,
                workdir,
                store_dir,
                threads,
            };
            let report =
                bench(&o).with_context(|| format!("bench-preproc on {}", o.sam.display()))?;
            report
                .lines()
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    let mut out = std::io::stdout().lock();
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{HEADER, pair};

    #[test]
    fn the_default_store_ignores_a_pre_created_path() {
        let dir = tempfile::tempdir().unwrap();
        let sam = dir.path().join("in.sam");
        let mut text = HEADER.to_string();
        for (i, (p1, p2)) in [(100, 300), (100, 300), (500, 700)].into_iter().enumerate() {
            for l in pair(&format!("r{i}"), p1, p2, 'I') {
                text.push_str(&l);
                text.push('\n');
            }
        }
        std::fs::write(&sam, text).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        // The store used to be /dev/shm/testbed-asam-<pid>: another user
        // could create it first, with symlinks where the stores go.
        let planted =
            crate::store::default_dir().join(format!("testbed-asam-{}", std::process::id()));
        std::fs::create_dir(&planted).unwrap();
        for name in ["aligned.arrow", "sorted.arrow", "flags.arrow", "header.sam"] {
            std::os::unix::fs::symlink(&victim, planted.join(name)).unwrap();
        }
        let r = run_command(AsamCommand::BenchPreproc {
            sam,
            tools: vec!["arrowsam".into()],
            workdir: dir.path().join("work"),
            store_dir: None,
            threads: 1,
            json: true,
        });
        let _ = std::fs::remove_dir_all(&planted);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        r.unwrap();
    }
}
