//! A data set, made once and cached: the generator's files ([`crate::data`])
//! or a user's (the `paper` size), `bwa index`, `bwa mem` per read group
//! into one unsorted `aligned.sam`, and `prepared.json`.
//!
//! The cache entry is `<root>/<name>-<key>`, the key a hash of every
//! parameter and [`GENERATOR_VERSION`]. It is built in a private temporary
//! directory under `root` and renamed into place when complete, so a
//! crash leaves no entry that looks finished; a lock file serialises two
//! processes asking for the same entry.

pub mod request;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::data::{self, align, input};
pub use crate::data::{DataSpec, GENERATOR_VERSION, Mode};
use crate::{AsamError, Result};

/// What `prepare` made (or found cached); `prepare` prints it as its one
/// JSON line (the type is shared with the agent).
pub use testbed_vocab::asam::{Prepared, PreparedReadGroup, VariantCounts};

/// The `paper` size: the user's reads and reference (and, when given,
/// truth, known sites and targets), only checked, indexed and aligned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserInput {
    pub name: String,
    pub reference: PathBuf,
    pub reads1: PathBuf,
    pub reads2: PathBuf,
    pub truth_vcf: Option<PathBuf>,
    pub known_sites: Option<PathBuf>,
    pub targets_bed: Option<PathBuf>,
    pub sample: String,
    pub library: String,
}

/// Where a data set comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Generated(DataSpec),
    User(UserInput),
}

impl Source {
    fn name(&self) -> &str {
        match self {
            Source::Generated(s) => &s.name,
            Source::User(u) => &u.name,
        }
    }
}

const PREPARED_JSON: &str = "prepared.json";

/// The cache key of `source`: the first 16 hex digits of a sha256 over
/// the generator version and every parameter. User files enter by path,
/// size and modification time (hashing tens of gigabytes for a key
/// would cost more than it saves).
pub fn cache_key(source: &Source) -> Result<String> {
    let files = match source {
        Source::Generated(_) => serde_json::Value::Null,
        Source::User(u) => {
            let mut v = Vec::new();
            for p in [Some(&u.reference), Some(&u.reads1), Some(&u.reads2)]
                .into_iter()
                .chain([&u.truth_vcf, &u.known_sites, &u.targets_bed].map(Option::as_ref))
                .flatten()
            {
                let m = std::fs::metadata(p).map_err(|e| AsamError::io(p, e))?;
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos() as u64);
                v.push(serde_json::json!([p, m.len(), mtime]));
            }
            serde_json::Value::Array(v)
        }
    };
    let text = serde_json::json!({
        "generator_version": GENERATOR_VERSION,
        "source": source,
        "files": files,
    })
    .to_string();
    Ok(hex::encode(Sha256::digest(text.as_bytes()))[..16].to_string())
}

/// Makes the data set of `spec` under `root` unless it is cached.
/// `threads` is bwa's `-t`; the output does not depend on it.
pub fn prepare_generated(spec: &DataSpec, root: &Path, threads: usize) -> Result<Prepared> {
    spec.validate()?;
    prepare_source(&Source::Generated(spec.clone()), root, threads)
}

/// Checks, indexes and aligns a user's files under `root` unless cached.
pub fn prepare_user(input: &UserInput, root: &Path, threads: usize) -> Result<Prepared> {
    prepare_source(&Source::User(input.clone()), root, threads)
}

/// The cache directory `source` has (or will have) under `root`.
pub fn cache_dir(source: &Source, root: &Path) -> Result<PathBuf> {
    Ok(root.join(format!("{}-{}", source.name(), cache_key(source)?)))
}

fn prepare_source(source: &Source, root: &Path, threads: usize) -> Result<Prepared> {
    std::fs::create_dir_all(root).map_err(|e| AsamError::io(root, e))?;
    let dir = cache_dir(source, root)?;
    let entry = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // One process builds an entry; another that wants it waits here and
    // then finds it cached.
    let lock_path = root.join(format!(".{entry}.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| AsamError::io(&lock_path, e))?;
    lock.lock().map_err(|e| AsamError::io(&lock_path, e))?;
    let info = dir.join(PREPARED_JSON);
    if info.is_file() {
        let text = std::fs::read_to_string(&info).map_err(|e| AsamError::io(&info, e))?;
        let mut p: Prepared = serde_json::from_str(&text)
            .map_err(|e| AsamError::Invalid(format!("{}: {e}", info.display())))?;
        p.cached = true;
        // The cache may be seen under another path than it was built at
        // (a data disk mounted elsewhere in the guest).
        if let Some(built_at) = p.dir.clone() {
            p = relocate(p, &built_at, &dir);
        }
        return Ok(p);
    }
    // Builds of this entry by a process that was killed: with the lock
    // held, none of them is running.
    let stale = format!(".build-{entry}-");
    for e in std::fs::read_dir(root).map_err(|e| AsamError::io(root, e))? {
        let path = e.map_err(|e| AsamError::io(root, e))?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(&stale))
        {
            std::fs::remove_dir_all(&path).map_err(|e| AsamError::io(&path, e))?;
        }
    }
    // tempfile makes the directory with mode 0700 and removes it if we
    // fail before the rename.
    let build = tempfile::Builder::new()
        .prefix(&format!(".build-{entry}-"))
        .tempdir_in(root)
        .map_err(|e| AsamError::io(root, e))?;
    let mut p = match source {
        Source::Generated(spec) => build_generated(spec, build.path(), threads)?,
        Source::User(u) => build_user(u, build.path(), threads)?,
    };
    p.params = Some(serde_json::to_value(source).map_err(|e| AsamError::Invalid(e.to_string()))?);
    p.sha256 = Some(dataset_sha256(build.path())?);
    p.tool_versions.insert(
        "bwa".into(),
        align::bwa_version().unwrap_or_else(|_| "unknown".into()),
    );
    p.generator_version = Some(GENERATOR_VERSION);
    let p = relocate(p, build.path(), &dir);
    let json = serde_json::to_string_pretty(&p).map_err(|e| AsamError::Invalid(e.to_string()))?;
    let info_tmp = build.path().join(PREPARED_JSON);
    std::fs::write(&info_tmp, json).map_err(|e| AsamError::io(&info_tmp, e))?;
    // A leftover incomplete entry (no prepared.json: from before builds
    // were renamed into place) is replaced.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| AsamError::io(&dir, e))?;
    }
    let built = build.keep();
    std::fs::rename(&built, &dir).map_err(|e| AsamError::io(&dir, e))?;
    Ok(p)
}

fn build_generated(spec: &DataSpec, dir: &Path, threads: usize) -> Result<Prepared> {
    let t0 = Instant::now();
    let g = data::generate(spec, dir)?;
    let generate_s = t0.elapsed().as_secs_f64();
    let read_groups: Vec<PreparedReadGroup> = g
        .read_groups
        .iter()
        .map(|f| PreparedReadGroup {
            id: f.group.id.clone(),
            sample: f.group.sample.clone(),
            library: f.group.library.clone(),
            platform: f.group.platform.clone(),
            unit: f.group.unit.clone(),
            reads1: f.reads1.clone(),
            reads2: f.reads2.clone(),
            pairs: f.pairs,
        })
        .collect();
    let mut p = index_and_align(dir, &g.reference, read_groups, threads)?;
    p.seconds.insert("generate".into(), generate_s);
    p.name = Some(spec.name.clone());
    p.mode = Some(match spec.mode {
        Mode::Wgs => "wgs".into(),
        Mode::Wes => "wes".into(),
    });
    p.read_length = Some(spec.read_length);
    p.pairs = g.reads.pairs;
    p.duplicate_pairs = g.reads.duplicate_pairs;
    p.optical_duplicate_pairs = Some(g.reads.optical_duplicate_pairs);
    p.truth_vcf = Some(g.truth_vcf);
    p.known_sites = Some(g.known_sites);
    p.targets_bed = g.targets_bed;
    p.duplicates_tsv = Some(g.duplicates_tsv);
    p.variants = Some(VariantCounts {
        snps: g.variants.snps,
        indels: g.variants.indels,
        het: g.variants.het,
        hom: g.variants.hom,
        known_sites: g.variants.known_sites,
    });
    Ok(p)
}

fn build_user(u: &UserInput, dir: &Path, threads: usize) -> Result<Prepared> {
    let t0 = Instant::now();
    let contigs = input::fasta_contigs(&u.reference)?;
    for f in [&u.truth_vcf, &u.known_sites, &u.targets_bed]
        .into_iter()
        .flatten()
    {
        input::check_contigs(f, &contigs, &u.reference)?;
    }
    let pairs = input::check_fastq_pair(&u.reads1, &u.reads2)?;
    // Links, not copies: bwa index writes next to the link, in here.
    let link = |from: &Path, name: &str| -> Result<PathBuf> {
        let target = std::fs::canonicalize(from).map_err(|e| AsamError::io(from, e))?;
        let to = dir.join(name);
        std::os::unix::fs::symlink(&target, &to).map_err(|e| AsamError::io(&to, e))?;
        Ok(to)
    };
    let gz = |p: &Path| {
        if p.extension().is_some_and(|e| e == "gz") {
            ".gz"
        } else {
            ""
        }
    };
    let reads = dir.join("reads");
    std::fs::create_dir_all(&reads).map_err(|e| AsamError::io(&reads, e))?;
    let id = format!("{}.L1", u.library);
    let rg = PreparedReadGroup {
        id: id.clone(),
        sample: u.sample.clone(),
        library: u.library.clone(),
        platform: "ILLUMINA".into(),
        unit: format!("{}.1", u.name),
        reads1: link(&u.reads1, &format!("reads/{id}_R1.fastq{}", gz(&u.reads1)))?,
        reads2: link(&u.reads2, &format!("reads/{id}_R2.fastq{}", gz(&u.reads2)))?,
        pairs,
    };
    let reference = link(&u.reference, data::REFERENCE)?;
    let check_s = t0.elapsed().as_secs_f64();
    let mut p = index_and_align(dir, &reference, vec![rg], threads)?;
    p.seconds.insert("check".into(), check_s);
    p.name = Some(u.name.clone());
    p.mode = Some(
        if u.targets_bed.is_some() {
            "wes"
        } else {
            "wgs"
        }
        .into(),
    );
    p.pairs = pairs;
    p.truth_vcf = u
        .truth_vcf
        .as_ref()
        .map(|f| link(f, data::TRUTH_VCF))
        .transpose()?;
    p.known_sites = u
        .known_sites
        .as_ref()
        .map(|f| link(f, data::KNOWN_SITES))
        .transpose()?;
    p.targets_bed = u
        .targets_bed
        .as_ref()
        .map(|f| link(f, data::TARGETS_BED))
        .transpose()?;
    Ok(p)
}

fn index_and_align(
    dir: &Path,
    reference: &Path,
    read_groups: Vec<PreparedReadGroup>,
    threads: usize,
) -> Result<Prepared> {
    let t0 = Instant::now();
    align::index(reference)?;
    let index_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let sam = dir.join(data::ALIGNED_SAM);
    align::align(reference, &lanes(&read_groups), threads, dir, &sam)?;
    let align_s = t1.elapsed().as_secs_f64();
    Ok(Prepared {
        sam,
        reference: reference.to_path_buf(),
        cached: false,
        pairs: 0,
        duplicate_pairs: 0,
        dir: Some(dir.to_path_buf()),
        name: None,
        mode: None,
        read_length: None,
        read_groups,
        truth_vcf: None,
        known_sites: None,
        targets_bed: None,
        duplicates_tsv: None,
        optical_duplicate_pairs: None,
        variants: None,
        sha256: None,
        tool_versions: Default::default(),
        generator_version: None,
        params: None,
        seconds: [
            ("index".to_string(), index_s),
            ("align".to_string(), align_s),
        ]
        .into(),
    })
}

/// bwa's input per read group.
pub fn lanes(read_groups: &[PreparedReadGroup]) -> Vec<align::Lane> {
    read_groups
        .iter()
        .map(|g| align::Lane {
            rg_line: g.header_line(),
            reads1: g.reads1.clone(),
            reads2: g.reads2.clone(),
        })
        .collect()
}

/// The exact argv of each `bwa mem` (`bwa` first, one per read group, in
/// @RG order) that made `p.sam`; their stdouts merged by
/// [`align::merge`] under one header give the same SAM body.
pub fn bwa_commands(p: &Prepared, threads: usize) -> Vec<Vec<OsString>> {
    lanes(&p.read_groups)
        .iter()
        .map(|l| align::mem_argv(&p.reference, l, threads))
        .collect()
}

/// The generator spec `p` was made from (`None` for user files): with
/// [`crate::data::truth`] it gives the haplotypes and variants in memory.
pub fn spec_of(p: &Prepared) -> Option<DataSpec> {
    let v = p.params.as_ref()?.get("generated")?;
    serde_json::from_value(v.clone()).ok()
}

/// `p` with every path under `from` moved under `to`.
fn relocate(mut p: Prepared, from: &Path, to: &Path) -> Prepared {
    let mv = |x: &mut PathBuf| {
        if let Ok(rest) = x.strip_prefix(from) {
            *x = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
        }
    };
    mv(&mut p.sam);
    mv(&mut p.reference);
    for x in [
        &mut p.dir,
        &mut p.truth_vcf,
        &mut p.known_sites,
        &mut p.targets_bed,
        &mut p.duplicates_tsv,
    ]
    .into_iter()
    .flatten()
    {
        mv(x);
    }
    for g in &mut p.read_groups {
        mv(&mut g.reads1);
        mv(&mut g.reads2);
    }
    p
}

/// Files the data set hash leaves out: the bwa index (bwa's business,
/// and its bytes may change with bwa's version) and prepared.json.
fn hashed(rel: &Path) -> bool {
    let name = rel.to_string_lossy();
    let index = [".amb", ".ann", ".bwt", ".pac", ".sa"]
        .iter()
        .any(|e| name.starts_with(data::REFERENCE) && name.ends_with(e));
    !index && name != PREPARED_JSON
}

/// sha256 over the data set's files in name order: each file's relative
/// path, length and contents (links followed).
pub fn dataset_sha256(dir: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| AsamError::io(&d, e))? {
            let e = e.map_err(|x| AsamError::io(&d, x))?;
            let path = e.path();
            let meta = std::fs::metadata(&path).map_err(|x| AsamError::io(&path, x))?;
            if meta.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let mut rels: Vec<PathBuf> = files
        .iter()
        .filter_map(|f| f.strip_prefix(dir).ok().map(Path::to_path_buf))
        .filter(|r| hashed(r))
        .collect();
    rels.sort();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for rel in rels {
        let path = dir.join(&rel);
        let mut f = std::fs::File::open(&path).map_err(|e| AsamError::io(&path, e))?;
        let len = f.metadata().map_err(|e| AsamError::io(&path, e))?.len();
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update(len.to_le_bytes());
        loop {
            let n = f.read(&mut buf).map_err(|e| AsamError::io(&path, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// The old `prepare` parameters (chromosomes × length), kept for callers
/// that still pass them: the `tiny` preset with chr1..chrN, chr1 of
/// `chromosome_length` and the others in hg19 proportion.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetParams {
    pub name: String,
    pub chromosomes: u32,
    pub chromosome_length: u64,
    pub coverage: f64,
    pub dup_fraction: f64,
    pub seed: u64,
}

impl DatasetParams {
    pub fn to_spec(&self) -> DataSpec {
        let mut s = data::sizes::tiny();
        s.name = self.name.clone();
        s.contigs = self.chromosomes;
        s.set_chr1_length(self.chromosome_length);
        s.coverage = self.coverage;
        s.dup_rate = self.dup_fraction;
        s.seed = self.seed;
        s
    }
}

/// [`prepare_generated`] with the old parameters.
pub fn prepare(p: &DatasetParams, root: &Path, threads: usize) -> Result<Prepared> {
    prepare_generated(&p.to_spec(), root, threads)
}
