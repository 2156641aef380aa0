//! `testbed asam <cmd>` and `testbed-asam <cmd>`: the same subcommands
//! (`prepare`, `bench-preproc`), the CLI the agent's `asam-preproc`
//! workload runs; results are JSON lines on stdout.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::bench::{BenchOptions, bench};

#[derive(Debug, clap::Subcommand)]
pub enum AsamCommand {
    /// Make (or find cached) a data set (generated, or the user's files
    /// for the `paper` size), aligned by bwa; prints its JSON.
    Prepare(Box<crate::data::args::PrepareArgs>),
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
        /// Where every tool writes its sorted, duplicate-marked BAM
        /// (`<tool>.md.bam`), its intermediate and temporary files, and the
        /// gates their reference BAMs: one place for all tools.
        #[arg(long, alias = "workdir")]
        out_dir: PathBuf,
        /// Where the ArrowSAM store's private directory (mode 0700) is
        /// made; default /dev/shm.
        #[arg(long)]
        store_dir: Option<PathBuf>,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// ArrowSAM cuts a batch at this many rows (a chromosome spans
        /// several batches); string columns are also cut below 1 GiB.
        #[arg(long, default_value_t = 1 << 20)]
        max_batch_rows: usize,
        /// JSON lines (the only output format; accepted for symmetry with testbed-flight).
        #[arg(long)]
        json: bool,
    },
    /// The variant-calling workflow in one data placement; JSON lines.
    Workflow(crate::workflow::cli::WorkflowArgs),
    /// One stage process of the ArrowSAM placement (run by `workflow`).
    #[command(subcommand)]
    Stage(crate::workflow::stages::StageCommand),
    #[command(flatten)]
    Extra(crate::cli_extra::ExtraCommand),
}

/// Runs one subcommand to completion.
pub fn run_command(cmd: AsamCommand) -> anyhow::Result<()> {
    let lines = match cmd {
        AsamCommand::Workflow(args) => crate::workflow::cli::run_args(&args)
            .with_context(|| format!("workflow on {}", args.prepared.display()))?
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?,
        AsamCommand::Extra(c) => return crate::cli_extra::run_extra(c),
        AsamCommand::Stage(stage) => {
            crate::workflow::stages::run(stage)?;
            Vec::new()
        }
        AsamCommand::Prepare(args) => {
            let prepared = crate::data::args::run(&args)
                .with_context(|| format!("prepare data set in {}", args.dir.display()))?;
            // The build's times, for a person watching (stdout is the JSON).
            let t = |k: &str| prepared.seconds.get(k).copied().unwrap_or(0.0);
            eprintln!(
                "prepare: {} pairs{}; generate {:.2} s, bwa index {:.2} s, bwa mem {:.2} s",
                prepared.pairs,
                if prepared.cached { " (cached)" } else { "" },
                t("generate"),
                t("index"),
                t("align")
            );
            vec![serde_json::to_string(&prepared)?]
        }
        AsamCommand::BenchPreproc {
            sam,
            tools,
            out_dir,
            store_dir,
            threads,
            max_batch_rows,
            json: _,
        } => {
            let store_dir = store_dir.unwrap_or_else(crate::store::default_dir);
            let o = BenchOptions {
                sam,
                tools,
                out_dir,
                store_dir,
                threads,
                limits: crate::schema::BatchLimits {
                    max_rows: max_batch_rows,
                    ..Default::default()
                },
                command_line: std::env::args().collect::<Vec<_>>().join(" "),
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
    #[ignore = "runs samtools sort and Picard MarkDuplicates as the gates' references (~4 s); ./x test runs it"]
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
            out_dir: dir.path().join("work"),
            store_dir: None,
            threads: 1,
            max_batch_rows: 2,
            json: true,
        });
        let _ = std::fs::remove_dir_all(&planted);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        r.unwrap();
    }
}
