//! The truth VCF (the sample's genotypes) and the known-sites VCF (a
//! dbSNP-like sites-only file BQSR masks), both VCFv4.2, sorted in the
//! reference's contig order, with no date or path in the header so the
//! files depend on the parameters only.

use std::io::Write;
use std::path::Path;

use super::genome::Genome;
use super::variants::{Site, Variant};
use crate::{AsamError, Result};

fn header(w: &mut impl Write, genome: &Genome, reference: &str) -> std::io::Result<()> {
    writeln!(w, "##fileformat=VCFv4.2")?;
    writeln!(
        w,
        "##source=testbed-asam-data-v{}",
        super::GENERATOR_VERSION
    )?;
    writeln!(w, "##reference={reference}")?;
    for c in &genome.contigs {
        writeln!(w, "##contig=<ID={},length={}>", c.name, c.seq.len())?;
    }
    writeln!(
        w,
        "##INFO=<ID=VT,Number=1,Type=String,Description=\"Variant type: SNP or INDEL\">"
    )
}

fn vt(reference: &[u8], alt: &[u8]) -> &'static str {
    if reference.len() == 1 && alt.len() == 1 {
        "SNP"
    } else {
        "INDEL"
    }
}

/// The truth set of `sample`, genotypes phased (haplotype 1 | 2).
pub fn write_truth(
    path: &Path,
    genome: &Genome,
    variants: &[Variant],
    reference: &str,
    sample: &str,
) -> Result<()> {
    let io = |e| AsamError::io(path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    header(&mut w, genome, reference).map_err(io)?;
    writeln!(
        w,
        "##FORMAT=<ID=GT,Number=1,Type=String,Description=\"Genotype\">\n\
         #CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t{sample}"
    )
    .map_err(io)?;
    for v in variants {
        let g = |b: bool| if b { '1' } else { '0' };
        writeln!(
            w,
            "{}\t{}\t.\t{}\t{}\t50\tPASS\tVT={}\tGT\t{}|{}",
            genome.contigs[v.contig].name,
            v.pos + 1,
            String::from_utf8_lossy(&v.reference),
            String::from_utf8_lossy(&v.alt),
            vt(&v.reference, &v.alt),
            g(v.gt[0]),
            g(v.gt[1])
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Known sites, sites-only, IDs rs1, rs2, ... in file order.
pub fn write_known_sites(
    path: &Path,
    genome: &Genome,
    sites: &[Site],
    reference: &str,
) -> Result<()> {
    let io = |e| AsamError::io(path, e);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    header(&mut w, genome, reference).map_err(io)?;
    writeln!(w, "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO").map_err(io)?;
    for (i, s) in sites.iter().enumerate() {
        writeln!(
            w,
            "{}\t{}\trs{}\t{}\t{}\t.\t.\tVT={}",
            genome.contigs[s.contig].name,
            s.pos + 1,
            i + 1,
            String::from_utf8_lossy(&s.reference),
            String::from_utf8_lossy(&s.alt),
            vt(&s.reference, &s.alt)
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}
