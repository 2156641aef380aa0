//! Random-input testing of the spec loader and planner, on stable Rust
//! (arbtest + arbitrary; cargo-fuzz would need nightly). Two targets:
//! arbitrary bytes and TOML-ish token soup, and structured mutations of
//! every real spec in experiments/ and of the seeds in tests/corpus/spec/.
//! Each input goes through `spec::parse` and `plan::plan_on`; the property:
//! no panic, and every refusal is an error that names the file (and a line
//! inside the input, where the error has one).
//!
//! TESTBED_FUZZ_SECS is each target's time budget (default 2 s, so a plain `cargo test` stays quick; `./x test`: 20).
//! An input that panics is written to target/tmp/spec-fuzz-crash-*.toml
//! (one that takes longer than 20 s: spec-fuzz-slow-*.toml)
//! and arbtest prints its seed (ARBTEST_SEED=<seed> replays it); once
//! fixed, add the input to tests/corpus/spec/, which
//! `the_corpus_never_panics` replays on every run.

use std::collections::BTreeSet;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arbitrary::{Result as ArbResult, Unstructured};
use testbed::planning::plan::HostLimits;
use testbed::planning::spec::SpecError;

/// The name every in-memory input is parsed under.
const NAME: &str = "fuzz/spec.toml";

fn budget() -> Duration {
    let secs = std::env::var("TESTBED_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(2);
    Duration::from_secs(secs)
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fixed limits, so a failure replays the same on any host.
fn limits() -> HostLimits {
    HostLimits {
        mem_total: Some(24 << 30),
        figures_dir: manifest_dir().join("../experiments/figures"),
        cpus: Some(vec![0, 1]),
    }
}

/// Every `*.toml` under `dir`, recursively, sorted.
fn tomls(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            tomls(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
    out.sort();
}

/// The real specs (not the figure definitions) and the seed corpus.
fn seeds() -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    tomls(&manifest_dir().join("../experiments"), &mut paths);
    paths.retain(|p| !p.components().any(|c| c.as_os_str() == "figures"));
    let mut corpus = Vec::new();
    tomls(&manifest_dir().join("tests/corpus/spec"), &mut corpus);
    paths.extend(corpus);
    paths
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|s| (p, s)))
        .collect()
}

/// The property for one refusal of the input `source` read as `file`.
fn check_error(e: &SpecError, file: &Path, source: &str) {
    let text = e.to_string();
    let name = file.display().to_string();
    assert_eq!(e.file, file, "{text}");
    assert!(text.starts_with(&name), "the error names no file: {text}");
    assert!(!e.message.trim().is_empty(), "empty message: {text}");
    if let Some(line) = e.line {
        let lines = source.lines().count() + 1;
        assert!(
            (1..=lines).contains(&line),
            "line {line} outside the input ({lines} lines): {text}"
        );
        assert!(
            text.starts_with(&format!("{name}:{line}:")),
            "line not in the text: {text}"
        );
    }
}

thread_local! {
    /// Inputs of this thread's target: refused by the loader, refused by
    /// the planner, accepted (how deep the inputs reach).
    static OUTCOMES: std::cell::Cell<[u64; 3]> = const { std::cell::Cell::new([0; 3]) };
}

fn count(outcome: usize) {
    OUTCOMES.with(|o| {
        let mut v = o.get();
        v[outcome] += 1;
        o.set(v);
    });
}

/// Loads and plans `source` as the CLI would; a panic or a bad refusal
/// fails the test.
fn check(source: &str) {
    let path = Path::new(NAME);
    let loaded = match testbed::planning::spec::parse(path, source) {
        Ok(l) => l,
        Err(e) => {
            count(0);
            return check_error(&e, path, source);
        }
    };
    match testbed::planning::plan::plan_on(&loaded, &limits()) {
        Ok(_) => count(2),
        Err(e) => {
            count(1);
            check_error(&e, path, source);
        }
    }
}

/// Longest one input may take to load and plan: longer, and `testbed
/// validate` would look hung (a generous bound, not a speed target).
const SLOW: Duration = Duration::from_secs(20);

/// Saves `input` under target/tmp as spec-fuzz-`what`-<hash>.toml.
fn save_input(what: &str, input: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let file = dir.join(format!("spec-fuzz-{what}-{hash:016x}.toml"));
    if std::fs::write(&file, input).is_ok() {
        eprintln!("spec_fuzz: the {what} input is in {}", file.display());
    }
    file
}

/// The input each thread is checking and since when, for the watchdog.
static IN_FLIGHT: std::sync::Mutex<Vec<(std::thread::ThreadId, Instant, Vec<u8>)>> =
    std::sync::Mutex::new(Vec::new());

/// Once: a thread that saves any input in flight for longer than `SLOW`,
/// so an input that hangs the loader is on disk even if the test is
/// killed.
fn start_watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            let mut saved = BTreeSet::new();
            loop {
                std::thread::sleep(Duration::from_secs(2));
                let Ok(inputs) = IN_FLIGHT.lock() else { return };
                for (_, since, input) in inputs.iter() {
                    if since.elapsed() > SLOW && saved.insert(input.clone()) {
                        save_input("slow", input);
                    }
                }
            }
        });
    });
}

/// Runs `f` on `input`; on a panic, or when it takes longer than `SLOW`,
/// the input is saved for the report and the test fails.
fn guarded(input: &[u8], f: impl FnOnce()) {
    start_watchdog();
    let me = std::thread::current().id();
    let started = Instant::now();
    if let Ok(mut inputs) = IN_FLIGHT.lock() {
        inputs.retain(|(t, _, _)| *t != me);
        inputs.push((me, started, input.to_vec()));
    }
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    if let Ok(mut inputs) = IN_FLIGHT.lock() {
        inputs.retain(|(t, _, _)| *t != me);
    }
    if let Err(panic) = result {
        save_input("crash", input);
        std::panic::resume_unwind(panic);
    }
    let took = started.elapsed();
    if took > SLOW {
        let file = save_input("slow", input);
        panic!(
            "one input took {took:.1?} to load and plan (at most {SLOW:?}): {}",
            file.display()
        );
    }
}

/// Runs `property` for the budget and reports how many inputs it tried.
fn fuzz(target: &str, mut property: impl FnMut(&mut Unstructured<'_>) -> ArbResult<()>) {
    let inputs = AtomicU64::new(0);
    let started = Instant::now();
    arbtest::arbtest(|u| {
        inputs.fetch_add(1, Ordering::Relaxed);
        property(u)
    })
    .budget(budget())
    .run();
    let [loader, planner, accepted] = OUTCOMES.with(|o| o.get());
    eprintln!(
        "spec_fuzz: {target}: {} inputs in {:.1?}, no crash \
         (refused by the loader {loader}, by the planner {planner}, accepted {accepted})",
        inputs.load(Ordering::Relaxed),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// (a) arbitrary bytes and token soup

const TOKENS: &[&str] = &[
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    ",",
    ".",
    "\"",
    "'",
    "\"\"\"",
    "'''",
    "\n",
    " ",
    "#",
    "\\",
    "\\u0000",
    "experiment",
    "name",
    "vm",
    "memory",
    "devices",
    "workload",
    "kind",
    "sweep",
    "threads",
    "topology",
    "server",
    "figures",
    "size",
    "timeouts",
    "image",
    "include",
    "randread",
    "nvme",
    "pair",
    "\"64T\"",
    "\"..\"",
    "1000000",
    "-1",
    "9223372036854775807",
    "1e308",
    "nan",
    "inf",
    "true",
    "1979-05-27T07:32:00Z",
    "é",
    "🦀",
    "\u{202e}",
    "\r\n",
    "\t",
];

#[test]
fn arbitrary_text_never_panics_and_refusals_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = 0u64;
    fuzz("bytes", |u| {
        let text = if u.ratio(1, 2)? {
            let bytes: &[u8] = u.arbitrary()?;
            // Non-UTF-8 through `load`, as a file on disk, now and then.
            if u.ratio(1, 8)? {
                files += 1;
                let path = tmp.path().join(format!("in{}.toml", files % 4));
                std::fs::File::create(&path)
                    .and_then(|mut f| f.write_all(bytes))
                    .map_err(|_| arbitrary::Error::IncorrectFormat)?;
                guarded(bytes, || {
                    let result = testbed::planning::spec::load(&path)
                        .and_then(|l| testbed::planning::plan::plan_on(&l, &limits()).map(|_| ()));
                    if let Err(e) = result {
                        check_error(&e, &path, &String::from_utf8_lossy(bytes));
                    }
                });
            }
            String::from_utf8_lossy(bytes).into_owned()
        } else {
            let n = u.int_in_range(0..=200)?;
            let mut s = String::new();
            for _ in 0..n {
                s.push_str(u.choose(TOKENS)?);
            }
            s
        };
        guarded(text.as_bytes(), || check(&text));
        Ok(())
    });
}

// ---------------------------------------------------------------------------
// (b) structured mutations of real specs

/// One step of a path into a TOML value.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

fn all_paths(v: &toml::Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        toml::Value::Table(t) => {
            for (k, child) in t {
                prefix.push(Seg::Key(k.clone()));
                out.push(prefix.clone());
                all_paths(child, prefix, out);
                prefix.pop();
            }
        }
        toml::Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Seg::Index(i));
                out.push(prefix.clone());
                all_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn get_mut<'a>(v: &'a mut toml::Value, path: &[Seg]) -> Option<&'a mut toml::Value> {
    let mut cur = v;
    for seg in path {
        cur = match seg {
            Seg::Key(k) => cur.as_table_mut()?.get_mut(k)?,
            Seg::Index(i) => cur.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// Values a spec reader is likely to trip on.
fn gen_value(u: &mut Unstructured<'_>, keys: &[String], depth: u32) -> ArbResult<toml::Value> {
    use toml::Value as V;
    let choices = if depth > 3 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=choices)? {
        0 => V::Integer(*u.choose(&[
            0,
            1,
            -1,
            2,
            512,
            1024,
            1025,
            4096,
            1_000_000,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            i64::MAX,
            i64::MIN,
        ])?),
        1 => V::Integer(u.arbitrary()?),
        2 => V::Float(*u.choose(&[
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.5,
            1e308,
            1e-308,
            1.5,
        ])?),
        3 => V::String(
            (*u.choose(&[
                "",
                "..",
                ".",
                "/",
                "a/b",
                ".hidden",
                "64T",
                "16E",
                "1.5G",
                "-1M",
                "0.1",
                "12QB",
                "99999999999999999999s",
                "1e30s",
                "18446744073709551615",
                "0x10",
                "nvme",
                "virtio-blk",
                "vfio",
                "null",
                "file",
                "randread",
                "fio",
                "btree",
                "flight-bulk",
                "flight-query",
                "flight-genomics",
                "asam-preproc",
                "block-latency",
                "fault",
                "pair",
                "host",
                "qemu",
                "slurm",
                "kvm",
                "tcg",
                "per-point",
                "smoke-latency",
                "{peer}",
                "{peer}:50051",
                "0000:3b:00.0",
                "é🦀\u{202e}\u{0}\u{7}",
            ])?)
            .to_string(),
        ),
        4 => V::String(u.arbitrary()?),
        5 => V::Boolean(u.arbitrary()?),
        6 => {
            let n = u.int_in_range(0..=4)?;
            let mut a = Vec::new();
            for _ in 0..n {
                a.push(gen_value(u, keys, depth + 1)?);
            }
            V::Array(a)
        }
        _ => {
            let n = u.int_in_range(0..=3)?;
            let mut t = toml::Table::new();
            for _ in 0..n {
                let k = u.choose(keys)?.clone();
                t.insert(k, gen_value(u, keys, depth + 1)?);
            }
            V::Table(t)
        }
    })
}

/// The same value as another type: the loader must say which it wanted.
fn retype(u: &mut Unstructured<'_>, v: &toml::Value) -> ArbResult<toml::Value> {
    use toml::Value as V;
    Ok(match v {
        V::Integer(i) => {
            if u.arbitrary()? {
                V::String(i.to_string())
            } else {
                V::Float(*i as f64)
            }
        }
        V::String(s) => match s.parse::<i64>() {
            Ok(i) => V::Integer(i),
            Err(_) => V::Array(vec![V::String(s.clone())]),
        },
        V::Array(a) => a.first().cloned().unwrap_or(V::Boolean(true)),
        V::Table(t) => V::Array(vec![V::Table(t.clone())]),
        V::Float(f) => V::String(f.to_string()),
        V::Boolean(b) => V::Integer(i64::from(*b)),
        V::Datetime(d) => V::String(d.to_string()),
    })
}

/// 1 to 4 mutations of the parsed spec.
fn mutate_tree(u: &mut Unstructured<'_>, root: &mut toml::Value, keys: &[String]) -> ArbResult<()> {
    for _ in 0..u.int_in_range(1..=4)? {
        let mut paths = Vec::new();
        all_paths(root, &mut Vec::new(), &mut paths);
        if paths.is_empty() {
            return Ok(());
        }
        let path = u.choose(&paths)?.clone();
        let (parent_path, last) = path.split_at(path.len() - 1);
        match u.int_in_range(0..=6)? {
            // Drop a key or an element.
            0 => match (get_mut(root, parent_path), &last[0]) {
                (Some(toml::Value::Table(t)), Seg::Key(k)) => {
                    t.remove(k);
                }
                (Some(toml::Value::Array(a)), Seg::Index(i)) => {
                    a.remove(*i);
                }
                _ => {}
            },
            // Replace a value.
            1 => {
                let v = gen_value(u, keys, 0)?;
                if let Some(slot) = get_mut(root, &path) {
                    *slot = v;
                }
            }
            // Add a known key to a table.
            2 => {
                let k = u.choose(keys)?.clone();
                let v = gen_value(u, keys, 0)?;
                let target = if u.arbitrary()? {
                    &path[..]
                } else {
                    parent_path
                };
                if let Some(toml::Value::Table(t)) = get_mut(root, target) {
                    t.insert(k, v);
                }
            }
            // Change a value's type.
            3 => {
                if let Some(slot) = get_mut(root, &path) {
                    let v = retype(u, slot)?;
                    *slot = v;
                }
            }
            // Duplicate an element (a second device, a longer sweep).
            4 => {
                if let Some(toml::Value::Array(a)) = get_mut(root, parent_path)
                    && let Seg::Index(i) = last[0]
                {
                    let copies = *u.choose(&[1usize, 2, 50, 1000])?;
                    let el = a[i].clone();
                    a.extend(std::iter::repeat_n(el, copies));
                }
            }
            // Deep nesting.
            5 => {
                let depth = *u.choose(&[2usize, 16, 64, 128, 256])?;
                if let Some(slot) = get_mut(root, &path) {
                    let mut v = slot.clone();
                    let tables: bool = u.arbitrary()?;
                    for _ in 0..depth {
                        v = if tables {
                            let mut t = toml::Table::new();
                            t.insert("x".into(), v);
                            toml::Value::Table(t)
                        } else {
                            toml::Value::Array(vec![v])
                        };
                    }
                    *slot = v;
                }
            }
            // Huge or degenerate numbers in place of a number.
            _ => {
                if let Some(slot) = get_mut(root, &path)
                    && slot.is_integer()
                {
                    *slot = toml::Value::Integer(*u.choose(&[
                        0,
                        -1,
                        i64::MAX,
                        i64::MIN,
                        1 << 40,
                        1_000_000,
                    ])?);
                }
            }
        }
    }
    Ok(())
}

/// A char boundary of `s` chosen by `u`.
fn boundary(u: &mut Unstructured<'_>, s: &str) -> ArbResult<usize> {
    let at = u.int_in_range(0..=s.len())?;
    Ok(s.floor_char_boundary(at))
}

/// 0 to 2 edits of the text: what a tree cannot express (a duplicate key,
/// a broken line, stray bytes).
fn mutate_text(u: &mut Unstructured<'_>, text: &mut String) -> ArbResult<()> {
    for _ in 0..u.int_in_range(0..=2)? {
        let lines: Vec<&str> = text.lines().collect();
        match u.int_in_range(0..=5)? {
            0 if !lines.is_empty() => {
                let i = u.choose_index(lines.len())?;
                let mut out: Vec<&str> = lines.clone();
                out.insert(i, lines[i]);
                *text = out.join("\n");
            }
            1 if !lines.is_empty() => {
                let i = u.choose_index(lines.len())?;
                let mut out = lines.clone();
                out.remove(i);
                *text = out.join("\n");
            }
            2 if lines.len() > 1 => {
                let (i, j) = (u.choose_index(lines.len())?, u.choose_index(lines.len())?);
                let mut out = lines.clone();
                out.swap(i, j);
                *text = out.join("\n");
            }
            3 => {
                let at = boundary(u, text)?;
                text.truncate(at);
            }
            4 => {
                let at = boundary(u, text)?;
                let ins: String = if u.arbitrary()? {
                    u.choose(TOKENS)?.to_string()
                } else {
                    u.arbitrary()?
                };
                text.insert_str(at, &ins);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Every key written in any seed, and the usual suspects.
fn key_dictionary(seeds: &[(PathBuf, String)]) -> Vec<String> {
    fn walk(v: &toml::Value, out: &mut BTreeSet<String>) {
        match v {
            toml::Value::Table(t) => {
                for (k, c) in t {
                    out.insert(k.clone());
                    walk(c, out);
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut keys: BTreeSet<String> = [
        "threads",
        "numjobs",
        "streams",
        "memory",
        "vcpus",
        "figures",
        "name",
        "kind",
        "size",
        "namespaces",
        "queues",
        "latency_ns",
        "pci",
        "backend",
        "topology",
        "server",
        "repetitions",
        "executor",
        "boot",
        "point",
        "heartbeat",
        "include",
        "modules",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (_, text) in seeds {
        if let Ok(t) = text.parse::<toml::Table>() {
            walk(&toml::Value::Table(t), &mut keys);
        }
    }
    keys.into_iter().collect()
}

#[test]
fn mutated_specs_never_panic_and_refusals_name_the_file() {
    let seeds = seeds();
    assert!(seeds.len() > 20, "found only {} seeds", seeds.len());
    let keys = key_dictionary(&seeds);
    fuzz("mutations", |u| {
        let (_, text) = u.choose(&seeds)?;
        let mut text = text.clone();
        if u.ratio(7, 8)?
            && let Ok(table) = text.parse::<toml::Table>()
        {
            let mut root = toml::Value::Table(table);
            mutate_tree(u, &mut root, &keys)?;
            if let Ok(s) = toml::to_string(&root) {
                text = s;
            }
        }
        mutate_text(u, &mut text)?;
        guarded(text.as_bytes(), || check(&text));
        Ok(())
    });
}

/// The seeds and every regression input found so far, every run.
#[test]
fn the_corpus_never_panics() {
    let seeds = seeds();
    for (path, text) in &seeds {
        guarded(text.as_bytes(), || check(text));
        // As a file too: the error then names that file.
        let result = testbed::planning::spec::load(path)
            .and_then(|l| testbed::planning::plan::plan_on(&l, &limits()).map(|_| ()));
        if let Err(e) = result {
            check_error(&e, path, text);
        }
    }
}
