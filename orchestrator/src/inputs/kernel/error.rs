//! The one error type of the kernel module.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("kernel descriptor {path}: {message}")]
    Descriptor { path: PathBuf, message: String },

    #[error("no kernel descriptor named `{name}`: {path} does not exist (known: {known})")]
    UnknownDescriptor {
        name: String,
        path: PathBuf,
        known: String,
    },

    #[error("`{tool}` is needed but could not be run ({source}); install it with: {hint}")]
    ToolMissing {
        tool: String,
        hint: String,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "pinned package {package}={version} (kernel descriptor {descriptor}) cannot be downloaded: {apt_said}\n\
         Run `apt-get update` first. If the archive no longer has this version, either give \
         the pinned file yourself (from snapshot.debian.org or another mirror): \
         `{var}=/path/to/{package}_{version}_all.deb` (or the tarball it holds), checked against \
         the pin's sha256; or update the pin in {descriptor}: pick a version from \
         `apt-cache policy {package}` and set `version` and `sha256` (from \
         `apt-cache show {package}=<version> | grep SHA256`).",
        var = crate::inputs::kernel::apt::local_source_var(.package)
    )]
    PinnedVersionUnavailable {
        package: String,
        version: String,
        descriptor: PathBuf,
        apt_said: String,
    },

    #[error(
        "{var}={path}: its sha256 is {actual}, but {pinned}; give the file whose sha256 is \
         the pinned one, or unset {var}"
    )]
    LocalSourceMismatch {
        var: String,
        path: PathBuf,
        /// What the descriptor pins: its file, field, hash, package and version.
        pinned: String,
        actual: String,
    },

    #[error(
        "sha256 mismatch for {path}: expected {expected} (pinned in {descriptor}, field `{field}`), got {actual}"
    )]
    Checksum {
        path: PathBuf,
        descriptor: PathBuf,
        field: String,
        expected: String,
        actual: String,
    },

    #[error("{path}: not a usable Debian package: {message}")]
    Deb { path: PathBuf, message: String },

    #[error("{path}: cannot read module info: {message}")]
    ModInfo { path: PathBuf, message: String },

    #[error("module `{name}` is neither built in nor present under {dir}{needed_by}")]
    ModuleNotFound {
        name: String,
        dir: PathBuf,
        needed_by: String,
    },

    #[error("module dependency cycle: {cycle}")]
    ModuleCycle { cycle: String },

    #[error("kernel `{name}` has no modules directory but modules were asked for: {wanted}")]
    NoModules { name: String, wanted: String },

    #[error("cached kernel {dir} is damaged: {message}; delete that directory to rebuild it")]
    CacheDamaged { dir: PathBuf, message: String },

    #[error(
        "kernel `{name}` failed to build earlier in this run; not building it again:\n{reason}"
    )]
    FailedEarlier { name: String, reason: String },

    #[error("{0}")]
    ToolsMissing(String),

    #[error("patch {patch} does not apply: {details}")]
    PatchFailed { patch: PathBuf, details: String },

    #[error("kernel config check failed for {descriptor}:\n{report}")]
    ConfigDropped { descriptor: PathBuf, report: String },

    #[error("`{command}` failed ({status}) in {dir}; last output:\n{tail}")]
    CommandFailed {
        command: String,
        dir: PathBuf,
        status: String,
        tail: String,
    },

    #[error("{path}: {message}")]
    Json { path: PathBuf, message: String },

    #[error("interrupted before `{command}` finished")]
    Interrupted { command: String },
}

impl KernelError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        KernelError::Io {
            path: path.into(),
            source,
        }
    }
}
