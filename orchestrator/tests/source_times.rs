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

const PLAIN: &str = "pub fn f() -> u32 { 1 }\n";

/// A workspace of independent crates (name, lib.rs), committed.
fn origin(dir: &Path, crates: &[(&str, &str)]) {
    let members: Vec<String> = crates.iter().map(|(n, _)| format!("{n:?}")).collect();
    write(
        &dir.join("Cargo.toml"),
        &format!(
            "[workspace]\nmembers = [{}]\nresolver = \"2\"\n",
            members.join(", ")
        ),
    );
    for (name, lib) in crates {
        write(
            &dir.join(name).join("Cargo.toml"),
            &format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        );
        write(&dir.join(name).join("src/lib.rs"), lib);
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

/// cargo build in `dir`: which of the crates it compiled, by name.
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
    ["one", "two", "baked"]
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
    origin(&repo, &[("one", PLAIN), ("two", PLAIN)]);
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
    assert_eq!(
        build(&checkout("plain"), &target),
        ["one", "two"],
        "plain cargo in a fresh clone"
    );
    // That build is not in the record: what it read is compiled again.
    let b = checkout("b");
    let said = times("restore", &b, &target);
    assert!(said.contains("2 read by a build ./x did not see"), "{said}");
    assert_eq!(
        build(&b, &target),
        ["one", "two"],
        "read by an unseen build"
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

    // A long-lived checkout where `one` is edited and built by plain cargo
    // (a developer's `cargo test`): the next fresh clone compiles `one`
    // again, from its own content, and `two` not at all.
    let g = checkout("g");
    assert!(x_build(&g, &target).is_empty(), "same commit");
    write(&g.join("one/src/lib.rs"), "pub fn f() -> u32 { 3 }\n");
    assert_eq!(build(&g, &target), ["one"], "the developer's build");
    assert_eq!(x_build(&checkout("h"), &target), ["one"], "after it");
}

#[test]
fn a_crate_that_compiles_its_checkouts_path_in_is_rebuilt_in_another_checkout() {
    // `baked` is what the testbed and its tests are: env!("CARGO_MANIFEST_DIR")
    // finds the tree. Reused from another checkout, it would read that one.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (repo, target) = (tmp.path().join("origin"), tmp.path().join("target"));
    let baked = "pub fn tree() -> &'static str { env!(\"CARGO_MANIFEST_DIR\") }\n";
    origin(&repo, &[("one", PLAIN), ("baked", baked)]);
    let checkout = |name: &str| {
        let dir = tmp.path().join(name);
        clone(&repo, &dir);
        dir
    };
    assert_eq!(x_build(&checkout("a"), &target), ["one", "baked"], "first");
    let b = checkout("b");
    let said = times("restore", &b, &target);
    assert!(
        said.contains("1 by one with another checkout's path compiled in"),
        "{said}"
    );
    assert_eq!(build(&b, &target), ["baked"], "in another checkout");
    times("record", &b, &target);
    assert!(
        x_build(&b, &target).is_empty(),
        "again in the same checkout"
    );
}
