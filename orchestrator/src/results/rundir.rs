//! Layout of results/<experiment>/<run-id>/ and what is already done in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::manifest::PointRecord;

pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    pub fn manifest(&self) -> PathBuf {
        self.root.join("manifest.json")
    }
    pub fn samples(&self) -> PathBuf {
        self.root.join("samples.parquet")
    }
    pub fn summary(&self) -> PathBuf {
        self.root.join("summary.parquet")
    }
    pub fn spec_copy(&self) -> PathBuf {
        self.root.join("spec.toml")
    }
    pub fn points_dir(&self) -> PathBuf {
        self.root.join("points")
    }
    pub fn point_samples(&self, id: &str) -> PathBuf {
        self.points_dir().join(format!("{id}.parquet"))
    }
    pub fn point_record(&self, id: &str) -> PathBuf {
        self.points_dir().join(format!("{id}.json"))
    }
    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("devices")
    }

    /// Records of points written so far (done or failed), by id. The record
    /// is written after the samples, so a record means the samples are whole.
    pub fn records(&self) -> Result<BTreeMap<String, PointRecord>, String> {
        let mut out = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(self.points_dir()) else {
            return Ok(out);
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                let text =
                    std::fs::read_to_string(&p).map_err(|err| format!("{}: {err}", p.display()))?;
                let rec: PointRecord = serde_json::from_str(&text)
                    .map_err(|err| format!("{}: corrupt point record: {err}", p.display()))?;
                out.insert(rec.id.clone(), rec);
            }
        }
        Ok(out)
    }
}

/// A new run id: UTC time plus a short random suffix.
pub fn new_run_id() -> String {
    let t = super::manifest::utc_now().replace([':', '-'], "");
    format!(
        "{}-{}",
        t.trim_end_matches('Z'),
        &crate::executor::qemu::random_hex(2)
    )
}

pub fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}
