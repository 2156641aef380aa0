//! Named size presets. A preset is a full [`DataSpec`]; any field can be
//! overridden after it is chosen (the CLI's flags do).
//!
//! | size   | scale  | genome  | coverage | pairs (WGS) |
//! |--------|--------|---------|----------|-------------|
//! | tiny   | 1/4000 | ~0.8 Mb | 4×       | ~16 k       |
//! | small  | 1/200  | ~15 Mb  | 10×      | ~0.8 M      |
//! | medium | 1/30   | ~100 Mb | 20×      | ~10 M       |
//! | paper  | user files (see `prepare::UserInput`) |
//!
//! `tiny` is sized for CI under QEMU TCG: generation takes well under a
//! second natively and bwa mem a few seconds at 2 threads.

use super::{DataSpec, Mode};

pub const NAMES: [&str; 4] = ["tiny", "small", "medium", "paper"];

/// The `tiny` preset: the shape every other preset shares.
pub fn tiny() -> DataSpec {
    DataSpec {
        name: "tiny".into(),
        scale: 1.0 / 4000.0,
        contigs: 25,
        coverage: 4.0,
        read_length: 100,
        fragment_mean: 300.0,
        fragment_sd: 30.0,
        dup_rate: 0.1,
        optical_fraction: 0.1,
        libraries: 2,
        lanes: 2,
        mode: Mode::Wgs,
        off_target: 0.1,
        chimera_rate: 0.003,
        contaminant_rate: 0.002,
        short_fragment_rate: 0.005,
        sample: "sim".into(),
        seed: 1,
    }
}

/// The preset `name`; `paper` is the `medium` shape (its files come from
/// the user, so only its name and read groups matter).
pub fn preset(name: &str) -> Option<DataSpec> {
    let (scale, coverage) = match name {
        "tiny" => (1.0 / 4000.0, 4.0),
        "small" => (1.0 / 200.0, 10.0),
        "medium" | "paper" => (1.0 / 30.0, 20.0),
        _ => return None,
    };
    Some(DataSpec {
        name: name.to_string(),
        scale,
        coverage,
        ..tiny()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_preset_exists_and_is_valid() {
        for n in NAMES {
            let p = preset(n).unwrap();
            p.validate().unwrap();
            assert_eq!(p.name, n);
        }
        assert!(preset("huge").is_none());
    }
}
