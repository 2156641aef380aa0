//! The kernel ABI of the storage hooks (include/uapi/linux/chained_read.h
//! and the storage_chain parts of include/uapi/linux/bpf.h in the
//! `storage-hooks` patch series) and the scratch-word contract of the
//! programs in ebpf-programs/ (chain_abi.h). Keep all three in step.

/// x86_64 syscall number of chained_read(2).
pub const SYS_CHAINED_READ: libc::c_long = 451;
/// `IORING_OP_CHAINED_READ`: the first opcode after 6.1's `IORING_OP_SENDMSG_ZC`.
pub const IORING_OP_CHAINED_READ: u8 = 49;
/// `BPF_PROG_TYPE_STORAGE_CHAIN`: the first type after `BPF_PROG_TYPE_SYSCALL`.
pub const BPF_PROG_TYPE_STORAGE_CHAIN: u32 = 32;

/// `flags`: loop in the system-call layer.
pub const CHAINED_READ_SYSCALL: u32 = 1 << 0;
/// `flags`: re-send from the NVMe completion handler.
pub const CHAINED_READ_NVME: u32 = 1 << 1;
/// The kernel's hard cap on reads per chain, the first included.
pub const CHAINED_READ_MAX_HOPS: u32 = 32;

/// Program verdicts (`enum storage_chain_action`).
pub const STORAGE_CHAIN_DONE: u64 = 0;
pub const STORAGE_CHAIN_NEXT: u64 = 1;

/// Words of `storage_chain_ctx.scratch`.
pub const SCRATCH_WORDS: usize = 8;
pub type Scratch = [u64; SCRATCH_WORDS];

/// btree_lookup's scratch words (`BT_*` in chain_abi.h).
pub mod bt {
    pub const KEY: usize = 0;
    pub const VALUE: usize = 1;
    pub const PHASE: usize = 2;
    pub const ERROR: usize = 3;
    pub const NODES: usize = 4;

    /// Values of scratch[PHASE].
    pub const PHASE_NODES: u64 = 0;
    pub const PHASE_VALUE: u64 = 1;

    /// Why the program ended a lookup early (scratch[ERROR]; 0: it did not).
    pub const ERR_SHORT: u64 = 1;
    pub const ERR_NUM: u64 = 2;
    pub const ERR_TYPE: u64 = 3;
    pub const ERR_NO_CHILD: u64 = 4;
    pub const ERR_NO_KEY: u64 = 5;

    pub fn error_name(code: u64) -> &'static str {
        match code {
            0 => "none",
            ERR_SHORT => "block shorter than a node",
            ERR_NUM => "node count 0 or above the fanout",
            ERR_TYPE => "neither inner node nor leaf",
            ERR_NO_CHILD => "no child for the key",
            ERR_NO_KEY => "leaf does not hold the key",
            _ => "unknown error code",
        }
    }
}

/// synthetic_chain's scratch words (`SC_*` in chain_abi.h).
pub mod sc {
    pub const STATE: usize = 0;
    pub const SLOTS: usize = 1;
    pub const DEPTH: usize = 2;
    /// Out: xor of the first word of every block read.
    pub const SUM: usize = 3;

    /// The chain's offsets are multiples of this (4 KiB slots).
    pub const ALIGN: u64 = 4096;
}

/// hook_attacks `jump`: where to go next and what to return (`AT_*` in
/// chain_abi.h).
pub mod at {
    pub const NEXT: usize = 0;
    pub const VERDICT: usize = 1;
}

/// `struct chained_read_args`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChainArgs {
    pub fd: u32,
    pub prog_fd: u32,
    pub buf: u64,
    pub offset: u64,
    pub scratch: u64,
    pub size: u32,
    pub scratch_len: u32,
    pub flags: u32,
    pub max_hops: u32,
    /// Written back: offset of the last block read.
    pub final_offset: u64,
    /// Written back: reads done in the kernel, the first included.
    pub hops: u32,
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The header the BPF programs include.
    const CHAIN_ABI_H: &str = include_str!("../../../ebpf-programs/chain_abi.h");
    /// This file, to find every constant of the mirrored modules.
    const ABI_RS: &str = include_str!("abi.rs");

    /// Every constant of `bt`, `sc` and `at` under its C name
    /// (`bt::ERR_SHORT` is `BT_ERR_SHORT`), with its value.
    fn rust_constants() -> BTreeMap<&'static str, u64> {
        let as_u64 = |v: usize| v as u64;
        BTreeMap::from([
            ("BT_KEY", as_u64(bt::KEY)),
            ("BT_VALUE", as_u64(bt::VALUE)),
            ("BT_PHASE", as_u64(bt::PHASE)),
            ("BT_ERROR", as_u64(bt::ERROR)),
            ("BT_NODES", as_u64(bt::NODES)),
            ("BT_PHASE_NODES", bt::PHASE_NODES),
            ("BT_PHASE_VALUE", bt::PHASE_VALUE),
            ("BT_ERR_SHORT", bt::ERR_SHORT),
            ("BT_ERR_NUM", bt::ERR_NUM),
            ("BT_ERR_TYPE", bt::ERR_TYPE),
            ("BT_ERR_NO_CHILD", bt::ERR_NO_CHILD),
            ("BT_ERR_NO_KEY", bt::ERR_NO_KEY),
            ("SC_STATE", as_u64(sc::STATE)),
            ("SC_SLOTS", as_u64(sc::SLOTS)),
            ("SC_DEPTH", as_u64(sc::DEPTH)),
            ("SC_SUM", as_u64(sc::SUM)),
            ("SC_ALIGN", sc::ALIGN),
            ("AT_NEXT", as_u64(at::NEXT)),
            ("AT_VERDICT", as_u64(at::VERDICT)),
        ])
    }

    /// An integer literal of C: decimal, 0x hex or (leading 0) octal, with
    /// any U/L suffix.
    fn c_integer(text: &str) -> Option<u64> {
        let t = text.trim_end_matches(['u', 'U', 'l', 'L']);
        if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()
        } else if t.len() > 1 && t.starts_with('0') {
            u64::from_str_radix(&t[1..], 8).ok()
        } else {
            t.parse().ok()
        }
    }

    /// `#define NAME value` lines of a header, comments removed; a value
    /// that is not a plain integer (a macro of an expression) is an error,
    /// so the header cannot grow a constant this parser skips.
    fn c_defines(header: &str) -> BTreeMap<String, u64> {
        let mut text = String::new();
        let mut rest = header;
        while let Some(start) = rest.find("/*") {
            text.push_str(&rest[..start]);
            let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
            // Keep the line count for the messages below.
            text.extend(rest[start..end].chars().filter(|&c| c == '\n'));
            rest = &rest[end..];
        }
        text.push_str(rest);
        let mut out = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("").trim();
            let Some(def) = line.strip_prefix('#').map(str::trim_start) else {
                continue;
            };
            let Some(def) = def.strip_prefix("define") else {
                continue;
            };
            let mut words = def.split_whitespace();
            let (Some(name), value) = (words.next(), words.collect::<Vec<_>>().join(" ")) else {
                continue;
            };
            if value.is_empty() {
                continue; // an include guard
            }
            let v = c_integer(&value).unwrap_or_else(|| {
                panic!(
                    "chain_abi.h:{}: {name} = {value:?} is not an integer",
                    i + 1
                )
            });
            assert!(
                out.insert(name.to_string(), v).is_none(),
                "chain_abi.h: {name} defined twice"
            );
        }
        out
    }

    /// Names of the `pub const`s inside `pub mod bt|sc|at { ... }` of this
    /// file, as C names.
    fn mirrored_names_in_source() -> Vec<String> {
        let mut names = Vec::new();
        let mut module: Option<&str> = None;
        for line in ABI_RS.lines() {
            if line.starts_with("#[cfg(test)]") {
                break;
            }
            if let Some(m) = line.strip_prefix("pub mod ") {
                module = m
                    .strip_suffix(" {")
                    .filter(|m| ["bt", "sc", "at"].contains(m));
            } else if line == "}" {
                module = None;
            } else if let (Some(m), Some(c)) = (module, line.trim().strip_prefix("pub const ")) {
                let name = c.split(':').next().unwrap_or("").trim();
                names.push(format!("{}_{name}", m.to_uppercase()));
            }
        }
        names
    }

    #[test]
    fn the_header_and_the_mirror_agree() {
        let c = c_defines(CHAIN_ABI_H);
        let rust = rust_constants();
        assert!(c.len() >= 19, "too few #defines parsed: {c:?}");
        for (name, value) in &c {
            match rust.get(name.as_str()) {
                Some(r) => assert_eq!(
                    r, value,
                    "{name}: chain_abi.h says {value}, abi.rs says {r}"
                ),
                None => panic!("chain_abi.h defines {name} = {value}; abi.rs has no mirror"),
            }
        }
        for (name, value) in &rust {
            assert!(
                c.contains_key(*name),
                "abi.rs has {name} = {value}; chain_abi.h does not define it"
            );
        }
        // And the table above lists every constant of the mirrored modules.
        let in_source = mirrored_names_in_source();
        assert_eq!(in_source.len(), rust.len(), "{in_source:?}");
        for name in &in_source {
            assert!(
                rust.contains_key(name.as_str()),
                "{name} is not checked against chain_abi.h"
            );
        }
    }

    #[test]
    fn the_header_parser_reads_c() {
        let h = "#ifndef G\n#define G\n/* a\n b */ #define A 0x10 /* x */\n# define B\t010U\n#define C 7 // c\n#endif\n";
        let d = c_defines(h);
        assert_eq!(
            d,
            BTreeMap::from([("A".into(), 16), ("B".into(), 8), ("C".into(), 7)])
        );
    }

    #[test]
    fn error_names_cover_the_codes() {
        for code in [
            bt::ERR_SHORT,
            bt::ERR_NUM,
            bt::ERR_TYPE,
            bt::ERR_NO_CHILD,
            bt::ERR_NO_KEY,
        ] {
            assert_ne!(bt::error_name(code), "unknown error code");
        }
        assert_eq!(bt::error_name(0), "none");
        assert_eq!(bt::error_name(6), "unknown error code");
    }

    #[test]
    fn args_match_the_kernel_layout() {
        // 64 bytes, with the written-back fields where the header puts them.
        assert_eq!(std::mem::size_of::<ChainArgs>(), 64);
        assert_eq!(std::mem::offset_of!(ChainArgs, size), 32);
        assert_eq!(std::mem::offset_of!(ChainArgs, final_offset), 48);
        assert_eq!(std::mem::offset_of!(ChainArgs, hops), 56);
    }
}
