//! `testbed asam <cmd>` and `testbed-asam <cmd>`: the same subcommands
//! (`prepare`, `bench-preproc`), the CLI the agent's `asam-preproc`
//! workload runs; results are JSON lines on stdout.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use testbed_vocab::request::{
    self,
    asam::{AsamRequest, BenchPreprocRequest, PrepareRequest, WorkflowRequest},
};

use crate::bench::{BenchOptions, bench};

#[derive(Debug, clap::Subcommand)]
pub enum AsamCommand {
    /// Make (or find cached) a data set (generated, or the user's files
    /// for the `paper` size), aligned by bwa; prints its JSON.
    Prepare(Box<PrepareRequest>),
    /// Time sort and duplicate marking per tool; one JSON line per stage.
    BenchPreproc(BenchPreprocRequest),
    /// The variant-calling workflow in one data placement; JSON lines.
    Workflow(WorkflowRequest),
    /// One of the commands above, as the JSON request the agent writes
    /// (`{"command": "prepare", "dir": …}`, the flags' names with `_`).
    Request {
        /// The request's file; `-` reads stdin.
        file: PathBuf,
    },
    /// One stage process of the ArrowSAM placement (run by `workflow`).
    #[command(subcommand)]
    Stage(crate::workflow::stages::StageCommand),
    #[command(flatten)]
    Extra(crate::cli_extra::ExtraCommand),
}

/// Runs one subcommand to completion.
pub fn run_command(cmd: AsamCommand) -> anyhow::Result<()> {
    let request = match cmd {
        AsamCommand::Prepare(r) => AsamRequest::Prepare(r),
        AsamCommand::BenchPreproc(r) => AsamRequest::BenchPreproc(r),
        AsamCommand::Workflow(r) => AsamRequest::Workflow(r),
        AsamCommand::Request { file } => {
            request::read(&file).map_err(|e| anyhow::anyhow!("testbed-asam request: {e}"))?
        }
        AsamCommand::Extra(c) => return crate::cli_extra::run_extra(c),
        AsamCommand::Stage(stage) => return Ok(crate::workflow::stages::run(stage)?),
    };
    run_request(request)
}

/// Runs one request to completion, its lines on stdout.
pub fn run_request(request: AsamRequest) -> anyhow::Result<()> {
    // What the run was asked, recorded in bench-preproc's summary.
    let asked = serde_json::to_string(&request)?;
    let lines = match request {
        AsamRequest::Workflow(args) => crate::workflow::cli::run_args(&args)
            .with_context(|| format!("workflow on {}", args.prepared.display()))?
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()?,
        AsamRequest::Prepare(args) => {
            let prepared = crate::prepare::request::run(&args)
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
        AsamRequest::BenchPreproc(BenchPreprocRequest {
            sam,
            tools,
            out_dir,
            store_dir,
            threads,
            max_batch_rows,
            json: _,
        }) => {
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
                command_line: asked,
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
        let r = run_command(AsamCommand::BenchPreproc(BenchPreprocRequest {
            sam,
            tools: vec!["arrowsam".into()],
            out_dir: dir.path().join("work"),
            store_dir: None,
            threads: 1,
            max_batch_rows: 2,
            json: true,
        }));
        let _ = std::fs::remove_dir_all(&planted);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        r.unwrap();
    }
}
