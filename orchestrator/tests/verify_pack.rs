//! A run that verifies and travels: `testbed verify` against the files the
//! manifest recorded, and `pack` → `unpack` → `plot` giving the figure
//! data the original run gives. A host-executor run of the fault
//! workload's `samples` mode (a real run: agent, point files, tables).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn testbed(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(args)
        .output()
        .expect("spawn testbed")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A finished two-point run in `dir/run`, and a figures directory whose
/// one figure draws it.
fn finished_run(dir: &Path) -> (PathBuf, PathBuf) {
    let spec = dir.join("packed.toml");
    std::fs::write(
        &spec,
        "[experiment]\nname = \"packed\"\nexecutor = \"host\"\n\n\
         [workload]\nkind = \"fault\"\nmode = \"samples\"\n\n[sweep]\nsize = [50, 100]\n",
    )
    .unwrap();
    let figures = dir.join("figures");
    std::fs::create_dir_all(&figures).unwrap();
    std::fs::write(
        figures.join("packed-values.toml"),
        "id = \"packed-values\"\ntitle = \"values\"\nfamily = \"testbed\"\n\
         description = \"mean sample value per size\"\nexperiments = [\"packed\"]\n\n\
         [[panels]]\nname = \"mean\"\ntitle = \"mean value\"\n\
         x = { column = \"param_size\", label = \"size\" }\n\
         y = { metric = \"value\", kind = \"raw\", stat = \"mean\", label = \"value\", unit = \"count\", better = \"higher\" }\n",
    )
    .unwrap();
    let run = dir.join("run");
    let o = testbed(&[
        "run".as_ref(),
        spec.as_ref(),
        "--out".as_ref(),
        run.as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    (run, figures)
}

/// The figure data files `plot` wrote (name → content).
fn figure_data(run: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(run.join("figures"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn verify_names_the_point_file_in_which_one_byte_flipped() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (run, _) = finished_run(t.path());
    let o = testbed(&["verify".as_ref(), run.as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(": ok: "), "{}", text(&o));
    // One byte in the middle of a point's samples, size unchanged.
    let point = run.join("points/p0001-r00.parquet");
    let mut bytes = std::fs::read(&point).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&point, &bytes).unwrap();
    let o = testbed(&["verify".as_ref(), run.as_ref()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("points/p0001-r00.parquet: its sha256 is"),
        "names the file and why:\n{}",
        text(&o)
    );
    // Packing refuses the damaged run, and writes nothing.
    let archive = t.path().join("damaged.tar.zst");
    let o = testbed(&[
        "pack".as_ref(),
        run.as_ref(),
        "-o".as_ref(),
        archive.as_ref(),
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("differ from the manifest's record"),
        "{}",
        text(&o)
    );
    assert!(!archive.exists());
}

#[test]
#[ignore = "builds the static release guest binaries (nested cargo build --release)"]
fn a_packed_run_unpacks_elsewhere_and_plots_the_same_figure_data() {
    let t = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (run, figures) = finished_run(t.path());
    let plot = |run: &Path| {
        let o = testbed(&[
            "plot".as_ref(),
            run.as_ref(),
            "--figures".as_ref(),
            figures.as_ref(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
    };
    plot(&run);
    let before = figure_data(&run);
    assert!(!before.is_empty(), "plot wrote no figure data");
    let archive = t.path().join("runs.tar.zst");
    let o = testbed(&[
        "pack".as_ref(),
        run.as_ref(),
        "-o".as_ref(),
        archive.as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // On the reviewer's side: another directory, the figures drawn again.
    let review = t.path().join("review");
    let o = testbed(&[
        "unpack".as_ref(),
        archive.as_ref(),
        "-o".as_ref(),
        review.as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    let unpacked = review
        .join("packed")
        .join(manifest["run_id"].as_str().unwrap());
    assert!(unpacked.join("spec.toml").is_file());
    std::fs::remove_dir_all(unpacked.join("figures")).unwrap();
    plot(&unpacked);
    assert_eq!(figure_data(&unpacked), before);
    // A second unpack does not replace the first.
    let o = testbed(&[
        "unpack".as_ref(),
        archive.as_ref(),
        "-o".as_ref(),
        review.as_ref(),
    ]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already exists"), "{}", text(&o));
}

mod common;

/// The kernel patch of [`sealed_run`] and its text.
const PATCH: (&str, &str) = ("0001-hook.patch", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n");

/// A synthetic finished run in `dir/run` (one point, samples merged,
/// outputs recorded, written with the manifest's own writer, so sealed by
/// its digest) whose kernel's cache entry `dir/cache/k` holds config,
/// meta.json and one patch, the patch's sha256 in the manifest; and a
/// claims.json drawn after the run. No VM, no guest build.
fn sealed_run(dir: &Path) -> PathBuf {
    use testbed::recording::results::{manifest, outputs};
    let run = dir.join("run");
    std::fs::create_dir_all(run.join("points")).unwrap();
    let point = common::synthetic::depth_point(1, 0);
    let file = common::synthetic::latency_point(&run, "r1", &point, 1000.0);
    let mut m =
        common::synthetic::finish_run(&run, "sealed", "r1", &[file], Vec::new(), 1_700_000_000);
    let entry = dir.join("cache/k");
    std::fs::create_dir_all(entry.join("patches")).unwrap();
    std::fs::write(entry.join("bzImage"), "kernel").unwrap();
    std::fs::write(entry.join("config"), "CONFIG_X=y\n").unwrap();
    std::fs::write(entry.join("meta.json"), "{}").unwrap();
    std::fs::write(entry.join("patches").join(PATCH.0), PATCH.1).unwrap();
    let (sha, _) =
        testbed::host::fsutil::sha256_file(&entry.join("patches").join(PATCH.0)).unwrap();
    m.inputs.kernel = Some(manifest::KernelInput {
        name: "vm-hooks".into(),
        patches: vec![PATCH.0.into()],
        patch_sha256: [(PATCH.0.to_string(), sha)].into(),
        bzimage: entry.join("bzImage"),
        ..Default::default()
    });
    m.outputs = outputs::record(&run).unwrap();
    manifest::write(&run.join("manifest.json"), &m).unwrap();
    std::fs::write(run.join("claims.json"), "[]").unwrap();
    run
}

fn os(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

/// `tree` (an unpacked `<experiment>/<run id>` under it) packed again as
/// a zstd tar at `out`, as an editor of the archive would.
fn repack(tree: &Path, out: &Path) {
    let file = std::fs::File::create(out).unwrap();
    let enc = zstd::Encoder::new(file, 3).unwrap();
    let mut tar = tar::Builder::new(enc);
    tar.append_dir_all(".", tree).unwrap();
    tar.into_inner().unwrap().finish().unwrap();
}

#[test]
fn an_edited_manifest_fails_verify_and_pack_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let run = sealed_run(t.path());
    let o = testbed(&["verify".as_ref(), os(&run)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(": ok: the manifest as sealed"),
        "{}",
        text(&o)
    );
    assert!(run.join("manifest.json.sha256").is_file());

    let path = run.join("manifest.json");
    let sealed = std::fs::read_to_string(&path).unwrap();
    assert!(sealed.contains("\"seed\": 42"), "{sealed}");
    std::fs::write(&path, sealed.replace("\"seed\": 42", "\"seed\": 43")).unwrap();
    let o = testbed(&["verify".as_ref(), os(&run)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("manifest.json: its sha256 is"),
        "names the manifest and why:\n{}",
        text(&o)
    );
    let archive = t.path().join("edited.tar.zst");
    let o = testbed(&["pack".as_ref(), os(&run), "-o".as_ref(), os(&archive)]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("manifest.json: its sha256 is"),
        "{}",
        text(&o)
    );
    assert!(!archive.exists());

    // Sealed again, then the digest removed: not taken as verified.
    std::fs::write(&path, &sealed).unwrap();
    let o = testbed(&["verify".as_ref(), os(&run)]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_file(run.join("manifest.json.sha256")).unwrap();
    let o = testbed(&["verify".as_ref(), os(&run)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no manifest.json.sha256"), "{}", text(&o));
}

#[test]
fn a_patch_or_derived_file_edited_in_a_pack_is_refused_by_verify_and_unpack() {
    let t = tempfile::tempdir().unwrap();
    let run = sealed_run(t.path());
    let archive = t.path().join("runs.tar.zst");
    let o = testbed(&["pack".as_ref(), os(&run), "-o".as_ref(), os(&archive)]);
    assert!(o.status.success(), "{}", text(&o));
    let o = testbed(&["verify".as_ref(), os(&archive)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("sealed/r1: ok:"), "{}", text(&o));

    let review = t.path().join("review");
    let o = testbed(&["unpack".as_ref(), os(&archive), "-o".as_ref(), os(&review)]);
    assert!(o.status.success(), "{}", text(&o));
    let unpacked = review.join("sealed/r1");
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(unpacked.join("packed.json")).unwrap())
            .unwrap();
    let listed: Vec<&str> = index["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for want in [
        "claims.json",
        "kernel/config",
        "kernel/meta.json",
        "kernel/patches/0001-hook.patch",
    ] {
        assert!(listed.contains(&want), "{want} not in {listed:?}");
    }
    let o = testbed(&["verify".as_ref(), os(&unpacked)]);
    assert!(o.status.success(), "{}", text(&o));

    // The packed patch edited: verify names it, twice (the pack's index
    // and the manifest's patch record); an archive holding it is refused.
    let patch = unpacked.join("kernel/patches").join(PATCH.0);
    std::fs::write(&patch, PATCH.1.replace("+b", "+c")).unwrap();
    let o = testbed(&["verify".as_ref(), os(&unpacked)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("kernel/patches/0001-hook.patch: its sha256 is")
            && text(&o).contains("the patch the run's kernel was built with"),
        "{}",
        text(&o)
    );
    let edited = t.path().join("edited-patch.tar.zst");
    repack(&review, &edited);
    let o = testbed(&["verify".as_ref(), os(&edited)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("kernel/patches/0001-hook.patch"),
        "{}",
        text(&o)
    );
    let again = t.path().join("again");
    let o = testbed(&["unpack".as_ref(), os(&edited), "-o".as_ref(), os(&again)]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("kernel/patches/0001-hook.patch"),
        "{}",
        text(&o)
    );
    assert!(!again.join("sealed").exists(), "a refused run was unpacked");

    // A derived file edited instead: the pack's index names it.
    std::fs::write(&patch, PATCH.1).unwrap();
    std::fs::write(unpacked.join("claims.json"), "[1]").unwrap();
    let o = testbed(&["verify".as_ref(), os(&unpacked)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(
            "claims.json: 3 bytes, the manifest records 2 (packed: packed.json's record)"
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn pack_refuses_a_patch_that_is_not_the_one_the_run_booted() {
    let t = tempfile::tempdir().unwrap();
    let run = sealed_run(t.path());
    std::fs::write(t.path().join("cache/k/patches").join(PATCH.0), "changed\n").unwrap();
    let archive = t.path().join("runs.tar.zst");
    let o = testbed(&["pack".as_ref(), os(&run), "-o".as_ref(), os(&archive)]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("kernel patch") && text(&o).contains("0001-hook.patch: its sha256 is"),
        "{}",
        text(&o)
    );
    assert!(!archive.exists());
}
