//! `./x setup` on a machine that has nothing yet: a fresh, minimal Debian 12
//! root (mmdebstrap, variant minbase) gets a copy of `x`,
//! orchestrator/host-tools.txt and the testbed binary, runs `/testbed/x
//! setup` as a new user would, and then `testbed doctor --need all` must
//! find every tool the table lists.
//!
//! Why: a tool that this machine happens to have installed (rsync, which the
//! kernel's `headers_install` needs, was once such a tool) passes every other
//! test here and still fails on a fresh machine, because nothing installs
//! it. This test sees only what `x setup` installs, so a tool missing from
//! the table, a wrong package name, or a package that does not provide the
//! tool shows up as a `preflight: missing for ...` line.
//!
//! The root uses the same Debian mirror, apt proxy settings, local CA
//! certificates and pip configuration as this machine: those are how this
//! machine reaches its package registries, not tools. The environment inside
//! is clean (standard PATH, HOME=/root, LANG, proxy variables).
//!
//! Slow (ignored; `./x test` runs it): the root and the packages are about
//! 1.5 GB and take several minutes; needs root. A pass is remembered in
//! `$TESTBED_CACHE/fresh-root/<key>.pass`, keyed by the sha256 of `x` and of
//! host-tools.txt, so the check reruns only when either changes, or with
//! `TESTBED_FRESH_ROOT=always`. The mmdebstrap log is kept next to it
//! (`<key>.log`).
//!
//! `cargo test -p testbed --test fresh_root -- --ignored --nocapture`

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

/// The release the root is built from: the one the testbed supports.
const SUITE: &str = "bookworm";

/// A PATH as a fresh root user's shell has it.
const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Proxy variables passed on into the root (pip and apt honour them).
const PROXY_VARS: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// mmdebstrap's customize hook: runs on the host with the new root as `$1`,
/// with /proc, /sys and /dev mounted in it and daemons disabled
/// (policy-rc.d). Records the exit codes in `$FRESH_OUT` and always exits 0
/// once the files are in place, so that mmdebstrap unmounts and deletes the
/// root either way.
const HOOK: &str = r#"#!/bin/sh
set -eu
root=$1
mkdir -p "$root/testbed/orchestrator"
install -m 755 "$FRESH_X" "$root/testbed/x"
install -m 644 "$FRESH_TABLE" "$root/testbed/orchestrator/host-tools.txt"
install -m 755 "$FRESH_TESTBED" "$root/usr/local/bin/testbed"
# This machine's way to its registries (not tools): local CAs, which the
# ca-certificates package adds to the store when x setup installs it, and
# pip's configuration.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
if [ -f /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; fi
set +e
echo "[fresh-root] /testbed/x setup"
chroot "$root" /testbed/x setup
echo $? >"$FRESH_OUT/setup.rc"
echo "[fresh-root] testbed doctor --need all"
chroot "$root" testbed doctor --need all >"$FRESH_OUT/doctor.txt" 2>&1
echo $? >"$FRESH_OUT/doctor.rc"
cat "$FRESH_OUT/doctor.txt"
exit 0
"#;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("orchestrator/ has a parent")
        .to_path_buf()
}

/// The verdict's key: sha256 over `x`, then host-tools.txt.
fn verdict_key(x: &[u8], table: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(x);
    h.update(table);
    hex::encode(h.finalize())
}

fn forced() -> bool {
    std::env::var("TESTBED_FRESH_ROOT").is_ok_and(|v| v == "always")
}

fn on_path(cmd: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(CLEAN_PATH.split(':'))
        .any(|d| Path::new(d).join(cmd).is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn ensure_mmdebstrap() {
    if on_path("mmdebstrap") {
        return;
    }
    eprintln!("installing mmdebstrap (apt-get install -y mmdebstrap)");
    let ok = Command::new("apt-get")
        .args(["install", "-y", "-q", "mmdebstrap"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "could not install mmdebstrap: apt-get install -y mmdebstrap failed"
    );
}

/// A Debian source of this machine's apt, as one `deb` line.
#[derive(Debug, PartialEq)]
struct Source {
    uri: String,
    suite: String,
    components: Vec<String>,
}

impl Source {
    fn line(&self) -> String {
        format!(
            "deb {} {} {}",
            self.uri,
            self.suite,
            self.components.join(" ")
        )
    }
}

/// Debian's own archive, for our release: a `deb` entry for a `bookworm*`
/// suite, signed by Debian's archive keys (no Signed-By, or a
/// debian-archive keyring). Third-party repositories have their own keyring.
fn is_debian_archive(kind: &str, suite: &str, signed_by: Option<&str>) -> bool {
    kind == "deb"
        && suite.starts_with(SUITE)
        && signed_by.is_none_or(|k| k.contains("debian-archive"))
}

/// Entries of a one-line-style sources.list.
fn one_line_sources(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(kind) = words.next() else { continue };
        let mut rest: Vec<&str> = words.collect();
        let mut signed_by = None;
        if rest.first().is_some_and(|w| w.starts_with('[')) {
            let end = rest.iter().position(|w| w.ends_with(']')).unwrap_or(0);
            let options: Vec<&str> = rest.drain(..=end).collect();
            let options = options.join(" ");
            signed_by = options
                .trim_matches(|c| c == '[' || c == ']')
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .map(str::to_string);
        }
        if let [uri, suite, components @ ..] = rest.as_slice()
            && is_debian_archive(kind, suite, signed_by.as_deref())
        {
            out.push(Source {
                uri: uri.to_string(),
                suite: suite.to_string(),
                components: components.iter().map(|c| c.to_string()).collect(),
            });
        }
    }
    out
}

/// Entries of a deb822-style .sources file.
fn deb822_sources(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n") {
        // Field name -> value, continuation lines (leading space) appended.
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in paragraph.lines().filter(|l| !l.starts_with('#')) {
            if line.starts_with([' ', '\t']) {
                if let Some((_, v)) = fields.last_mut() {
                    v.push('\n');
                    v.push_str(line.trim());
                }
            } else if let Some((k, v)) = line.split_once(':') {
                fields.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if field("enabled").is_some_and(|e| e.eq_ignore_ascii_case("no")) {
            continue;
        }
        let words = |name: &str| field(name).unwrap_or_default().split_whitespace();
        let components: Vec<String> = words("components").map(str::to_string).collect();
        for kind in words("types") {
            for uri in words("uris") {
                for suite in words("suites") {
                    if is_debian_archive(kind, suite, field("signed-by")) {
                        out.push(Source {
                            uri: uri.to_string(),
                            suite: suite.to_string(),
                            components: components.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The Debian sources this machine's apt uses (the files apt reads:
/// sources.list, sources.list.d/*.list and *.sources), or deb.debian.org's
/// when there are none.
fn host_debian_sources() -> Vec<String> {
    let mut sources = Vec::new();
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        sources.extend(one_line_sources(&text));
    }
    let mut files: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let text = fs::read_to_string(&f).unwrap_or_default();
        match f.extension().and_then(|e| e.to_str()) {
            Some("list") => sources.extend(one_line_sources(&text)),
            Some("sources") => sources.extend(deb822_sources(&text)),
            _ => {}
        }
    }
    if sources.is_empty() {
        return vec![
            format!("deb http://deb.debian.org/debian {SUITE} main"),
            format!("deb http://deb.debian.org/debian {SUITE}-updates main"),
            format!("deb http://deb.debian.org/debian-security {SUITE}-security main"),
        ];
    }
    let mut lines: Vec<String> = Vec::new();
    for line in sources.iter().map(Source::line) {
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    lines
}

/// This machine's apt settings for reaching its mirror (proxies, and the
/// Release-date checks a snapshot mirror needs off), as `--aptopt` values.
fn host_apt_options() -> Vec<String> {
    let dump = Command::new("apt-config")
        .arg("dump")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    dump.lines()
        .filter(|l| {
            let key = l.split_whitespace().next().unwrap_or_default();
            ["http", "https", "ftp", "socks"]
                .iter()
                .any(|p| key.starts_with(&format!("Acquire::{p}::Proxy")))
                || key == "Acquire::Check-Valid-Until"
                || key == "Acquire::Check-Date"
        })
        .map(str::to_string)
        .collect()
}

/// Mount points at or below `dir` (left behind if mmdebstrap died before
/// unmounting): deleting through them would delete the host's /dev or /proc.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .map(str::to_string)
        .collect()
}

/// What happened in the fresh root.
struct Outcome {
    /// mmdebstrap's own exit status.
    mmdebstrap_ok: bool,
    /// Exit code of `/testbed/x setup`, if it ran.
    setup_rc: Option<i32>,
    /// Exit code of `testbed doctor --need all`, if it ran.
    doctor_rc: Option<i32>,
    doctor: String,
    log: PathBuf,
}

fn read_rc(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Builds the root under /var/tmp, runs the hook in it with `x` and
/// `table` (the bytes the verdict's key was computed from, so an edit to
/// the tree meanwhile cannot slip in), and deletes the root (mmdebstrap's
/// null format: it creates and removes the root in $TMPDIR).
fn check_in_fresh_root(x: &[u8], table: &[u8], log: PathBuf) -> Outcome {
    let tmp = tempfile::Builder::new()
        .prefix("testbed-fresh-root-")
        .tempdir_in("/var/tmp")
        .expect("temp dir under /var/tmp");
    let out = tmp.path().join("out");
    let work = tmp.path().join("root");
    fs::create_dir_all(&out).unwrap();
    fs::create_dir_all(&work).unwrap();
    let (x_copy, table_copy) = (tmp.path().join("x"), tmp.path().join("host-tools.txt"));
    fs::write(&x_copy, x).unwrap();
    fs::write(&table_copy, table).unwrap();
    let hook = tmp.path().join("customize-hook.sh");
    fs::write(&hook, HOOK).unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();

    let sources = host_debian_sources();
    let aptopts = host_apt_options();
    eprintln!("sources: {sources:#?}\napt options: {aptopts:#?}");

    let mut cmd = Command::new("mmdebstrap");
    cmd.args(["--mode=root", "--variant=minbase", "--format=null"]);
    for o in &aptopts {
        cmd.arg(format!("--aptopt={o}"));
    }
    if sources.iter().any(|s| s.contains("https://")) {
        cmd.arg("--include=ca-certificates");
    }
    cmd.arg(format!("--customize-hook={}", hook.display()))
        .args([SUITE, "/dev/null"])
        .args(&sources);
    // A clean environment: mmdebstrap's hooks, and so the root, inherit it.
    cmd.env_clear()
        .env("PATH", CLEAN_PATH)
        .env("HOME", "/root")
        .env("LANG", "C.UTF-8")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("TMPDIR", &work)
        .env("FRESH_X", &x_copy)
        .env("FRESH_TABLE", &table_copy)
        .env("FRESH_TESTBED", env!("CARGO_BIN_EXE_testbed"))
        .env("FRESH_OUT", &out);
    for var in PROXY_VARS {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    let log_file = fs::File::create(&log).expect("mmdebstrap log file");
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file);
    eprintln!("building a fresh {SUITE} root (log: {})", log.display());
    let mmdebstrap_ok = cmd.status().expect("run mmdebstrap").success();

    let outcome = Outcome {
        mmdebstrap_ok,
        setup_rc: read_rc(&out.join("setup.rc")),
        doctor_rc: read_rc(&out.join("doctor.rc")),
        doctor: fs::read_to_string(out.join("doctor.txt")).unwrap_or_default(),
        log,
    };
    let left = mounts_under(tmp.path());
    if !left.is_empty() {
        let kept = tmp.keep();
        eprintln!(
            "NOT deleting {}: still mounted there: {left:?}",
            kept.display()
        );
    }
    outcome
}

fn log_tail(log: &Path, n: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
#[ignore = "builds a Debian 12 root and installs every host package in it (~1.5 GB, minutes)"]
fn a_fresh_debian_root_gets_every_tool_from_x_setup() {
    let repo = repo_root();
    let x = fs::read(repo.join("x")).expect("read x");
    let table = fs::read(repo.join("orchestrator/host-tools.txt")).expect("read host-tools.txt");
    let key = verdict_key(&x, &table);
    let verdicts = testbed::host::paths::cache_root().join("fresh-root");
    let pass = verdicts.join(format!("{key}.pass"));
    if pass.is_file() && !forced() {
        eprintln!(
            "fresh-root check passed earlier for this exact tool table and x (key {key}); \
             set TESTBED_FRESH_ROOT=always to redo it"
        );
        return;
    }
    assert!(is_root(), "needs root: mmdebstrap --mode=root and chroot");
    ensure_mmdebstrap();
    fs::create_dir_all(&verdicts).unwrap();

    let started = Instant::now();
    let o = check_in_fresh_root(&x, &table, verdicts.join(format!("{key}.log")));
    eprintln!("fresh root check took {:.0?}", started.elapsed());

    let preflight: Vec<&str> = o
        .doctor
        .lines()
        .filter(|l| l.starts_with("preflight:"))
        .collect();
    let ok = o.mmdebstrap_ok && o.setup_rc == Some(0) && o.doctor_rc == Some(0);
    if !ok {
        panic!(
            "in a fresh {SUITE} root:\n{}\nx setup exit: {:?}, doctor exit: {:?}, \
             mmdebstrap ok: {}\n--- testbed doctor --need all ---\n{}\n\
             --- last lines of {} ---\n{}",
            if preflight.is_empty() {
                "(no preflight line: doctor did not run or did not finish)".to_string()
            } else {
                preflight.join("\n")
            },
            o.setup_rc,
            o.doctor_rc,
            o.mmdebstrap_ok,
            o.doctor,
            o.log.display(),
            log_tail(&o.log, 60),
        );
    }
    eprintln!(
        "--- testbed doctor --need all (fresh root) ---\n{}",
        o.doctor
    );
    let mut f = fs::File::create(&pass).unwrap();
    f.write_all(o.doctor.as_bytes()).unwrap();
}

#[test]
fn sources_are_read_from_both_formats() {
    let deb822 = "Types: deb\n# comment\nURIs: http://deb.debian.org/debian\n\
                  Suites: bookworm bookworm-updates\nComponents: main\n\
                  Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                  Types: deb\nURIs: https://download.docker.com/linux/debian\n\
                  Suites: bookworm\nComponents: stable\nSigned-By: /etc/apt/keyrings/docker.asc\n";
    let lines: Vec<String> = deb822_sources(deb822).iter().map(Source::line).collect();
    assert_eq!(
        lines,
        [
            "deb http://deb.debian.org/debian bookworm main",
            "deb http://deb.debian.org/debian bookworm-updates main"
        ]
    );
    let list = "# x\ndeb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                http://ftp.de.debian.org/debian bookworm main contrib\n\
                deb-src http://deb.debian.org/debian bookworm main\n\
                deb http://deb.debian.org/debian trixie main\n";
    let lines: Vec<String> = one_line_sources(list).iter().map(Source::line).collect();
    assert_eq!(
        lines,
        ["deb http://ftp.de.debian.org/debian bookworm main contrib"]
    );
}
