//! `.config/source_times.py`, which `./x` runs before its builds: in a
//! fresh clone cargo rebuilds only the crates whose files changed, and never
//! takes a changed file, or a record another build made stale, for fresh.
//! Real cargo builds of a two-crate workspace in a temporary directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.config/source_times.py")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn git(dir: &Path, args: &[&str]) -> String {
    run(Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args))
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

/// A workspace of two independent crates, committed.
fn origin(dir: &Path) {
    write(
        &dir.join("Cargo.toml"),
        "[workspace]\nmembers = [\"one\", \"two\"]\nresolver = \"2\"\n",
    );
    for name in ["one", "two"] {
        write(
            &dir.join(name).join("Cargo.toml"),
            &format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        );
        write(
            &dir.join(name).join("src/lib.rs"),
            "pub fn f() -> u32 { 1 }\n",
        );
    }
    run(Command::new("git").arg("init").arg("-q").arg(dir));
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "origin"]);
}

fn clone(from: &Path, to: &Path) {
    run(Command::new("git").args(["clone", "-q"]).arg(from).arg(to));
}

fn times(action: &str, root: &Path, target: &Path) -> String {
    let mut cmd = Command::new("python3");
    cmd.arg(script()).arg(action).arg("--target").arg(target);
    if action == "restore" {
        cmd.arg("--root").arg(root);
    }
    run(&mut cmd)
}

/// cargo build in `dir`: which of the two crates it compiled.
fn build(dir: &Path, target: &Path) -> Vec<&'static str> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let text = run(Command::new(cargo)
        .current_dir(dir)
        .args(["build", "--offline", "-v"])
        .env("CARGO_TARGET_DIR", target)
        // ./x test's lint wrapper and flags are not this workspace's.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET"));
    ["one", "two"]
        .into_iter()
        .filter(|name| text.contains(&format!("Compiling {name} v0.1.0")))
        .collect()
}

/// What `./x build` does: set the times, build, keep the record.
fn x_build(dir: &Path, target: &Path) -> Vec<&'static str> {
    times("restore", dir, target);
    let compiled = build(dir, target);
    times("record", dir, target);
    compiled
}

#[test]
fn a_fresh_clone_rebuilds_only_what_changed_and_never_takes_a_change_for_fresh() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (repo, target) = (tmp.path().join("origin"), tmp.path().join("target"));
    origin(&repo);
    let checkout = |name: &str| {
        let dir = tmp.path().join(name);
        clone(&repo, &dir);
        dir
    };

    assert_eq!(
        x_build(&checkout("a"), &target),
        ["one", "two"],
        "first build"
    );
    // Without the record a fresh clone compiles both again (its files are
    // newer than every artifact): what each CI run used to pay.
    let plain = checkout("plain");
    assert_eq!(
        build(&plain, &target),
        ["one", "two"],
        "plain cargo in a fresh clone"
    );
    // That plain build is not in the record, so the record is not used:
    // the files keep their own times, newer than every artifact (cargo's
    // rule), and what this build sees is recorded instead.
    let b = checkout("b");
    let said = times("restore", &b, &target);
    assert!(said.contains("something other than ./x built"), "{said}");
    assert_eq!(
        build(&b, &target),
        ["one", "two"],
        "files keep their own times"
    );
    times("record", &b, &target);

    // A fresh clone of the same commit compiles nothing.
    let c = checkout("c");
    assert!(x_build(&c, &target).is_empty(), "same commit, fresh clone");

    // A clone where `two` changed compiles `two` alone.
    let d = checkout("d");
    write(&d.join("two/src/lib.rs"), "pub fn f() -> u32 { 2 }\n");
    assert_eq!(x_build(&d, &target), ["two"], "one crate changed");

    // Back to the original `two`: the artifacts are d's, so it is compiled
    // again even though the original content was built before.
    let e = checkout("e");
    assert_eq!(x_build(&e, &target), ["two"], "changed back");
    // And again unchanged: nothing.
    assert!(
        x_build(&checkout("f"), &target).is_empty(),
        "unchanged again"
    );
}
