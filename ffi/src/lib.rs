//! # skrull-ffi: the C ABI of skrull
//!
//! `libskrull.a` / `libskrull.so` and the generated header `include/skrull.h` give C and C++
//! trainers the Skrull scheduler (NeurIPS 2025, arXiv 2505.19609): for every global batch,
//! **GDS** decides which data-parallel (DP) rank and micro-batch runs each sequence, and
//! **DACP** decides inside each micro-batch whether a sequence is sharded over the
//! context-parallel (CP) group (or, opt-in, an aligned sub-group of it) or kept whole on one CP
//! rank, so that compute is balanced and no
//! GPU exceeds its token budget.
//!
//! This crate is a thin translation layer over `skrull-core` (no scheduling logic):
//!
//! - [`status`]: `skrull_status` and its stable numbers; [`describe`]: `skrull_status_str()`,
//!   `skrull_status_name()` and `skrull_error_describe()`, the words for a status;
//! - [`config`]: `skrull_config` (extensible, `struct_size` first), option constants, presets;
//! - [`workspace`]: buffer sizing (`skrull_workspace_size()`, `skrull_plan_sizes()`);
//! - [`plan`]: the frozen output records and `skrull_plan_buffers`;
//! - [`schedule`]: `skrull_schedule()`; [`setup`]: the prepared form
//!   (`skrull_setup_init()`, `skrull_schedule_prepared()`) and `skrull_config_check()`;
//!   [`dacp`]: `skrull_dacp_place()`;
//! - [`refit`]: the online refit of the cost model from measured times
//!   (`skrull_refit_init()`, `skrull_refit_observe()`, `skrull_refit_solve()`);
//! - [`layout`]: one GPU's execution layout (`skrull_layout_sizes_max()`,
//!   `skrull_layout_sizes()`, `skrull_layout_fill()`);
//! - [`window`]: the outlier-delay window across global batches (`skrull_window_sizes()`,
//!   `skrull_window_init()`, `skrull_window_push()`, `skrull_window_step()`,
//!   `skrull_window_queue()`, `skrull_window_requeue()`);
//! - [`version`]: `SKRULL_ABI_VERSION`, `skrull_abi_version()`, `skrull_version()`;
//! - [`boundary`]: the panic guard every export runs inside, and pointer checks.
//!
//! Features: `std` (default) runs every export inside `catch_unwind`. Without it the crate
//! is `no_std` (no allocator, no system libraries; build with the `release-nostd` profile,
//! `panic = "abort"`) and a static or shared library needs one panic handler feature:
//! `panic-handler` (a trap instruction) or `panic-extern` (calls the program's
//! `skrull_on_panic()`). Same header, same statuses. See `docs/c_api.md`.
//!
//! Conventions (see `docs/c_api.md`): every fallible function returns a `skrull_status`
//! (0 = ok); outputs are written only on success; the caller lends every byte (no allocation
//! on the scheduling path, no global state, thread-safe with separate buffers); integers that
//! select options are validated, never trusted as Rust enums.
// `no_std` unless the `std` feature (the default) is on; unit tests always have std.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
// Types carry their C names exactly, so a grep for a header name lands on its definition.
#![allow(non_camel_case_types)]

pub mod boundary;
pub mod chunk_size;
pub mod config;
pub mod cost;
pub mod dacp;
pub mod describe;
pub mod error;
pub mod layout;
pub mod layout_many;
pub mod plan;
pub mod refit;
pub mod schedule;
pub mod setup;
pub mod shape;
pub mod sized;
pub mod spans;
pub mod status;
pub mod version;
pub mod window;
pub mod workspace;

pub use boundary::skrull_panic_selftest;
pub use chunk_size::skrull_chunk_size_default;
pub use config::{
    SKRULL_CONFIG_SIZE_V1, SKRULL_FLOPS_MEGATRON, SKRULL_FLOPS_PAPER, SKRULL_MAX_PAD_MULTIPLE,
    SKRULL_MAX_STRUCT_SIZE, SKRULL_POLICY_BALANCED, SKRULL_POLICY_CHUNKFLOW,
    SKRULL_POLICY_DEEPSPEED, SKRULL_POLICY_PACKED, SKRULL_POLICY_ROUNDROBIN, SKRULL_POLICY_SKRULL,
    SKRULL_PRESET_QWEN2_5_0_5B, SKRULL_PRESET_QWEN2_5_7B, SKRULL_SHARD_PADDING_NONE,
    SKRULL_SHARD_PADDING_ZIGZAG, SKRULL_SYNC_CP_GROUP, SKRULL_SYNC_EVERY_GPU, SKRULL_SYNC_SHARDED,
    SKRULL_VICTIM_LONGEST, SKRULL_VICTIM_SHORTEST, skrull_config, skrull_config_default,
    skrull_config_init, skrull_config_preset, skrull_config_preset_init, skrull_model_shape,
};
pub use cost::{
    SKRULL_ATTENTION_POINTS, SKRULL_COST_MODEL_SIZE_V1, SKRULL_COST_MODEL_SIZE_V2,
    SKRULL_COST_MODEL_SIZE_V3, SKRULL_GPU_H100, SKRULL_GPU_H200, SKRULL_OVERLAP_ALL_ATTENTION,
    SKRULL_OVERLAP_LOCAL_ATTENTION, skrull_cost_model, skrull_cost_model_preset,
};
pub use dacp::{skrull_dacp_place, skrull_dacp_summary};
pub use describe::{
    SKRULL_DETAIL_LIMIT, SKRULL_DETAIL_VALUE, skrull_error_describe, skrull_error_details,
    skrull_error_field_name, skrull_status_name, skrull_status_str,
};
pub use error::skrull_error_info;
pub use layout::{
    SKRULL_MAX_RINGS, SKRULL_NO_MICRO_BATCH, skrull_gpu, skrull_layout, skrull_layout_buffers,
    skrull_layout_capacity, skrull_layout_fill, skrull_layout_ring, skrull_layout_sizes,
    skrull_layout_sizes_max, skrull_span,
};
pub use layout_many::skrull_layout_fill_many;
pub use plan::{
    SKRULL_CHUNKED, SKRULL_SHARDED, skrull_cp_group, skrull_micro_batch, skrull_placement,
    skrull_plan_buffers, skrull_sizes, skrull_summary,
};
pub use refit::{
    SKRULL_REFIT_ADOPTED, SKRULL_REFIT_ATTENTION, SKRULL_REFIT_COEFFICIENTS, SKRULL_REFIT_FIXED,
    SKRULL_REFIT_GEMM, SKRULL_REFIT_HIGH_ERROR, SKRULL_REFIT_INTER_BANDWIDTH,
    SKRULL_REFIT_INTER_LATENCY, SKRULL_REFIT_INTRA_BANDWIDTH, SKRULL_REFIT_INTRA_LATENCY,
    SKRULL_REFIT_KEEP_OVERLAP, SKRULL_REFIT_LAST_MICRO_BATCH, SKRULL_REFIT_LOCAL_SEQUENCE,
    SKRULL_REFIT_MAX_WINDOW, SKRULL_REFIT_NO_DATA, SKRULL_REFIT_NOT_BETTER, SKRULL_REFIT_OVERLAP,
    SKRULL_REFIT_PARAMS_SIZE_V1, SKRULL_REFIT_PARAMS_SIZE_V2, SKRULL_REFIT_REPORT_SIZE_V1,
    SKRULL_REFIT_REPORT_SIZE_V2, SKRULL_REFIT_REPORT_SIZE_V3, SKRULL_REFIT_SCALE_ONLY,
    SKRULL_REFIT_SHARDED_SEQUENCE, SKRULL_REFIT_UNVALIDATED, skrull_refit_init,
    skrull_refit_observe, skrull_refit_observe_step_time, skrull_refit_params,
    skrull_refit_params_default, skrull_refit_report, skrull_refit_size, skrull_refit_solve,
};
pub use schedule::skrull_schedule;
pub use setup::{
    skrull_config_check, skrull_schedule_prepared, skrull_setup, skrull_setup_init,
    skrull_setup_size,
};
pub use status::skrull_status;
pub use version::{SKRULL_ABI_VERSION, skrull_abi_version, skrull_version};
pub use window::{
    SKRULL_WINDOW_MAX_DELAY, SKRULL_WINDOW_PARAMS_SIZE_V1, skrull_window_capacity,
    skrull_window_deferred, skrull_window_init, skrull_window_params, skrull_window_push,
    skrull_window_queue, skrull_window_requeue, skrull_window_sizes, skrull_window_step,
    skrull_window_step_info,
};
pub use workspace::{skrull_plan_sizes, skrull_workspace_size};
