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
        let result = testbed::spec::load(path).and_then(|l| testbed::plan::plan(&l).map(|_| ()));
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
