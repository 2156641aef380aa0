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

/// Appends rows and finishes them into a record batch.
#[derive(Default)]
pub struct BatchBuilder {
    qnames: StringBuilder,
    ints: [Int32Builder; 7],
    cigars: StringBuilder,
    seqs: StringBuilder,
    quals: StringBuilder,
    tagss: StringBuilder,
}

impl BatchBuilder {
    pub fn push(&mut self, r: &Row<'_>) {
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

/// The same batch with `flags` replaced: how a stage updates one column.
pub fn with_flags(b: &RecordBatch, flags: Int32Array) -> Result<RecordBatch> {
    let mut columns = b.columns().to_vec();
    columns[FLAGS] = Arc::new(flags);
    RecordBatch::try_new(b.schema(), columns).map_err(|e| AsamError::arrow("replace flags", e))
}
