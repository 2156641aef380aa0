//! Build a kernel from source (stub).
use super::descriptor::{Descriptor, SourceBuild};
use super::{KernelArtifact, KernelError};
use std::path::Path;
pub struct BuildKey {
    pub key: String,
}
pub fn key(_c: &Path, d: &Descriptor, _s: &SourceBuild) -> Result<BuildKey, KernelError> {
    Err(KernelError::Descriptor {
        path: d.path.clone(),
        message: "todo".into(),
    })
}
pub fn build(
    _c: &Path,
    d: &Descriptor,
    _s: &SourceBuild,
    _r: &Path,
    _p: &dyn Fn(&str),
) -> Result<KernelArtifact, KernelError> {
    Err(KernelError::Descriptor {
        path: d.path.clone(),
        message: "todo".into(),
    })
}
