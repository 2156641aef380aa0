//! Handcrafted SAM records for the unit tests.

/// A header with two references and one read group.
pub const HEADER: &str = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:10000\n@SQ\tSN:chr2\tLN:10000\n@RG\tID:rg1\tSM:s\tLB:lib1\n";

/// One SAM line of a 10 bp read with qualities all `q`.
// One argument per SAM column keeps the test records readable.
#[allow(clippy::too_many_arguments)]
pub fn rec(
    name: &str,
    flags: u16,
    rname: &str,
    pos: u32,
    cigar: &str,
    rnext: &str,
    pnext: u32,
    q: char,
) -> String {
    let qual = q.to_string().repeat(10);
    format!(
        "{name}\t{flags}\t{rname}\t{pos}\t60\t{cigar}\t{rnext}\t{pnext}\t0\tACGTACGTAC\t{qual}\tRG:Z:rg1"
    )
}

/// A forward/reverse pair: read 1 forward at `p1`, read 2 reverse at `p2`.
pub fn pair(name: &str, p1: u32, p2: u32, q: char) -> [String; 2] {
    [
        rec(name, 99, "chr1", p1, "10M", "=", p2, q),
        rec(name, 147, "chr1", p2, "10M", "=", p1, q),
    ]
}
