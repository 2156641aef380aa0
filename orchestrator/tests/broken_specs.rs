//! The corpus of broken specs (tests/broken-specs/): each is refused
//! before boot by the loader and planner, with an error that names its
//! file and line and contains the fragment on its `# expect:` line.

use std::path::{Path, PathBuf};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken-specs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_broken_spec_is_refused_with_its_reason() {
    let files = corpus();
    assert!(files.len() >= 9, "{files:?}");
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line is not `# expect: ...`", path.display()));
        // As `testbed run` and `testbed validate` check a spec.
        let result = testbed::planning::spec::load(path)
            .and_then(|l| testbed::planning::plan::plan(&l).map(|_| ()));
        let name = path.display().to_string();
        match result {
            Ok(()) => failures.push(format!("{name}: accepted, expected {expect:?}")),
            Err(e) => {
                let msg = e.to_string();
                let located = e.line.is_some()
                    && msg.starts_with(&format!("{name}:{}:", e.line.unwrap_or(0)));
                if !located || !msg.contains(expect) {
                    failures.push(format!(
                        "{name}:\n  got      {msg}\n  expected {expect:?} with a line"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Mistakes in the TOML types of three sections of one file.
const TYPE_ERRORS: &str = r#"[experiment]
name = "multi"
seed = "seven"

[vm]
memroy = "1G"

[[devices]]
name = "data"
kind = "nvme"
size = "64M"

[[devices]]
name = "logs"
kind = "nvme"
size = "12QB"

[workload]
kind = "randread"
device = "data"
"#;

/// A file that type-checks, with mistakes in four sections.
const CHECK_ERRORS: &str = r#"[experiment]
name = ".hidden"

[vm]
vcpus = 0

[[devices]]
name = "data"
kind = "nvme"
size = "1000"

[workload]
kind = "randread"
device = "data"

[sweep]
threads = []
"#;

/// (file, line, field, fragment) of every error the two files hold.
const EXPECTED: [(&str, usize, &str, &str); 7] = [
    ("types.toml", 3, "experiment.seed", "invalid type"),
    ("types.toml", 6, "vm.memroy", "unknown field `memroy`"),
    ("types.toml", 16, "devices[1].size", "12QB"),
    ("checks.toml", 2, "experiment.name", "starts with '.'"),
    ("checks.toml", 5, "vm.vcpus", "must be between 1 and 64"),
    (
        "checks.toml",
        10,
        "devices[0].size",
        "multiple of the block size",
    ),
    ("checks.toml", 17, "sweep.threads", "an empty sweep axis"),
];

fn broken_pair(dir: &Path) -> (PathBuf, PathBuf) {
    let types = dir.join("types.toml");
    let checks = dir.join("checks.toml");
    std::fs::write(&types, TYPE_ERRORS).unwrap();
    std::fs::write(&checks, CHECK_ERRORS).unwrap();
    (types, checks)
}

#[test]
fn load_all_reports_every_section_error_with_line_and_field() {
    let t = tempfile::tempdir().unwrap();
    let (types, checks) = broken_pair(t.path());
    let mut errors = testbed::planning::spec::load_all(&types).unwrap_err();
    errors.extend(testbed::planning::spec::load_all(&checks).unwrap_err());
    for (file, line, field, fragment) in EXPECTED {
        assert!(
            errors.iter().any(|e| e.file.ends_with(file)
                && e.line == Some(line)
                && e.field.as_deref() == Some(field)
                && e.message.contains(fragment)),
            "{file}:{line} {field} ({fragment:?}) not among:\n{}",
            errors
                .iter()
                .map(|e| format!("  {e}\n"))
                .collect::<String>()
        );
    }
    assert_eq!(errors.len(), EXPECTED.len(), "{errors:#?}");
    // The one `load` (a run) stops at is among them.
    let first = testbed::planning::spec::load(&types).unwrap_err();
    assert!(errors.contains(&first), "{first}");
}

#[test]
fn validate_names_every_error_of_every_file_and_exits_1() {
    let t = tempfile::tempdir().unwrap();
    let (types, checks) = broken_pair(t.path());
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/smoke.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("validate")
        .args([&types, &good, &checks])
        .env("TESTBED_CACHE", t.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    for (file, line, field, fragment) in EXPECTED {
        let path = t.path().join(file);
        let prefix = format!("error: {}:{line}:", path.display());
        assert!(
            stderr.lines().any(|l| l.starts_with(&prefix)
                && l.contains(&format!(" {field}: "))
                && l.contains(fragment)),
            "no `{prefix} … {field}: …{fragment}…` in:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("7 error(s) in 2 of 3 spec file(s)"),
        "{stderr}"
    );
    // The good spec between them is still checked, and passes.
    assert!(stdout.contains("smoke.toml: ok"), "{stdout}");
}
