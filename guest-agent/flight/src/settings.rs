//! The knobs that limit Flight throughput, as one struct the run manifest
//! records (it serialises to JSON) and both server and client apply.

use serde::{Deserialize, Serialize};

/// IPC body compression of record batches (Arrow IPC codecs, not gRPC's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Which Flight call a bulk benchmark drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    #[default]
    Get,
    Put,
    Exchange,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::Exchange => "exchange",
        }
    }
}

/// HTTP/2 and gRPC settings. tonic's defaults (64 KiB windows, 4 MiB
/// decode limit, 16 KiB frames) cap one stream far below what TCP carries:
/// pyarrow's client put into our server at 224–330 MB/s with them against
/// 345–576 MB/s into pyarrow's own, and at 599–1065 MB/s with the fixed
/// 32/64 MiB windows and 1 MiB frames testbed-flight ships with (host
/// loopback, 5 repetitions each; hyper's adaptive window reached 157–475).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
pub struct TransportSettings {
    /// gRPC message size limit for encoding and decoding, both sides.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_message_bytes: usize,
    /// HTTP/2 initial stream window (ignored with --adaptive-window).
    #[arg(long, default_value_t = 32 << 20)]
    pub stream_window_bytes: u32,
    /// HTTP/2 initial connection window (ignored with --adaptive-window).
    #[arg(long, default_value_t = 64 << 20)]
    pub connection_window_bytes: u32,
    /// Let hyper size windows from BDP estimates instead of the fixed ones.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub adaptive_window: bool,
    /// HTTP/2 max frame size advertised (16 KiB .. 16 MiB - 1).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_frame_bytes: u32,
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub tcp_nodelay: bool,
    /// Encode the benchmark batch once and re-send the same bytes (what
    /// C++'s zero-copy IPC payloads amount to). Compressed streams are
    /// always re-encoded per batch so compression cost is measured.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub reuse_encoded_batch: bool,
    /// Decode received bodies in place (no copy into a fresh aligned buffer
    /// unless a column buffer is misaligned for its type).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub zero_copy_decode: bool,
    /// Raise glibc malloc's mmap and trim thresholds so the per-message
    /// buffers (up to a few MB) are reused instead of mapped and faulted in
    /// anew each time. Process-wide; applied by the CLI commands.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub malloc_tuning: bool,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            max_message_bytes: 1 << 30,
            stream_window_bytes: 32 << 20,
            connection_window_bytes: 64 << 20,
            adaptive_window: false,
            max_frame_bytes: 1 << 20,
            tcp_nodelay: true,
            reuse_encoded_batch: true,
            zero_copy_decode: true,
            malloc_tuning: true,
        }
    }
}

/// Which transport settings a run uses.
///
/// - `tuned`: testbed-flight's flags as given (their defaults are what it
///   ships with); pyarrow's client gets gRPC C++'s nearest channel
///   arguments (32 MiB lookahead, 1 MiB frames).
/// - `defaults`: each implementation as it ships, whatever the flags say:
///   testbed-flight's shipped settings ([`TransportSettings::default`]),
///   pyarrow with no channel arguments.
/// - `library`: tonic's and hyper's own settings for ours (64 KiB windows,
///   16 KiB frames: what testbed-flight shipped with before it chose its
///   own), pyarrow as under `defaults`.
///
/// pyarrow's server has no knobs and runs its defaults under all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    #[default]
    Tuned,
    Defaults,
    Library,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Tuned => "tuned",
            Profile::Defaults => "defaults",
            Profile::Library => "library",
        }
    }

    /// The settings of this profile: `tuned` keeps `flags` as given.
    pub fn apply(self, flags: TransportSettings) -> TransportSettings {
        match self {
            Profile::Tuned => flags,
            Profile::Defaults => TransportSettings::default(),
            Profile::Library => TransportSettings::library_defaults(),
        }
    }
}

/// glibc mallopt(3) parameters.
#[cfg(target_env = "gnu")]
const M_TRIM_THRESHOLD: libc::c_int = -1;
#[cfg(target_env = "gnu")]
const M_TOP_PAD: libc::c_int = -2;
#[cfg(target_env = "gnu")]
const M_MMAP_THRESHOLD: libc::c_int = -3;

/// Applies [`TransportSettings::malloc_tuning`] to this process.
pub fn tune_malloc(settings: &TransportSettings) {
    #[cfg(target_env = "gnu")]
    if settings.malloc_tuning {
        // SAFETY: mallopt only changes allocator thresholds; it is called
        // before the runtime starts threads.
        unsafe {
            libc::mallopt(M_MMAP_THRESHOLD, 64 << 20);
            libc::mallopt(M_TRIM_THRESHOLD, 256 << 20);
            libc::mallopt(M_TOP_PAD, 64 << 20);
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = settings;
}

impl TransportSettings {
    /// What tonic and hyper use when nobody tunes them: 64 KiB - 1 windows,
    /// 16 KiB frames, tonic's 4 MiB decode limit, glibc malloc as it is.
    /// TCP_NODELAY stays on (tonic's client and gRPC C++ both set it), and
    /// so do the two zero-copy choices: they are how this implementation
    /// handles its buffers, as C++ Flight does, not transport settings.
    pub fn library_defaults() -> Self {
        TransportSettings {
            max_message_bytes: 4 << 20,
            stream_window_bytes: 65_535,
            connection_window_bytes: 65_535,
            adaptive_window: false,
            max_frame_bytes: 16_384,
            tcp_nodelay: true,
            reuse_encoded_batch: true,
            zero_copy_decode: true,
            malloc_tuning: false,
        }
    }

    pub fn validate(&self) -> Result<(), crate::FlightError> {
        // RFC 7540 bounds on SETTINGS_MAX_FRAME_SIZE.
        if !(16_384..=16_777_215).contains(&self.max_frame_bytes) {
            return Err(crate::FlightError::Param(format!(
                "max_frame_bytes {} outside 16384..=16777215",
                self.max_frame_bytes
            )));
        }
        if self.stream_window_bytes == 0 || self.connection_window_bytes == 0 {
            return Err(crate::FlightError::Param("window sizes must be > 0".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_serialise_for_the_manifest_and_validate() {
        let s = TransportSettings::default();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["max_message_bytes"], 1 << 30);
        assert_eq!(v["stream_window_bytes"], 32 << 20);
        assert_eq!(v["tcp_nodelay"], true);
        let back: TransportSettings = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        assert!(s.validate().is_ok());
        let bad = TransportSettings {
            max_frame_bytes: 1000,
            ..s
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("max_frame_bytes")
        );
    }
}
