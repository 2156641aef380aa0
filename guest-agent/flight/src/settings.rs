//! The knobs that limit Flight throughput, as one struct the run manifest
//! records (it serialises to JSON) and both server and client apply.

/// The enums and the settings struct are the vocabulary's (the agent names
/// them in its requests); what they do is here.
pub use testbed_vocab::request::flight::{Compression, Op, Profile, TransportSettings};

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

/// RFC 7540's bounds on the settings, checked before a server or client
/// starts with them.
pub fn validate(settings: &TransportSettings) -> Result<(), crate::FlightError> {
    let s = settings;
    // RFC 7540 bounds on SETTINGS_MAX_FRAME_SIZE.
    if !(16_384..=16_777_215).contains(&s.max_frame_bytes) {
        return Err(crate::FlightError::Param(format!(
            "max_frame_bytes {} outside 16384..=16777215",
            s.max_frame_bytes
        )));
    }
    if s.stream_window_bytes == 0 || s.connection_window_bytes == 0 {
        return Err(crate::FlightError::Param("window sizes must be > 0".into()));
    }
    Ok(())
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
        assert!(validate(&s).is_ok());
        let bad = TransportSettings {
            max_frame_bytes: 1000,
            ..s
        };
        assert!(
            validate(&bad)
                .unwrap_err()
                .to_string()
                .contains("max_frame_bytes")
        );
    }
}
