//! The limits every configuration value and batch is checked against.

/// Largest data-parallel size accepted.
pub const MAX_DP: u32 = 65_536;
/// Largest context-parallel size accepted (DACP keeps per-CP-rank state on the stack).
pub const MAX_CP: u32 = 256;
/// Largest BucketSize (tokens per GPU per micro-batch) accepted: `2^31 - 1`.
pub const MAX_BUCKET: u32 = i32::MAX as u32;
/// Longest sequence accepted, in tokens: `2^31 - 1`.
pub const MAX_SEQ_LEN: u32 = i32::MAX as u32;
/// Most sequences in one global batch.
pub const MAX_SEQS: usize = 65_536;
/// Largest [`Config::pad_multiple`](crate::Config::pad_multiple).
pub const MAX_PAD_MULTIPLE: u32 = 65_536;

/// Largest `ModelShape::hidden` (and `kv_hidden`).
pub const MAX_HIDDEN: u32 = 1 << 16;
/// Largest `ModelShape::ffn`.
pub const MAX_FFN: u32 = 1 << 18;
/// Largest `ModelShape::layers`.
pub const MAX_LAYERS: u32 = 1 << 10;
/// Largest `ModelShape::vocab`.
pub const MAX_VOCAB: u32 = 1 << 22;
