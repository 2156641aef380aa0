//! Helpers of the data_* tests: a minimal SAM reader and the prepared
//! data sets they share.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use testbed_asam::prepare::{DataSpec, Prepared};

/// The fields of a SAM record the tests look at.
#[derive(Debug, Clone)]
pub struct Rec {
    pub name: String,
    pub flag: u16,
    pub rname: String,
    pub pos: i64,
    pub mapq: u8,
    pub cigar: String,
    pub seq: String,
    pub qual: String,
}

impl Rec {
    pub fn unmapped(&self) -> bool {
        self.flag & 4 != 0
    }
    pub fn reverse(&self) -> bool {
        self.flag & 16 != 0
    }
    pub fn first(&self) -> bool {
        self.flag & 64 != 0
    }
    pub fn primary(&self) -> bool {
        self.flag & 0x900 == 0
    }

    fn ops(&self) -> Vec<(i64, char)> {
        let mut out = Vec::new();
        let mut n = 0i64;
        for c in self.cigar.chars() {
            if let Some(d) = c.to_digit(10) {
                n = n * 10 + i64::from(d);
            } else {
                out.push((n, c));
                n = 0;
            }
        }
        out
    }

    /// The 5' end as Picard compares duplicates: soft and hard clips
    /// counted back in.
    pub fn unclipped_five_prime(&self) -> i64 {
        let ops = self.ops();
        let clip = |o: Option<&(i64, char)>| match o {
            Some(&(n, 'S' | 'H')) => n,
            _ => 0,
        };
        if self.reverse() {
            let ref_len: i64 = ops
                .iter()
                .filter(|(_, c)| matches!(c, 'M' | 'D' | 'N' | '=' | 'X'))
                .map(|(n, _)| n)
                .sum();
            self.pos + ref_len - 1 + clip(ops.last())
        } else {
            self.pos - clip(ops.first())
        }
    }

    /// 0-based half-open reference span.
    pub fn span(&self) -> (i64, i64) {
        let ref_len: i64 = self
            .ops()
            .iter()
            .filter(|(_, c)| matches!(c, 'M' | 'D' | 'N' | '=' | 'X'))
            .map(|(n, _)| n)
            .sum();
        (self.pos - 1, self.pos - 1 + ref_len)
    }
}

/// Primary records of a SAM file.
pub fn read_sam(path: &Path) -> Vec<Rec> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('@'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Rec {
                name: f[0].into(),
                flag: f[1].parse().unwrap(),
                rname: f[2].into(),
                pos: f[3].parse().unwrap(),
                mapq: f[4].parse().unwrap(),
                cigar: f[5].into(),
                seq: f[9].into(),
                qual: f[10].into(),
            }
        })
        .filter(Rec::primary)
        .collect()
}

/// duplicates.tsv rows as column name -> value maps.
pub fn read_tsv(path: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    lines
        .map(|l| {
            head.iter()
                .zip(l.split('\t'))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The generator spec a prepared data set was made from.
pub fn spec_of(p: &Prepared) -> DataSpec {
    testbed_asam::prepare::spec_of(p).expect("a generated data set")
}

/// A directory that lives as long as the test process (shared fixtures).
pub fn leaked_dir() -> &'static Path {
    let d = tempfile::tempdir().unwrap();
    Box::leak(Box::new(d)).path()
}
