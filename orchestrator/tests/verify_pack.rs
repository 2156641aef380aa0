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
