//! Handcrafted SAM records for the unit tests: the markdup cases' own
//! header and record builders.

pub use crate::markdup::cases::{HEADER, pair, rec};
