//! `testbed run SPEC`: validate, prepare inputs (kernel, image, devices,
//! accelerator), run every point through an executor, and leave a run
//! directory with raw samples and a manifest.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::paths;
use crate::plan::Plan;
use crate::progress::Progress;
use crate::results::manifest::{self, Manifest};
use crate::spec::{AccelChoice, ExecutorKind, LoadedSpec};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub accel: Option<AccelChoice>,
    /// The run directory itself (default results/<experiment>/<run-id>).
    pub out: Option<PathBuf>,
    pub resume: bool,
    pub fail_fast: bool,
    pub results_root: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    #[error("{0}")]
    Setup(String),
    #[error("interrupted; finished points are kept in {0} (continue with --resume --out {0})")]
    Interrupted(String),
}

fn setup<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::Setup(format!("{context}: {e}"))
}

#[derive(Debug)]
pub struct RunResult {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

mod boots;
mod inputs;
mod start;
mod vm;

pub use vm::probe_boot;

/// Parses, validates and plans a spec without running it.
pub fn check_spec(spec_path: &Path) -> Result<(LoadedSpec, Plan), RunError> {
    let loaded = crate::spec::load(spec_path)?;
    let plan = crate::plan::plan(&loaded)?;
    Ok((loaded, plan))
}

pub fn run(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    crate::phases::time("runs", || run_timed(spec_path, opts, progress))
}

/// The host tools a spec's run needs, by executor and workload.
pub fn needs(spec: &crate::spec::Spec, plan: &Plan) -> Vec<&'static str> {
    let mut needs = Vec::new();
    if spec.experiment.executor == ExecutorKind::Qemu {
        needs.push("vm");
    }
    for p in &plan.points {
        for n in p.workload.needs().host_steps {
            if !needs.contains(&n) {
                needs.push(n);
            }
        }
    }
    needs
}

/// Why a spec cannot run in this invocation, known before anything is
/// created: a kernel it needs failed to build earlier.
pub fn blocked(loaded: &LoadedSpec) -> Option<String> {
    if loaded.spec.experiment.executor != ExecutorKind::Qemu {
        return None;
    }
    let name = &loaded.spec.kernel.name;
    crate::kernel::failed_earlier(&paths::kernel_configs(), name)
        .map(|r| format!("skipped: kernel `{name}` failed to build earlier in this run:\n{r}"))
}

/// The steps of a run, each in its own module: start the run directory
/// and manifest, prepare the inputs and the executor, run the boots, write
/// the tables.
fn run_timed(
    spec_path: &Path,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> Result<RunResult, RunError> {
    let started = Instant::now();
    let (loaded, plan) = check_spec(spec_path)?;
    let spec = &loaded.spec;
    // Missing tools are named now, before a run directory or a build.
    crate::hosttools::preflight(&needs(spec, &plan)).map_err(|e| RunError::Setup(e.to_string()))?;
    // The kernel too (fetched, built or found in the cache): a build that
    // fails leaves no run directory behind.
    let kernel = match spec.experiment.executor {
        ExecutorKind::Qemu => Some(vm::resolve_kernel(&loaded, &paths::cache_root())?),
        _ => None,
    };
    let (rd, mut m) = start::begin(&loaded, spec_path, opts)?;
    let mut executor = inputs::prepare(&loaded, &plan, kernel, &rd, &mut m, opts, progress)?;
    manifest::write(&rd.manifest(), &m).map_err(RunError::Setup)?;
    let ended = boots::run_boots(
        executor.as_mut(),
        &plan,
        &rd,
        &mut m,
        spec.vm.boot,
        opts,
        progress,
    );
    boots::finish(&rd, m, ended, started)
}
