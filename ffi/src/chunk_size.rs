//! `skrull_chunk_size_default()`: the ChunkSize a caller uses when it gives none (the rule
//! lives in the core, `Config::default_chunk_size`; the CLI and the Python binding ask it
//! through here or directly).

use crate::boundary::{Span, guard};
use crate::config::{config_failure, read_config_unchecked, skrull_config};
use crate::error::{Failure, finish, skrull_error_info};
use crate::spans::{config_spans, details_target};
use crate::status::skrull_status;

/// Writes to `*chunk_size` the default ChunkSize of `config` for sequences of up to `longest`
/// tokens (0: the longest the layout accepts sharded, `cp x bucket_tokens` less padding): the
/// largest power of two below `longest` (at most 2^30) whose chunked peak fits
/// `bucket_tokens` on the GPUs the policy chunks on (the whole CP group for
/// `SKRULL_POLICY_CHUNKFLOW`, one GPU otherwise), with the configuration's `chunk_keep` and
/// `chunk_state_permille`; 1 when `longest` is at most 1. `config->chunk_size` is ignored
/// (it may be 0, as `chunkflow` callers have it before they ask); every other field is
/// checked as `skrull_config_check()` checks it.
///
/// Returns `SKRULL_STATUS_OK`, a configuration status (`NULL_ARG`, `BAD_STRUCT_SIZE`,
/// `INVALID_DP`, ...), `SKRULL_STATUS_NULL_ARG` for a NULL `chunk_size`, `INVALID_ARG` for a
/// misaligned one or one that overlaps the configuration, or `SKRULL_STATUS_NO_CHUNK_SIZE`
/// when not even one-token chunks fit (details: `value` the longest sequence, `limit` the
/// tokens per GPU it would hold). Writes `*chunk_size` only on success, and the details to
/// `error` (unless NULL, misaligned or overlapping another argument) only on failure.
///
/// # Safety
/// `config`, unless NULL, points to a `skrull_config` whose `struct_size` bytes are readable
/// (and its `cost_model`, unless NULL, to a readable `skrull_cost_model`); `chunk_size`,
/// unless NULL, is writable; `error`, unless NULL, points to a writable `skrull_error_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_chunk_size_default(
    config: *const skrull_config,
    longest: u32,
    chunk_size: *mut u32,
    error: *mut skrull_error_info,
) -> skrull_status {
    guard(|| {
        // SAFETY: forwarded caller contract.
        let r = unsafe { body(config, longest, chunk_size) };
        // SAFETY: forwarded caller contract for `config`.
        let [cfg, cost] = unsafe { config_spans(config) };
        let others = [cfg, cost, Span::clamped(chunk_size.cast_const(), 1)];
        // SAFETY: `error` is checked for alignment in `finish`; writable by contract.
        unsafe { finish(r, details_target(error, &others)) }
    })
}

/// The body of [`skrull_chunk_size_default`].
///
/// # Safety
/// As [`skrull_chunk_size_default`].
unsafe fn body(
    config: *const skrull_config,
    longest: u32,
    chunk_size: *mut u32,
) -> Result<(), Failure> {
    // SAFETY: forwarded caller contract.
    let cfg = unsafe { read_config_unchecked(config) }?;
    // Every other field is checked as the plan will check it; the chunk size is what is asked.
    let mut probe = cfg;
    probe.chunking.size = 1;
    probe.validate().map_err(config_failure)?;
    if chunk_size.is_null() {
        return Err(skrull_status::NullArg.into());
    }
    let out = Span::of(chunk_size.cast_const(), 1).ok_or(skrull_status::InvalidArg)?;
    // SAFETY: forwarded caller contract for `config`.
    let [cfg_span, _] = unsafe { config_spans(config) };
    if !chunk_size.is_aligned() || out.overlaps(cfg_span) {
        return Err(skrull_status::InvalidArg.into());
    }
    let size = cfg.default_chunk_size(longest)?;
    // SAFETY: non-null, aligned (checked), writable (caller contract).
    unsafe { chunk_size.write(size) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SKRULL_POLICY_CHUNKFLOW, skrull_config};

    fn chunkflow(dp: u32, cp: u32, bucket: u32) -> skrull_config {
        let mut c = skrull_config::preset(1).unwrap();
        (c.dp, c.cp, c.bucket_tokens) = (dp, cp, bucket);
        c.policy = SKRULL_POLICY_CHUNKFLOW;
        c.chunk_size = 0;
        c
    }

    /// Regression: a C caller asks the same default the CLI and Python use; at DP 2 x CP 16
    /// (7B, 13,312 tokens) it exists (the chunk runs over the whole group) and plans.
    #[test]
    fn the_default_of_a_chunkflow_config_at_cp_16() {
        let c = chunkflow(2, 16, 13_312);
        let mut size = 0u32;
        let mut info = skrull_error_info::of_status(skrull_status::Ok);
        // SAFETY: live, aligned structs.
        let s = unsafe { skrull_chunk_size_default(&c, 0, &mut size, &mut info) };
        assert_eq!((s, size), (skrull_status::Ok, 8192));
        let mut with = c;
        with.chunk_size = size;
        // SAFETY: as above.
        let s = unsafe { crate::setup::skrull_config_check(&with, &mut info) };
        assert_eq!(s, skrull_status::Ok);
    }

    #[test]
    fn no_chunk_size_reports_the_numbers_and_bad_arguments_are_statuses() {
        let mut c = chunkflow(1, 1, 1000);
        c.chunk_state_permille = 1000;
        let mut size = 7u32;
        let mut info = skrull_error_info::of_status(skrull_status::Ok);
        // SAFETY: live, aligned structs.
        let s = unsafe { skrull_chunk_size_default(&c, 0, &mut size, &mut info) };
        assert_eq!(s, skrull_status::NoChunkSize);
        assert_eq!(size, 7, "nothing written on failure");
        assert_eq!((info.status, info.value), (26, 1000));
        assert!(info.limit > 1000);
        // SAFETY: NULL arguments are refused before anything is read through them.
        let s = unsafe {
            skrull_chunk_size_default(core::ptr::null(), 0, &mut size, core::ptr::null_mut())
        };
        assert_eq!(s, skrull_status::NullArg);
        let ok = chunkflow(1, 8, 26_624);
        // SAFETY: as above.
        let s = unsafe {
            skrull_chunk_size_default(&ok, 0, core::ptr::null_mut(), core::ptr::null_mut())
        };
        assert_eq!(s, skrull_status::NullArg);
        // A bad DP is the configuration's error, as skrull_config_check reports it.
        let bad = chunkflow(0, 8, 26_624);
        // SAFETY: as above.
        let s = unsafe { skrull_chunk_size_default(&bad, 0, &mut size, &mut info) };
        assert_eq!(s, skrull_status::InvalidDp);
    }
}
