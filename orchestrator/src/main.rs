//! The `testbed` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use testbed::planning::spec::{AccelChoice, ExecutorKind};
use testbed::{
    drawing::figures, execution::executor, execution::run, host::paths, host::progress,
    inputs::guestbin, inputs::kernel, reporting::doctor, reporting::show,
};
use testbed::{out, outln};

#[derive(Parser)]
#[command(
    name = "testbed",
    version,
    about = "Reproducible storage and data-systems experiments in QEMU VMs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What this host has and lacks (QEMU, KVM by a real probe boot, kernel, disk), and how to fix each.
    Doctor {
        /// Skip the KVM probe boot.
        #[arg(long)]
        no_probe: bool,
        /// Only the preflight: check the tools these steps need (`all`, or
        /// any of the NEEDS in orchestrator/host-tools.txt); exit 1 naming
        /// each missing tool and its package.
        #[arg(long, value_name = "STEP")]
        need: Vec<String>,
    },
    /// Run an experiment spec.
    Run(RunArgs),
    /// A run's state; for a Slurm run, each array task as Slurm and its
    /// run directory see it.
    Status { run: PathBuf },
    /// Merge a Slurm run's tasks into its run directory (samples, summary,
    /// manifest), as a direct run would have left them.
    Collect { run: PathBuf },
    /// A one-node Slurm cluster in DIR (munged, slurmctld, slurmd from
    /// Debian), to try the slurm executor on this machine; Ctrl-C stops it.
    SlurmLocal { dir: PathBuf },
    /// What each Slurm array task runs (from RUN/slurm/array.sh).
    #[command(hide = true)]
    SlurmTask {
        run: PathBuf,
        /// The task (default: $SLURM_ARRAY_TASK_ID).
        #[arg(long)]
        task: Option<u32>,
    },
    /// Validate specs (and their sweeps) without running anything: every
    /// error of each file (up to 20 a file), with its file, line and
    /// field; exit 1 if any.
    Validate {
        #[arg(required = true)]
        specs: Vec<PathBuf>,
    },
    /// Draw every figure of a run from its samples.parquet (RUN/figures/*.svg|png|json).
    Plot {
        run: PathBuf,
        /// Figure definitions (default experiments/figures).
        #[arg(long)]
        figures: Option<PathBuf>,
    },
    /// Check the paper's claims against a run (RUN/claims.json).
    #[command(after_help = CHECK_EXIT_CODES)]
    Check {
        run: PathBuf,
        #[arg(long)]
        figures: Option<PathBuf>,
        /// A run whose claims are the bar: the claims that held there are
        /// gated in RUN (see the exit codes below).
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// First run RUN's noisy points again (testbed run --resume
        /// --rerun-noisy on RUN, at most twice per point over all its
        /// attempts); a claim lost on points still noisy after that is
        /// inconclusive (exit 2) instead of a regression.
        #[arg(long)]
        rerun_noisy: bool,
    },
    /// Figures, claims and manifest of a run in one self-contained RUN/report.html.
    Report {
        run: PathBuf,
        #[arg(long)]
        figures: Option<PathBuf>,
    },
    /// Per figure and series, the change from RUN_A to RUN_B with its confidence.
    Compare {
        run_a: PathBuf,
        run_b: PathBuf,
        #[arg(long)]
        figures: Option<PathBuf>,
        /// Exit with status 4 when a regression is flagged.
        #[arg(long)]
        fail_on_regression: bool,
        /// The smallest change flagged, in percent of A (the change's
        /// interval must also exclude 0).
        #[arg(long, default_value_t = 5.0)]
        min_effect: f64,
    },
    /// Change points of every value compare knows over a history of runs
    /// of one experiment: where each series stepped, the runs on either
    /// side, the segments' medians and the p-value.
    History(HistoryArgs),
    /// Run every spec a family or figure needs (resuming), then plot, check and report.
    Reproduce {
        /// A family (bpf-storage, flight, ...) or a figure id; default all.
        target: Option<String>,
        /// CI size: the *-quick.toml specs and smoke.toml.
        #[arg(long)]
        quick: bool,
        /// auto (probe KVM, else TCG), kvm or tcg.
        #[arg(long)]
        accel: Option<AccelChoice>,
    },
    /// The specs and the figures they produce.
    List {
        #[arg(long, default_value = "experiments")]
        dir: PathBuf,
    },
    /// Summary of a run directory.
    Show { run: PathBuf },
    /// Check each run's manifest against its digest
    /// (manifest.json.sha256) and every file the run wrote against the
    /// size, sha256 and table rows the manifest recorded as the run
    /// finished; a packed archive (RUNS may name one) as unpack checks
    /// it, with the files pack added; exit 1 naming each file that
    /// differs.
    Verify {
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Runs in one file for a reviewer (a zstd tar of manifest, tables,
    /// point files, console logs, spec, figures and report, with the
    /// kernel's config and patches); each run is verified first.
    Pack {
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// The archive to write (e.g. runs.tar.zst).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// A packed file's runs back as DIR/<experiment>/<run id>, each
    /// verified before it is moved into place; plot, check and report read
    /// them there.
    Unpack {
        archive: PathBuf,
        #[arg(short = 'o', long = "out", default_value = "results")]
        into: PathBuf,
    },
    /// Rewrite run directories written before the tidy tables (samples with
    /// kind/rep/param.* columns) as samples.parquet + summary.parquet; the
    /// old files are kept under RUN/legacy/.
    Upgrade {
        #[arg(required = true)]
        runs: Vec<PathBuf>,
    },
    /// Kernels: fetch, build, list the cache.
    Kernel {
        #[command(subcommand)]
        command: KernelCommand,
    },
    /// What the cache directory holds (kernels, build trees, images,
    /// initramfs, BPF objects, downloads) and keeping it to a size.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Guest root filesystem images from images/NAME.toml: build, list.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// NVMe passthrough: give back controllers a killed run left on vfio-pci.
    Passthrough {
        #[command(subcommand)]
        command: PassthroughCommand,
    },
    /// Arrow Flight benchmarks: serve, bench, query, ... (runs the testbed-flight binary; `testbed flight --help` lists them).
    #[command(disable_help_flag = true)]
    Flight(HelperArgs),
    /// ArrowSAM pre-processing benchmark: prepare, bench-preproc (runs the testbed-asam binary; `testbed asam --help` lists them).
    #[command(disable_help_flag = true)]
    Asam(HelperArgs),
}

/// A helper's command line, passed on unchanged (`--help` included) to
/// the helper binary: `$TESTBED_FLIGHT_BIN` / `$TESTBED_ASAM_BIN`, else
/// beside this `testbed`, else on PATH.
#[derive(clap::Args)]
struct HelperArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<std::ffi::OsString>,
}

#[derive(Subcommand)]
enum PassthroughCommand {
    /// Rebind to its original driver each controller a state file in
    /// ~/.cache/testbed/passthrough names (or only PCI), and remove the file.
    Restore {
        /// One controller, e.g. 0000:01:00.0.
        pci: Option<String>,
        /// Even if the testbed that bound it still runs.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Build the image of recipe images/NAME.toml (or find it in the cache).
    Build { name: String },
    /// The recipes, and which are built, with their size.
    List,
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Each entry: what it is, its size, its last use, the runs that used it.
    List {
        /// Where to look for runs that used each entry.
        #[arg(long, default_value = "results")]
        results: PathBuf,
    },
    /// Remove the least recently used entries, never one a running
    /// process holds (a run booting it, a build).
    Prune {
        /// Remove until the cache holds at most this much (e.g. 20G).
        #[arg(long)]
        max_size: Option<String>,
        /// Remove entries unused for longer than this (e.g. 30d, 12h).
        #[arg(long)]
        older_than: Option<String>,
    },
}

#[derive(Subcommand)]
enum KernelCommand {
    /// Fetch or build a kernel by descriptor name (kernel-configs/NAME.toml).
    Build {
        #[arg(default_value = "vm-base")]
        name: String,
    },
    /// Fetch a stock kernel (same as build for a packaged kernel).
    Fetch {
        #[arg(default_value = "debian-cloud")]
        name: String,
    },
    /// Descriptors and cached kernels.
    List,
    /// One kernel's cached artefact.
    Show { name: String },
}

// `testbed run`'s arguments (the variant's doc is the command's help).
#[derive(clap::Args)]
struct RunArgs {
    spec: PathBuf,
    /// auto (probe KVM, else TCG), kvm (fail if unusable) or tcg.
    #[arg(long)]
    accel: Option<AccelChoice>,
    /// The run directory (default results/<experiment>/<run-id>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue an interrupted run, skipping finished points.
    #[arg(long)]
    resume: bool,
    /// With --resume: continue even though the testbed version, the
    /// agent or the kernel differ from the earlier attempt's (recorded
    /// in the manifest).
    #[arg(long, requires = "resume")]
    force: bool,
    /// Stop at the first failed point.
    #[arg(long)]
    fail_fast: bool,
    /// Run again each point measured on a busy host (at most twice per
    /// point; the earlier measurements stay in its record). With
    /// --resume, also the noisy points of the earlier attempt.
    #[arg(long)]
    rerun_noisy: bool,
    /// Where the points run: qemu, host or slurm (default: the spec's
    /// experiment.executor).
    #[arg(long)]
    executor: Option<ExecutorKind>,
    /// Print every sysfs write and the QEMU command line the run would
    /// use, and do none of them.
    #[arg(long)]
    dry_run: bool,
    /// Slurm executor: wait for the array to finish, then collect it.
    #[arg(long)]
    wait: bool,
}

// `testbed history`'s arguments.
#[derive(clap::Args)]
struct HistoryArgs {
    /// Run directories, oldest first; a directory holding run
    /// directories stands for them, ordered by their start time.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    #[arg(long)]
    figures: Option<PathBuf>,
    /// Print the history as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Gate on the newest run: exit 1 when it starts a new segment the
    /// worse way (any way where the panel has no better direction), 2 when
    /// it is inconclusive (noisy points not run again, or a change on
    /// points still noisy after `testbed run --rerun-noisy`), 0 otherwise;
    /// 3 on an error (with or without this flag).
    #[arg(long)]
    fail_on_change: bool,
    /// The smallest change of the segment medians, in percent.
    #[arg(long, default_value_t = 5.0)]
    min_effect: f64,
    /// The largest p-value (two-sided t-test of the segments) of a change point.
    #[arg(long, default_value_t = 0.01)]
    max_p: f64,
    /// The fewest runs of a segment (the newest run may start one alone).
    #[arg(long, default_value_t = 2)]
    min_size: usize,
}

/// `testbed check --help`: what its exit status says.
const CHECK_EXIT_CODES: &str = "\
Exit status:
  0  pass: every claim that held in the baseline still holds (or no --baseline)
  1  REGRESSION: a claim that held in the baseline does not hold in RUN; a
     noisy point excuses it only after --rerun-noisy ran it again and it
     still was noisy (then 2)
  2  INCONCLUSIVE: a claim that held is now undecided, not measurable or not
     checked, or was lost on points still noisy after --rerun-noisy; or RUN
     has points measured on a busy host that were not run again
  3  error: the check itself failed (no run at RUN or BASE, unreadable
     manifest or samples, bad figure definitions, bad arguments, a failed
     rerun)";

/// Whether the command line names a gate command (check, history), whose
/// errors exit [`figures::gate::EXIT_ERROR`] rather than 1 (or clap's 2).
fn is_gate_command(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "check" || a == "history")
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let gate = is_gate_command(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are no error; a gate's usage error is
            // not its inconclusive 2.
            return match (e.use_stderr(), gate) {
                (true, true) => ExitCode::from(figures::gate::EXIT_ERROR),
                _ => ExitCode::from(e.exit_code().clamp(0, 255) as u8),
            };
        }
    };
    // The helpers' commands keep their own signal handling (flight serve
    // stops on SIGINT/SIGTERM; asam stops on SIGINT): they exec the binary.
    if !matches!(cli.command, Command::Flight(_) | Command::Asam(_)) {
        install_interrupt_handler();
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if gate {
                ExitCode::from(figures::gate::EXIT_ERROR)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Prints a run's outcome; its exit code: 0 all points ok, 3 some
/// failed, 130 interrupted.
fn run_outcome(result: Result<run::RunResult, run::RunError>, spec: &str) -> Result<ExitCode> {
    match result {
        Ok(r) => {
            out!("{}", show::show_run(&r.dir)?);
            outln!("results in {}", r.dir.display());
            let all_ok = r.manifest.points.iter().all(|p| p.ok);
            Ok(if all_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        Err(run::RunError::DryRun) => Ok(ExitCode::SUCCESS),
        Err(run::RunError::Interrupted(dir)) => {
            eprintln!(
                "interrupted; finished points are kept. Continue with: testbed run {spec} --resume --out {dir}"
            );
            Ok(ExitCode::from(130))
        }
        Err(e) => Err(e.into()),
    }
}

fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if executor::INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // Second Ctrl-C: stop now.
            testbed::machine::qemu::process::kill_all();
            std::process::exit(130);
        }
        eprintln!("\n[testbed] interrupted: stopping QEMU, keeping finished points");
        testbed::machine::qemu::process::kill_all();
    });
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    if matches!(cli.command, Command::Run { .. } | Command::Reproduce { .. }) {
        sweep_leftovers();
    }
    match cli.command {
        Command::Doctor { need, .. } if !need.is_empty() => preflight(&need),
        Command::Doctor { no_probe, .. } => doctor(no_probe),
        Command::Run(args) => run_spec(args),
        Command::Status { run } => status(&run),
        Command::Collect { run } => collect(&run),
        Command::SlurmLocal { dir } => slurm_local(&dir),
        Command::SlurmTask { run, task } => slurm_task(&run, task),
        Command::Validate { specs } => validate(&specs),
        Command::Plot { run, figures } => plot(&run, figures),
        Command::Check {
            run,
            figures,
            baseline,
            rerun_noisy,
        } => check(&run, figures, baseline, rerun_noisy),
        Command::Report { run, figures } => report(&run, figures),
        Command::Compare {
            run_a,
            run_b,
            figures,
            fail_on_regression,
            min_effect,
        } => compare(&run_a, &run_b, figures, fail_on_regression, min_effect),
        Command::History(args) => history(args),
        Command::Reproduce {
            target,
            quick,
            accel,
        } => reproduce(target, quick, accel),
        Command::List { dir } => list(dir),
        Command::Upgrade { runs } => upgrade(&runs),
        Command::Show { run } => {
            out!("{}", show::show_run(&run)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify { runs } => verify_runs(&runs),
        Command::Pack { runs, out } => {
            for p in testbed::recording::results::pack::pack(&runs, &out)? {
                outln!("packed {} ({} files)", p.name, p.files);
                for m in &p.missing {
                    outln!("  not packed, not found: {m}");
                }
            }
            outln!("wrote {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Unpack { archive, into } => {
            for run in testbed::recording::results::pack::unpack(&archive, &into)? {
                outln!("unpacked and verified {}", run.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Kernel { command } => kernel_command(command),
        Command::Cache { command } => cache_command(command),
        Command::Image { command } => image_command(command),
        Command::Passthrough {
            command: PassthroughCommand::Restore { pci, force },
        } => passthrough_restore(pci.as_deref(), force),
        // Replaces this process; returns only when the helper cannot run.
        Command::Flight(h) => Err(guestbin::exec_on_host(guestbin::FLIGHT, &h.args).into()),
        Command::Asam(h) => Err(guestbin::exec_on_host(guestbin::ASAM, &h.args).into()),
    }
}

/// What a killed testbed left running (QEMU processes, passthrough
/// bindings) is named and cleaned before anything new starts.
fn sweep_leftovers() {
    for line in testbed::machine::qemu::process::sweep_leftovers() {
        eprintln!("[testbed] {line}");
    }
    let state_dir = testbed::execution::devices::state::dir(&paths::cache_root());
    let host = testbed::execution::devices::Host::real();
    for line in testbed::execution::devices::passthrough::unrestored(&host, &state_dir) {
        eprintln!("[testbed] warning: {line}");
    }
}

fn exit_failure_if(failed: bool) -> ExitCode {
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn doctor(no_probe: bool) -> Result<ExitCode> {
    let findings = doctor::diagnose(!no_probe);
    out!("{}", doctor::render(&findings));
    Ok(exit_failure_if(
        findings.iter().any(|f| f.level == doctor::Level::Fail),
    ))
}

fn run_spec(a: RunArgs) -> Result<ExitCode> {
    let opts = run::RunOptions {
        accel: a.accel,
        out: a.out,
        resume: a.resume,
        force: a.force,
        fail_fast: a.fail_fast,
        rerun_noisy: a.rerun_noisy,
        results_root: None,
        executor: a.executor,
        dry_run: a.dry_run,
        wait: a.wait,
        task: None,
    };
    let mut progress = progress::for_terminal();
    let result = run::run(&a.spec, &opts, progress.as_mut());
    drop(progress);
    run_outcome(result, &a.spec.display().to_string())
}

/// `testbed verify`: each run's manifest against its digest and its files
/// against the manifest's record; a packed archive's runs as `unpack`
/// would check them.
fn verify_runs(runs: &[PathBuf]) -> Result<ExitCode> {
    use testbed::recording::results::{integrity, pack};
    let mut failed = 0;
    for run in runs {
        let checks = if run.is_file() {
            pack::verify_archive(run)?
                .into_iter()
                .map(|(name, c)| (format!("{}: {name}", run.display()), c))
                .collect()
        } else {
            vec![(run.display().to_string(), integrity::check_run(run)?.1)]
        };
        for (name, c) in checks {
            if !c.ok() {
                failed += 1;
            }
            print_check(&name, &c);
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_check(name: &str, c: &testbed::recording::results::integrity::RunCheck) {
    if c.ok() {
        outln!(
            "{name}: ok: the manifest as sealed, {} files, {} bytes, as recorded; {} rows in its tables",
            c.matched,
            c.bytes,
            c.rows
        );
    } else {
        outln!(
            "{name}: {} problem(s) ({} output files recorded):",
            c.problems.len(),
            c.recorded
        );
        for p in &c.problems {
            outln!("  {p}");
        }
    }
    if !c.unrecorded.is_empty() {
        outln!(
            "  not in the record (written after the run, not checked): {}",
            c.unrecorded.join(", ")
        );
    }
}

fn status(run: &Path) -> Result<ExitCode> {
    if testbed::execution::slurm::array::ArrayDir::is_array(run) {
        out!("{}", testbed::execution::slurm::status::render(run)?);
    } else {
        out!("{}", show::show_run(run)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn collect(run: &Path) -> Result<ExitCode> {
    let mut progress = progress::for_terminal();
    let result = testbed::execution::slurm::collect::collect(run, progress.as_mut());
    drop(progress);
    run_outcome(result, "SPEC")
}

fn slurm_local(dir: &Path) -> Result<ExitCode> {
    let cluster = testbed::execution::slurm::local::LocalSlurm::start(dir)?;
    outln!(
        "one-node Slurm running ({} CPUs on node {}); in another shell:\n  export SLURM_CONF={}\nCtrl-C stops it",
        cluster.cpus,
        cluster.node,
        cluster.conf.display()
    );
    while !executor::interrupted() {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(cluster);
    Ok(ExitCode::SUCCESS)
}

fn slurm_task(run: &Path, task: Option<u32>) -> Result<ExitCode> {
    let mut progress = progress::for_terminal();
    let result = testbed::execution::slurm::task::run(run, task, progress.as_mut());
    drop(progress);
    run_outcome(result, &run.join("spec.toml").display().to_string())
}

/// `testbed validate`: every spec checked, every error printed.
fn validate(specs: &[PathBuf]) -> Result<ExitCode> {
    let defs = figures::def::load_all(&figures::def::default_dir())?;
    let (mut errors, mut bad) = (0, 0);
    for spec in specs {
        let found = validate_one(spec, &defs);
        if found.is_empty() {
            continue;
        }
        bad += 1;
        errors += found.len();
        let max = testbed::planning::spec::MAX_ERRORS;
        for e in found.iter().take(max) {
            eprintln!("error: {e}");
        }
        if found.len() > max {
            eprintln!(
                "error: {}: {} more errors not shown",
                spec.display(),
                found.len() - max
            );
        }
    }
    if bad == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("{errors} error(s) in {bad} of {} spec file(s)", specs.len());
    Ok(ExitCode::FAILURE)
}

/// One spec's errors (none: it printed its ok line).
fn validate_one(
    spec: &Path,
    defs: &std::collections::BTreeMap<String, figures::def::FigureDef>,
) -> Vec<String> {
    let (loaded, plan) = match run::check_spec_all(spec) {
        Ok(ok) => ok,
        Err(errors) => return errors.iter().map(ToString::to_string).collect(),
    };
    let misfits = figures::fit::spec_misfits(&loaded.spec.experiment.figures, &plan, defs);
    if !misfits.is_empty() {
        return misfits
            .iter()
            .map(|m| format!("{}: {m}", spec.display()))
            .collect();
    }
    let e = &loaded.spec.experiment;
    outln!(
        "{}: ok — experiment {}, {} points ({} sweep combinations × {} repetitions), executor {:?}",
        spec.display(),
        e.name,
        plan.points.len(),
        plan.points.len() / e.repetitions as usize,
        e.repetitions,
        e.executor
    );
    Vec::new()
}

fn plot(run: &Path, figures: Option<PathBuf>) -> Result<ExitCode> {
    let p = figures::plot_run(run, &figure_defs(figures))?;
    for f in &p.files {
        outln!("{}", f.display());
    }
    for (id, notes) in &p.notes {
        for n in notes {
            outln!("  {id}: {n}");
        }
    }
    report_unknown(&p.unknown);
    Ok(ExitCode::SUCCESS)
}

fn check(
    run: &Path,
    figures: Option<PathBuf>,
    baseline: Option<PathBuf>,
    rerun_noisy: bool,
) -> Result<ExitCode> {
    let defs = figure_defs(figures);
    // The baseline first: a bad one ends the check before any rerun.
    let before = baseline
        .as_ref()
        .map(|base| {
            figures::claims_of(base, &defs)
                .with_context(|| format!("the baseline {}", base.display()))
        })
        .transpose()?;
    if rerun_noisy {
        rerun_noisy_points(run)?;
    }
    let (claims, unknown) = figures::check_run(run, &defs)?;
    let rows: Vec<(&str, &figures::ClaimResult)> = claims.iter().map(|c| ("", c)).collect();
    out!("{}", figures::claims::table(&rows));
    outln!("claims in {}", run.join("claims.json").display());
    report_unknown(&unknown);
    let manifest_path = run.join("manifest.json");
    let noise = testbed::recording::results::manifest::read(&manifest_path)
        .with_context(|| format!("the run {}", run.display()))?
        .noisy();
    // Say so beside the verdicts a busy host can cause, so that an
    // undecided claim is not read as a finding about the system.
    let shaky = claims.iter().any(|c| {
        matches!(
            c.verdict,
            figures::Verdict::DoesNotHold | figures::Verdict::Undecided
        )
    });
    if noise.noisy > 0 && shaky {
        outln!(
            "this run: {}; a claim that did not hold or stayed undecided may be the host's noise: run it again on a quiet host",
            noise.text()
        );
    }
    // A verdict is a finding about the run, not an error of the
    // check: "does not hold" and "undecided at this noise" exit 0,
    // unless a baseline makes the claims a gate.
    let Some(before) = before else {
        return Ok(ExitCode::SUCCESS);
    };
    let gate = figures::gate::against_baseline(&before, &claims, &noise, rerun_noisy);
    out!("{}", gate.text());
    Ok(ExitCode::from(gate.outcome().code()))
}

/// `check --rerun-noisy`: the run's noisy points run again, as `testbed
/// run SPEC --resume --rerun-noisy --out RUN` would run them (with the
/// accelerator and executor the run used). Points that ran again as often
/// as `--rerun-noisy` allows are not run (and nothing boots when no point
/// may run again).
fn rerun_noisy_points(run_dir: &Path) -> Result<()> {
    use testbed::recording::results::{manifest, rundir::RunDir};
    let m = manifest::read(&run_dir.join("manifest.json"))
        .with_context(|| format!("--rerun-noisy: the run {}", run_dir.display()))?;
    let noisy = m.noisy();
    let due = m
        .points
        .iter()
        .filter(|p| run::may_rerun_for_noise(p))
        .count();
    if due == 0 {
        if noisy.noisy > 0 {
            outln!(
                "--rerun-noisy: {}; none may run again (each ran again {} times, or failed)",
                noisy.text(),
                run::MAX_NOISY_RERUNS
            );
        }
        return Ok(());
    }
    let executor = match serde_json::from_value::<ExecutorKind>(m.executor.clone().into()) {
        Ok(ExecutorKind::Slurm) => anyhow::bail!(
            "--rerun-noisy: {} ran under Slurm; run its noisy points again with testbed run SPEC --executor slurm --resume --rerun-noisy --out {0}",
            run_dir.display()
        ),
        Ok(e) => Some(e),
        Err(_) => None,
    };
    let accel = m.accel.as_ref().map(|a| match a.used {
        testbed::machine::qemu::argv::Accel::Kvm => AccelChoice::Kvm,
        testbed::machine::qemu::argv::Accel::Tcg => AccelChoice::Tcg,
    });
    // The spec as run: the file the run was started from when it still
    // holds the same text (relative paths in it resolve as they did),
    // else the run's own copy.
    let copy = RunDir {
        root: run_dir.to_path_buf(),
    }
    .spec_copy();
    let original = PathBuf::from(&m.spec_file);
    let spec = match (std::fs::read(&original), std::fs::read(&copy)) {
        (Ok(a), Ok(b)) if a == b => original,
        _ => copy,
    };
    outln!(
        "--rerun-noisy: {due} noisy point(s) of {} run again (testbed run {} --resume --rerun-noisy --out {0})",
        run_dir.display(),
        spec.display()
    );
    let opts = run::RunOptions {
        accel,
        out: Some(run_dir.to_path_buf()),
        resume: true,
        rerun_noisy: true,
        executor,
        ..Default::default()
    };
    let mut progress = progress::for_terminal();
    let result = run::run(&spec, &opts, progress.as_mut());
    drop(progress);
    let r = result.with_context(|| format!("--rerun-noisy: rerunning {}", run_dir.display()))?;
    outln!(
        "--rerun-noisy: {}",
        match r.manifest.noisy() {
            n if n.noisy == 0 => "no point is noisy now".to_string(),
            n => n.text(),
        }
    );
    Ok(())
}

fn report(run: &Path, figures: Option<PathBuf>) -> Result<ExitCode> {
    let out = figures::report_run(run, &figure_defs(figures))?;
    outln!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// `--min-effect` in percent: finite and not negative.
fn check_min_effect(min_effect: f64) -> Result<()> {
    if !(min_effect.is_finite() && min_effect >= 0.0) {
        anyhow::bail!("--min-effect {min_effect}: a percentage ≥ 0, such as 5");
    }
    Ok(())
}

fn compare(
    run_a: &Path,
    run_b: &Path,
    figures: Option<PathBuf>,
    fail_on_regression: bool,
    min_effect: f64,
) -> Result<ExitCode> {
    check_min_effect(min_effect)?;
    let defs = figures::def::load_all(&figure_defs(figures))?;
    let c = figures::compare::compare(run_a, run_b, &defs, min_effect / 100.0)?;
    out!("{}", figures::compare::render(&c));
    Ok(if fail_on_regression && c.regressions() > 0 {
        ExitCode::from(4)
    } else {
        ExitCode::SUCCESS
    })
}

fn history(a: HistoryArgs) -> Result<ExitCode> {
    check_min_effect(a.min_effect)?;
    if !(a.max_p > 0.0 && a.max_p <= 1.0) {
        anyhow::bail!("--max-p {}: a p-value in (0, 1], such as 0.01", a.max_p);
    }
    if a.min_size == 0 {
        anyhow::bail!("--min-size 0: a segment has at least one run");
    }
    let defs = figures::def::load_all(&figure_defs(a.figures))?;
    let dirs = figures::history::run_dirs(&a.runs)?;
    let cfg = figures::changepoint::Config {
        max_p: a.max_p,
        min_effect: a.min_effect / 100.0,
        min_size: a.min_size,
    };
    let h = figures::history::history(&dirs, &defs, &cfg)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&h)?);
    } else {
        out!("{}", figures::history::render(&h));
    }
    if !a.fail_on_change {
        return Ok(ExitCode::SUCCESS);
    }
    let outcome = h.outcome();
    // On stderr with --json, whose stdout is the JSON alone.
    let line = format!("history gate: {}", outcome.label());
    if a.json {
        eprintln!("{line}");
    } else {
        outln!("{line}");
    }
    Ok(ExitCode::from(outcome.code()))
}

fn list(dir: PathBuf) -> Result<ExitCode> {
    let dir = if dir.is_relative() && !dir.exists() {
        paths::repo_root().join(&dir)
    } else {
        dir
    };
    out!("{}", show::list_specs(&dir));
    Ok(ExitCode::SUCCESS)
}

fn upgrade(runs: &[PathBuf]) -> Result<ExitCode> {
    use testbed::recording::results::upgrade::{Outcome, upgrade};
    for run in runs {
        match upgrade(run)? {
            Outcome::AlreadyTidy => outln!("{}: already in the tidy layout", run.display()),
            Outcome::Upgraded {
                raw_rows,
                summary_rows,
            } => outln!(
                "{}: {raw_rows} raw rows, {summary_rows} summary rows (old files in legacy/)",
                run.display()
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn image_command(command: ImageCommand) -> Result<ExitCode> {
    out!(
        "{}",
        match command {
            ImageCommand::Build { name } => testbed::inputs::image::cli::build(&name)?,
            ImageCommand::List => testbed::inputs::image::cli::list()?,
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn passthrough_restore(pci: Option<&str>, force: bool) -> Result<ExitCode> {
    let r = testbed::execution::devices::passthrough::restore_from_state(
        &testbed::execution::devices::Host::real(),
        &mut testbed::execution::devices::sysfs::RealKernel,
        &testbed::execution::devices::state::dir(&paths::cache_root()),
        pci,
        force,
    );
    for l in &r.lines {
        outln!("{l}");
    }
    Ok(exit_failure_if(r.failed))
}

fn figure_defs(dir: Option<PathBuf>) -> PathBuf {
    dir.unwrap_or_else(figures::def::default_dir)
}

fn report_unknown(unknown: &[String]) {
    if !unknown.is_empty() {
        eprintln!(
            "note: the spec lists figures without a definition in experiments/figures/: {}",
            unknown.join(", ")
        );
    }
}

/// `testbed doctor --need STEP…`: the tools of those steps, and a verdict.
fn preflight(need: &[String]) -> Result<ExitCode> {
    let all = need.iter().any(|n| n == "all");
    let needs: Vec<&str> = if all {
        testbed::host::hosttools::NEEDS.to_vec()
    } else {
        need.iter().map(String::as_str).collect()
    };
    if let Some(bad) = needs
        .iter()
        .find(|n| !testbed::host::hosttools::NEEDS.contains(n))
    {
        anyhow::bail!(
            "unknown step `{bad}` for --need (known: all, {})",
            testbed::host::hosttools::NEEDS.join(", ")
        );
    }
    out!("{}", doctor::render(&doctor::tool_findings(&needs)));
    match testbed::host::hosttools::preflight(&needs) {
        Ok(()) => {
            outln!("preflight: every tool for {} is present", needs.join(", "));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            outln!("preflight: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn reproduce(target: Option<String>, quick: bool, accel: Option<AccelChoice>) -> Result<ExitCode> {
    let mut opts = testbed::reporting::reproduce::Options::defaults(target, quick);
    opts.accel = accel;
    let mut progress = progress::for_terminal();
    let summary = testbed::reporting::reproduce::reproduce(&opts, progress.as_mut());
    drop(progress);
    let summary = summary?;
    for o in &summary.outcomes {
        match (&o.run, &o.error) {
            // The run's own wall time (when it ran, if reused): what a
            // spec costs of the runs phase's budget.
            (Some(r), _) => outln!(
                "{:<48} {} ({:?}, {} figures, {})",
                o.spec,
                r.figures.run.dir.display(),
                r.figures.run.manifest.status,
                r.figures.figures.len(),
                r.figures
                    .run
                    .manifest
                    .wall_s
                    .map_or_else(|| "wall time not recorded".into(), |s| format!("{s:.0} s")),
            ),
            (None, e) => outln!("{:<48} NOT RUN: {}", o.spec, e.as_deref().unwrap_or("?")),
        }
    }
    let rows: Vec<(&str, &figures::ClaimResult)> = summary
        .claims
        .iter()
        .map(|j| (j.experiment.as_str(), &j.claim))
        .collect();
    out!("{}", figures::claims::table(&rows));
    outln!("report: {}", summary.report.display());
    // Under ./x the whole invocation's table is printed there instead.
    if std::env::var_os("TESTBED_PHASES").is_none() {
        outln!(
            "time by phase: {}",
            testbed::host::phases::render(&testbed::host::phases::totals())
        );
    }
    let failed = summary.outcomes.iter().any(|o| o.run.is_none());
    Ok(if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn cache_command(command: CacheCommand) -> Result<ExitCode> {
    use testbed::inputs::caches;
    let root = paths::cache_root();
    let age = |t: std::time::SystemTime| {
        let secs = std::time::SystemTime::now()
            .duration_since(t)
            .unwrap_or_default()
            .as_secs();
        match secs {
            s if s < 3600 => format!("{} min ago", s / 60),
            s if s < 2 * 86_400 => format!("{} h ago", s / 3600),
            s => format!("{} d ago", s / 86_400),
        }
    };
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    match command {
        CacheCommand::List { results } => {
            let entries = caches::list(&root)?;
            let used = runs_by_entry(&root, &results);
            let total: u64 = entries.iter().map(|e| e.bytes).sum();
            outln!(
                "{} ({} in {} entries)",
                root.display(),
                mib(total),
                entries.len()
            );
            for e in &entries {
                let id = if e.name.is_empty() {
                    e.area.to_string()
                } else {
                    format!("{}/{}", e.area, e.name)
                };
                let runs = used.get(&(e.area.to_string(), e.name.clone())).map_or(
                    "no run in ".to_string() + &results.display().to_string(),
                    |r| format!("{} run(s): {}", r.len(), r.join(", ")),
                );
                outln!(
                    "  {id:<40.40} {:>12}  used {:<12} {}; {}{}",
                    mib(e.bytes),
                    age(e.last_used),
                    e.what,
                    runs,
                    if e.lock.is_none() {
                        " (never pruned)"
                    } else {
                        ""
                    }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CacheCommand::Prune {
            max_size,
            older_than,
        } => {
            if max_size.is_none() && older_than.is_none() {
                anyhow::bail!("cache prune: say --max-size SIZE, --older-than AGE, or both");
            }
            let policy = caches::Policy {
                max_bytes: max_size
                    .map(|s| testbed::host::units::parse_size(&s).map(|v| v.bytes()))
                    .transpose()
                    .context("--max-size")?,
                older_than: older_than
                    .map(|s| parse_age(&s))
                    .transpose()
                    .context("--older-than")?,
            };
            let done = caches::prune(&root, policy, std::time::SystemTime::now())?;
            for e in &done.removed {
                outln!(
                    "removed {}/{} ({}, {}, used {})",
                    e.area,
                    e.name,
                    e.what,
                    mib(e.bytes),
                    age(e.last_used)
                );
            }
            for (e, who) in &done.busy {
                outln!(
                    "kept    {}/{} ({}): in use by {who}",
                    e.area,
                    e.name,
                    e.what
                );
            }
            outln!("{} now holds {}", root.display(), mib(done.bytes_after));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// "30d", "12h" or any duration the specs take ("90m", "3600").
fn parse_age(text: &str) -> Result<std::time::Duration> {
    if let Some(days) = text.strip_suffix('d') {
        let days: f64 = days.parse().with_context(|| format!("{text:?}: days"))?;
        return Ok(std::time::Duration::from_secs_f64(days * 86_400.0));
    }
    Ok(testbed::host::units::parse_duration(text)?)
}

/// The runs under `results` whose inputs came from each cache entry.
fn runs_by_entry(
    root: &Path,
    results: &Path,
) -> std::collections::BTreeMap<(String, String), Vec<String>> {
    let mut out: std::collections::BTreeMap<(String, String), Vec<String>> = Default::default();
    let mut stack = vec![results.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in read.flatten() {
            let path = e.path();
            if !path.is_dir() {
                continue;
            }
            let Ok(m) = testbed::recording::results::manifest::read(&path.join("manifest.json"))
            else {
                stack.push(path);
                continue;
            };
            let paths = m.inputs.paths();
            let run = format!("{}/{}", m.experiment, m.run_id);
            for p in paths {
                if let Some((area, name, _)) = testbed::inputs::caches::entry_of(root, &p) {
                    let runs = out.entry((area.to_string(), name.clone())).or_default();
                    if !runs.contains(&run) {
                        runs.push(run.clone());
                    }
                    // A kernel's build tree and BPF objects go with it.
                    if area == "kernels" {
                        for with in ["kernel-work", "bpf"] {
                            let runs = out.entry((with.to_string(), name.clone())).or_default();
                            if !runs.contains(&run) {
                                runs.push(run.clone());
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

fn kernel_command(command: KernelCommand) -> Result<ExitCode> {
    let configs = paths::kernel_configs();
    let cache = paths::cache_root();
    let say = |s: &str| eprintln!("[testbed] kernel: {s}");
    match command {
        KernelCommand::Build { name } | KernelCommand::Fetch { name } => {
            let k = kernel::resolve(&configs, &name, &cache, &say)
                .with_context(|| format!("kernel {name}"))?;
            outln!(
                "{} {} {}\n  bzImage {}",
                k.name,
                k.release,
                k.description,
                k.bzimage.display()
            );
            outln!("  key {}", k.key);
        }
        KernelCommand::List => {
            outln!("descriptors in {}:", configs.display());
            for d in kernel::list_descriptors(&configs)? {
                let cached = kernel::lookup_cached(&configs, &d, &cache)?;
                match cached {
                    Some(k) => outln!(
                        "  {d:<16} cached: {} [{}] key {}",
                        k.description,
                        k.release,
                        &k.key[..12.min(k.key.len())]
                    ),
                    None => outln!("  {d:<16} not built"),
                }
            }
        }
        KernelCommand::Show { name } => match kernel::lookup_cached(&configs, &name, &cache)? {
            Some(k) => {
                outln!("name        {}", k.name);
                outln!("description {}", k.description);
                outln!("release     {}", k.release);
                outln!("key         {}", k.key);
                outln!("bzImage     {}", k.bzimage.display());
                outln!("config      {}", k.config_sha256.as_deref().unwrap_or("-"));
                outln!(
                    "patches     {}",
                    if k.patches.is_empty() {
                        "-".to_string()
                    } else {
                        k.patches.join(", ")
                    }
                );
            }
            None => anyhow::bail!("kernel {name} is not in the cache: testbed kernel build {name}"),
        },
    }
    Ok(ExitCode::SUCCESS)
}
