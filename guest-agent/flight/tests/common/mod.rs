//! What the tests that run the ODBC clients need: the `testbed-odbc`
//! binary (guest-agent/odbc, linked dynamically against unixODBC, so it
//! is no part of this crate's build). `./x test` builds it into the
//! target dir; a plain `cargo test` in a fresh clone has not, so
//! [`odbc_binary`] builds it itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The marker beside a `testbed-odbc` this helper put in the target dir:
/// such a copy is built again (a no-op when its sources did not change)
/// rather than trusted as `./x` would have left it.
const MARKER: &str = "testbed-odbc.built-by-tests";

/// The `testbed-odbc` the clients will run, built first when there is
/// none: `$TESTBED_ODBC_BIN` when set; else the one the library finds
/// (beside the test binaries, or in the host release dir); else
/// `cargo build -p testbed-odbc` into a target dir of its own (under this
/// test's target dir, so it never waits on the lock of the build that
/// runs this test), copied to where the library looks first. Panics
/// naming the command and the packages it needs when the build fails.
pub fn odbc_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(find_or_build).clone()
}

fn find_or_build() -> PathBuf {
    if let Some(p) = std::env::var_os("TESTBED_ODBC_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "$TESTBED_ODBC_BIN={} is not a file",
            p.display()
        );
        return p;
    }
    let profile_dir = profile_dir();
    let found = testbed_flight::query::odbc::binary();
    let ours = found.parent() == Some(profile_dir.as_path()) && profile_dir.join(MARKER).is_file();
    if found.is_absolute() && found.is_file() && !ours {
        return found;
    }
    build_into(&profile_dir)
}

/// target/<profile>: where this test binary's `deps` directory is.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe
        .parent()
        .expect("the test binary's directory")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// Builds testbed-odbc into `<profile_dir>/testbed-odbc-build` and
/// places it at `<profile_dir>/testbed-odbc` with the marker.
fn build_into(profile_dir: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target_dir = profile_dir.join("testbed-odbc-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "building testbed-odbc for the ODBC clients (into {})",
        target_dir.display()
    );
    let status = Command::new(&cargo)
        .current_dir(&workspace)
        .args(["build", "--locked", "-p", "testbed-odbc", "--target-dir"])
        .arg(&target_dir)
        // The outer build's settings (a rustc wrapper, its target dir)
        // are not this build's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&cargo).display()));
    assert!(
        status.success(),
        "cargo build -p testbed-odbc --target-dir {} failed ({status}): it links \
         unixODBC (apt-get install -y unixodbc unixodbc-dev)",
        target_dir.display()
    );
    let built = target_dir.join("debug/testbed-odbc");
    assert!(built.is_file(), "{} was not built", built.display());
    let dest = profile_dir.join("testbed-odbc");
    let fresh = std::fs::read(&built).ok() != std::fs::read(&dest).ok();
    if fresh {
        // Renamed into place: a client never runs a half-written copy.
        let tmp = profile_dir.join(format!("testbed-odbc.tmp{}", std::process::id()));
        std::fs::copy(&built, &tmp).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
        std::fs::rename(&tmp, &dest).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
    }
    std::fs::write(profile_dir.join(MARKER), "").expect("the marker beside testbed-odbc");
    assert_eq!(
        testbed_flight::query::odbc::binary(),
        dest,
        "the library does not find the testbed-odbc just built"
    );
    dest
}
