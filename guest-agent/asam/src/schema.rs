//! The ArrowSAM schema (the paper's column names, all non-null) and a
//! builder that appends one SAM record at a time.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int32Builder, RecordBatch, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::{AsamError, Result};

pub const QNAMES: usize = 0;
pub const FLAGS: usize = 1;
pub const RIDS: usize = 2;
pub const BEGIN_POSS: usize = 3;
pub const MAPQS: usize = 4;
pub const CIGARS: usize = 5;
pub const RNEXT_IDS: usize = 6;
pub const PNEXTS: usize = 7;
pub const TLENS: usize = 8;
pub const SEQS: usize = 9;
pub const QUALS: usize = 10;
pub const TAGSS: usize = 11;

/// SAM flag bits the stages read or write.
pub mod flag {
    pub const PAIRED: i32 = 0x1;
    pub const UNMAPPED: i32 = 0x4;
    pub const MATE_UNMAPPED: i32 = 0x8;
    pub const REVERSE: i32 = 0x10;
    pub const FIRST_OF_PAIR: i32 = 0x40;
    pub const SECONDARY: i32 = 0x100;
    pub const DUPLICATE: i32 = 0x400;
    pub const SUPPLEMENTARY: i32 = 0x800;
}

pub fn schema() -> SchemaRef {
    let utf8 = |n: &str| Field::new(n, DataType::Utf8, false);
    let int = |n: &str| Field::new(n, DataType::Int32, false);
    Arc::new(Schema::new(vec![
        utf8("qNames"),
        int("flags"),
        int("rIDs"),
        int("beginPoss"),
        int("mapQs"),
        utf8("cigars"),
        int("rNextIds"),
        int("pNexts"),
        int("tLens"),
        utf8("seqs"),
        utf8("quals"),
        utf8("tagss"),
    ]))
}

/// One SAM record in ArrowSAM terms: ids are reference indexes (-1 = none),
/// positions 1-based (0 = none), text fields as in SAM ("*" = absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    pub qname: &'a str,
    pub flags: i32,
    pub rid: i32,
    pub pos: i32,
    pub mapq: i32,
    pub cigar: &'a str,
    pub rnext_id: i32,
    pub pnext: i32,
    pub tlen: i32,
    pub seq: &'a str,
    pub qual: &'a str,
    pub tags: &'a str,
}

/// How large one batch may grow. Arrow's `Utf8` columns address their
/// bytes with i32 offsets (< 2 GiB per column and batch), and one batch per
/// chromosome would not fit a 30× human chr1; so a chromosome is a run of
/// batches, each cut at `max_rows` rows or `max_string_bytes` bytes in any
/// one string column, whichever comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_rows: usize,
    pub max_string_bytes: usize,
}

impl Default for BatchLimits {
    /// 1 Mi rows, 1 GiB per string column: half of what the offsets allow.
    fn default() -> Self {
        BatchLimits {
            max_rows: 1 << 20,
            max_string_bytes: 1 << 30,
        }
    }
}

impl BatchLimits {
    /// Refuses limits that would never let a batch hold a row.
    pub fn validate(&self) -> Result<()> {
        if self.max_rows == 0 || self.max_string_bytes == 0 {
            return Err(AsamError::Invalid(format!(
                "batch limits must be positive: {self:?}"
            )));
        }
        if self.max_string_bytes > i32::MAX as usize {
            return Err(AsamError::Invalid(format!(
                "max_string_bytes {} exceeds what i32 offsets address",
                self.max_string_bytes
            )));
        }
        Ok(())
    }
}

/// Bytes each string column of a row adds (qname, cigar, seq, qual, tags).
pub fn string_bytes(r: &Row<'_>) -> [usize; 5] {
    [
        r.qname.len(),
        r.cigar.len(),
        r.seq.len(),
        r.qual.len(),
        r.tags.len(),
    ]
}

/// Appends rows and finishes them into a record batch.
#[derive(Default)]
pub struct BatchBuilder {
    rows: usize,
    bytes: [usize; 5],
    qnames: StringBuilder,
    ints: [Int32Builder; 7],
    cigars: StringBuilder,
    seqs: StringBuilder,
    quals: StringBuilder,
    tagss: StringBuilder,
}

impl BatchBuilder {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Whether appending `r` would take the batch past `limits`. An empty
    /// builder always takes the row (a single oversized row is refused by
    /// Arrow when the batch is finished, not silently split).
    pub fn is_full_for(&self, r: &Row<'_>, limits: &BatchLimits) -> bool {
        if self.rows == 0 {
            return false;
        }
        self.rows >= limits.max_rows
            || self
                .bytes
                .iter()
                .zip(string_bytes(r))
                .any(|(have, add)| have + add > limits.max_string_bytes)
    }

    pub fn push(&mut self, r: &Row<'_>) {
        self.rows += 1;
        for (have, add) in self.bytes.iter_mut().zip(string_bytes(r)) {
            *have += add;
        }
        self.qnames.append_value(r.qname);
        let ints = [r.flags, r.rid, r.pos, r.mapq, r.rnext_id, r.pnext, r.tlen];
        for (b, v) in self.ints.iter_mut().zip(ints) {
            b.append_value(v);
        }
        self.cigars.append_value(r.cigar);
        self.seqs.append_value(r.seq);
        self.quals.append_value(r.qual);
        self.tagss.append_value(r.tags);
    }

    pub fn finish(mut self) -> Result<RecordBatch> {
        let mut ints: Vec<ArrayRef> = self
            .ints
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        let tlens = ints.remove(6);
        let pnexts = ints.remove(5);
        let rnexts = ints.remove(4);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.qnames.finish()),
            ints[0].clone(),
            ints[1].clone(),
            ints[2].clone(),
            ints[3].clone(),
            Arc::new(self.cigars.finish()),
            rnexts,
            pnexts,
            tlens,
            Arc::new(self.seqs.finish()),
            Arc::new(self.quals.finish()),
            Arc::new(self.tagss.finish()),
        ];
        RecordBatch::try_new(schema(), columns).map_err(|e| AsamError::arrow("build batch", e))
    }
}

/// Typed access to a batch's columns; fails if the batch is not ArrowSAM.
pub struct Columns<'a> {
    pub qnames: &'a StringArray,
    pub flags: &'a Int32Array,
    pub rids: &'a Int32Array,
    pub poss: &'a Int32Array,
    pub mapqs: &'a Int32Array,
    pub cigars: &'a StringArray,
    pub rnext_ids: &'a Int32Array,
    pub pnexts: &'a Int32Array,
    pub tlens: &'a Int32Array,
    pub seqs: &'a StringArray,
    pub quals: &'a StringArray,
    pub tagss: &'a StringArray,
}

impl<'a> Columns<'a> {
    pub fn of(b: &'a RecordBatch) -> Result<Self> {
        if b.schema().fields() != schema().fields() {
            return Err(AsamError::Invalid(format!(
                "batch does not have the ArrowSAM schema: {:?}",
                b.schema()
            )));
        }
        let s = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| AsamError::Invalid(format!("column {i} is not utf8")))
        };
        let n = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or_else(|| AsamError::Invalid(format!("column {i} is not int32")))
        };
        Ok(Columns {
            qnames: s(QNAMES)?,
            flags: n(FLAGS)?,
            rids: n(RIDS)?,
            poss: n(BEGIN_POSS)?,
            mapqs: n(MAPQS)?,
            cigars: s(CIGARS)?,
            rnext_ids: n(RNEXT_IDS)?,
            pnexts: n(PNEXTS)?,
            tlens: n(TLENS)?,
            seqs: s(SEQS)?,
            quals: s(QUALS)?,
            tagss: s(TAGSS)?,
        })
    }

    pub fn row(&self, i: usize) -> Row<'a> {
        Row {
            qname: self.qnames.value(i),
            flags: self.flags.value(i),
            rid: self.rids.value(i),
            pos: self.poss.value(i),
            mapq: self.mapqs.value(i),
            cigar: self.cigars.value(i),
            rnext_id: self.rnext_ids.value(i),
            pnext: self.pnexts.value(i),
            tlen: self.tlens.value(i),
            seq: self.seqs.value(i),
            qual: self.quals.value(i),
            tags: self.tagss.value(i),
        }
    }
}

/// The reference id all rows of an ArrowSAM batch share (-1: unplaced),
/// None for an empty batch.
pub fn batch_reference(b: &RecordBatch) -> Result<Option<i32>> {
    let c = Columns::of(b)?;
    Ok((b.num_rows() > 0).then(|| c.rids.value(0)))
}

/// The batches of each reference, wherever they are in `batches` (a
/// streaming loader emits a chromosome's batches between others'), in
/// reference order, unplaced (-1) last: `(reference id, batch indexes in
/// order)`. Empty batches belong to none.
pub fn chromosome_groups(batches: &[RecordBatch]) -> Result<Vec<(i32, Vec<usize>)>> {
    let mut groups: std::collections::BTreeMap<(bool, i32), Vec<usize>> = Default::default();
    for (i, b) in batches.iter().enumerate() {
        if let Some(rid) = batch_reference(b)? {
            groups.entry((rid < 0, rid)).or_default().push(i);
        }
    }
    Ok(groups
        .into_iter()
        .map(|((_, rid), idx)| (rid, idx))
        .collect())
}

/// The same batch with `flags` replaced: how a stage updates one column.
pub fn with_flags(b: &RecordBatch, flags: Int32Array) -> Result<RecordBatch> {
    let mut columns = b.columns().to_vec();
    columns[FLAGS] = Arc::new(flags);
    RecordBatch::try_new(b.schema(), columns).map_err(|e| AsamError::arrow("replace flags", e))
}
