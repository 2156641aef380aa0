//! The kinds of claim a figure's `[[claims]]` can make, one module each:
//! its TOML fields (checked as they are read), what it needs of its
//! panel, and how a run's data decides it (with the interval machinery
//! of `claims.rs`). A new kind is a module here and one line in the
//! `claim_kinds!` list below (EXTENDING.md, "Adding a claim kind").

use serde::{Deserialize, Serialize};

use super::claims::{Ctx, Outcome};
use super::def::Panel;

mod place;

pub use monotonic::Direction;
pub use place::{At, Bounds, Place};

/// What a claim kind does beyond holding its fields.
pub(super) trait Check {
    /// What the kind needs of its panel, checked when the figure is read
    /// (the reason, if it cannot work there).
    fn validate(&self, _panel: &Panel) -> Result<(), String> {
        Ok(())
    }

    /// The claim decided on its panel's data.
    fn decide(&self, ctx: &Ctx<'_>) -> Outcome;
}

/// The kinds: `module::Type = "name"`, each a module of this folder
/// whose type implements `Check`. Declares the modules and makes
/// `ClaimCheck` (what a claim checks, read from its `kind` key and that
/// kind's fields) and `ClaimKind` (its name).
macro_rules! claim_kinds {
    ($( $(#[$doc:meta])* $module:ident :: $Variant:ident = $name:literal ),* $(,)?) => {
        $( mod $module; pub use $module::$Variant; )*

        /// What a claim checks, by `kind`, with that kind's fields only
        /// (each kind's type refuses any other key).
        #[derive(Debug, Clone, Deserialize, Serialize)]
        #[serde(tag = "kind")]
        pub enum ClaimCheck {
            $( $(#[$doc])* #[serde(rename = $name)] $Variant($Variant), )*
        }

        /// The name of a claim's check (its `kind`), as results and
        /// reports show it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
        pub enum ClaimKind {
            $( #[serde(rename = $name)] $Variant, )*
        }

        impl ClaimKind {
            pub const ALL: &[ClaimKind] = &[$( ClaimKind::$Variant ),*];

            pub fn name(self) -> &'static str {
                match self {
                    $( ClaimKind::$Variant => $name, )*
                }
            }
        }

        impl ClaimCheck {
            pub fn kind(&self) -> ClaimKind {
                match self {
                    $( ClaimCheck::$Variant(_) => ClaimKind::$Variant, )*
                }
            }

            fn check(&self) -> &dyn Check {
                match self {
                    $( ClaimCheck::$Variant(c) => c, )*
                }
            }
        }
    };
}

claim_kinds! {
    /// The largest median of each series is at most `value`.
    max_le::MaxLe = "max_le",
    /// The smallest median of each series is at least `value`.
    min_ge::MinGe = "min_ge",
    /// Along x, no step goes the other way by more than `tolerance` × the
    /// previous value.
    monotonic::Monotonic = "monotonic",
    /// The series' median at one x is within bounds.
    value_at::ValueAt = "value_at",
    /// median(numerator) / median(denominator) at one x is within bounds.
    ratio_at::RatioAt = "ratio_at",
    /// A least-squares line through the medians has R² ≥ `r2_min`.
    linear_in_x::LinearInX = "linear_in_x",
    /// How much of `hook`'s gain over `baseline` remains over the best of
    /// `rivals` at one x.
    gain_remaining::GainRemaining = "gain_remaining",
}

impl ClaimCheck {
    /// What the kind needs of `panel` (the reason, if it cannot work there).
    pub fn validate(&self, panel: &Panel) -> Result<(), String> {
        self.check().validate(panel)
    }

    /// The claim decided on its panel's data.
    pub(super) fn decide(&self, ctx: &Ctx<'_>) -> Outcome {
        self.check().decide(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind in the list is a kind figure authors can find.
    #[test]
    fn every_kind_is_in_the_figures_claim_vocabulary() {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../experiments/figures/README.md"),
        )
        .unwrap();
        let missing: Vec<&str> = ClaimKind::ALL
            .iter()
            .map(|k| k.name())
            .filter(|n| !readme.contains(&format!("| `{n}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "experiments/figures/README.md has no row for {missing:?}"
        );
        assert_eq!(ClaimKind::ALL.len(), 7);
    }
}
