//! `skrull_cost_model`: the cost model (hardware, kernels, topology) a C caller passes through
//! `skrull_config.cost_model`, its presets, and its translation to the core's `CostModel`.
//! `balanced` plans on it; NULL keeps the H100 preset for the configuration's model shape.

use core::mem::size_of;

use skrull_core::config::cost::{ATTN_POINTS, AttentionTable, Overlap};
use skrull_core::{CostModel, ModelShape};

use crate::boundary::guard;
use crate::error::Failure;
use crate::shape::skrull_model_shape;
use crate::sized::read_sized;
use crate::status::skrull_status;

/// GPU preset: H100 SXM5 (the default, 0).
pub const SKRULL_GPU_H100: u32 = 0;
/// GPU preset: H200 (H100 compute and interconnect, 4.8 TB/s HBM).
pub const SKRULL_GPU_H200: u32 = 1;

/// Overlap: the CP communication hides behind the local attention of each rank (the paper's
/// model, the default, 0).
pub const SKRULL_OVERLAP_LOCAL_ATTENTION: u32 = 0;
/// Overlap: it hides behind the local and the sharded attention.
pub const SKRULL_OVERLAP_ALL_ATTENTION: u32 = 1;

/// Points of the attention-throughput table.
pub const SKRULL_ATTENTION_POINTS: usize = 6;

const _: () = assert!(SKRULL_ATTENTION_POINTS == ATTN_POINTS);

/// Every coefficient of the time model (`docs/cost_model.md`), `struct_size` first: fill it
/// with `skrull_cost_model_preset()`, change fields, and point `skrull_config.cost_model` at
/// it. Version 1 is 264 bytes, version 2 (`sharded_sequence_s` appended) 272, version 3
/// (`local_sequence_s`) 280. Every call
/// that reads a configuration checks the cost model it points at, whatever the policy
/// (`SKRULL_STATUS_INVALID_COST_MODEL`, with the field's position in the error details),
/// though only `balanced` plans with it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct skrull_cost_model {
    /// `sizeof(skrull_cost_model)`.
    pub struct_size: u32,
    /// Query tile the attention kernel pads to, tokens (> 0).
    pub attention_tile: u32,
    /// Dense BF16 peak of one GPU, FLOP/s (> 0).
    pub peak_flops: f64,
    /// Fraction of the peak the GEMMs reach when compute-bound, in (0, 1].
    pub gemm_efficiency: f64,
    /// HBM bandwidth, bytes/s (> 0).
    pub hbm_bandwidth: f64,
    /// Bytes per weight (>= 0).
    pub weight_bytes: f64,
    /// Times the weights stream from HBM per micro-batch (>= 0).
    pub weight_passes: f64,
    /// Attention query lengths of the throughput table, tokens, strictly increasing.
    pub attention_seqlen: [u32; SKRULL_ATTENTION_POINTS],
    /// Forward attention throughput at each length, FLOP/s (> 0; need not increase with the
    /// length: a falling column is accepted).
    pub attention_fwd_flops: [f64; SKRULL_ATTENTION_POINTS],
    /// Backward attention throughput at each length, FLOP/s (> 0; need not increase).
    pub attention_bwd_flops: [f64; SKRULL_ATTENTION_POINTS],
    /// Backward attention FLOPs per forward FLOP (>= 0).
    pub attention_bwd_ratio: f64,
    /// Bytes per K or V element (>= 0).
    pub kv_element_bytes: f64,
    /// K/V ring passes per layer (>= 0).
    pub comm_passes: f64,
    /// One ring step inside a node, seconds (>= 0).
    pub ring_step_latency_s: f64,
    /// One ring step across nodes, seconds (>= 0).
    pub inter_node_ring_step_latency_s: f64,
    /// Per-GPU receive bandwidth inside a node, bytes/s (> 0).
    pub intra_node_bandwidth: f64,
    /// Per-GPU receive bandwidth across nodes, bytes/s (> 0).
    pub inter_node_bandwidth: f64,
    /// GPUs per node (> 0): GPU `d * cp + r` sits in node `(d * cp + r) / gpus_per_node`.
    pub gpus_per_node: u32,
    /// `SKRULL_OVERLAP_*`.
    pub overlap: u32,
    /// Kernels launched per layer per micro-batch, forward + backward (>= 0).
    pub kernels_per_layer: f64,
    /// Launch cost of one kernel, seconds (>= 0).
    pub kernel_launch_s: f64,
    /// Other fixed cost per micro-batch, seconds (>= 0).
    pub micro_batch_extra_s: f64,
    /// Fixed cost per iteration, seconds (>= 0).
    pub iteration_fixed_s: f64,
    /// Fixed cost per sharded sequence per micro-batch on every GPU of its group (the whole CP
    /// group or a sub-group), outside the overlap window, seconds (>= 0; version 2, 0 when a
    /// version-1 caller omits it).
    pub sharded_sequence_s: f64,
    /// Cost per sequence held whole on a GPU, per micro-batch, with its attention (the kernel
    /// called once per sequence; 0 for a varlen kernel), seconds (>= 0; version 3, 0 when an
    /// older caller omits it).
    pub local_sequence_s: f64,
}

/// `sizeof(skrull_cost_model)` of version 1, the smallest accepted `struct_size`.
pub const SKRULL_COST_MODEL_SIZE_V1: u32 = 264;
/// `sizeof(skrull_cost_model)` of version 2 (`sharded_sequence_s`).
pub const SKRULL_COST_MODEL_SIZE_V2: u32 = 272;
/// `sizeof(skrull_cost_model)` of version 3 (`local_sequence_s`).
pub const SKRULL_COST_MODEL_SIZE_V3: u32 = 280;

const _: () = assert!(size_of::<skrull_cost_model>() == SKRULL_COST_MODEL_SIZE_V3 as usize);

impl skrull_cost_model {
    /// The C form of a core cost model.
    pub fn from_core(c: &CostModel) -> skrull_cost_model {
        skrull_cost_model {
            struct_size: SKRULL_COST_MODEL_SIZE_V3,
            attention_tile: c.attention_tile,
            peak_flops: c.peak_flops,
            gemm_efficiency: c.gemm_efficiency,
            hbm_bandwidth: c.hbm_bandwidth,
            weight_bytes: c.weight_bytes,
            weight_passes: c.weight_passes,
            attention_seqlen: c.attention.seqlen,
            attention_fwd_flops: c.attention.fwd,
            attention_bwd_flops: c.attention.bwd,
            attention_bwd_ratio: c.attention_bwd_ratio,
            kv_element_bytes: c.kv_element_bytes,
            comm_passes: c.comm_passes,
            ring_step_latency_s: c.ring_step_latency_s,
            inter_node_ring_step_latency_s: c.inter_node_ring_step_latency_s,
            intra_node_bandwidth: c.intra_node_bandwidth,
            inter_node_bandwidth: c.inter_node_bandwidth,
            gpus_per_node: c.gpus_per_node,
            overlap: match c.overlap {
                Overlap::AllAttention => SKRULL_OVERLAP_ALL_ATTENTION,
                _ => SKRULL_OVERLAP_LOCAL_ATTENTION,
            },
            kernels_per_layer: c.kernels_per_layer,
            kernel_launch_s: c.kernel_launch_s,
            micro_batch_extra_s: c.micro_batch_extra_s,
            iteration_fixed_s: c.iteration_fixed_s,
            sharded_sequence_s: c.sharded_sequence_s,
            local_sequence_s: c.local_sequence_s,
        }
    }

    /// The core form (not yet range-checked: [`CostModel::validate`] names the first bad
    /// field).
    ///
    /// # Errors
    /// `InvalidEnum` for an unknown `overlap`.
    pub fn to_core(&self) -> Result<CostModel, skrull_status> {
        let overlap = match self.overlap {
            SKRULL_OVERLAP_LOCAL_ATTENTION => Overlap::LocalAttention,
            SKRULL_OVERLAP_ALL_ATTENTION => Overlap::AllAttention,
            _ => return Err(skrull_status::InvalidEnum),
        };
        Ok(CostModel {
            peak_flops: self.peak_flops,
            gemm_efficiency: self.gemm_efficiency,
            hbm_bandwidth: self.hbm_bandwidth,
            weight_bytes: self.weight_bytes,
            weight_passes: self.weight_passes,
            attention: AttentionTable {
                seqlen: self.attention_seqlen,
                fwd: self.attention_fwd_flops,
                bwd: self.attention_bwd_flops,
            },
            attention_tile: self.attention_tile,
            attention_bwd_ratio: self.attention_bwd_ratio,
            kv_element_bytes: self.kv_element_bytes,
            comm_passes: self.comm_passes,
            ring_step_latency_s: self.ring_step_latency_s,
            inter_node_ring_step_latency_s: self.inter_node_ring_step_latency_s,
            intra_node_bandwidth: self.intra_node_bandwidth,
            inter_node_bandwidth: self.inter_node_bandwidth,
            gpus_per_node: self.gpus_per_node,
            overlap,
            kernels_per_layer: self.kernels_per_layer,
            kernel_launch_s: self.kernel_launch_s,
            micro_batch_extra_s: self.micro_batch_extra_s,
            iteration_fixed_s: self.iteration_fixed_s,
            sharded_sequence_s: self.sharded_sequence_s,
            local_sequence_s: self.local_sequence_s,
        })
    }
}

/// Reads the cost model a configuration points at (`None` for NULL: the preset).
///
/// # Errors
/// `InvalidArg` (misaligned), `BadStructSize`, `InvalidEnum` (overlap); the range check is
/// the configuration's (`InvalidCostModel`).
///
/// # Safety
/// Unless NULL, `ptr` points to a `skrull_cost_model` whose `struct_size` bytes are readable.
pub(crate) unsafe fn read_cost_model(
    ptr: *const skrull_cost_model,
) -> Result<Option<CostModel>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    let base = skrull_cost_model::from_core(&CostModel::H100_QWEN2_5_7B);
    let sizes = [
        SKRULL_COST_MODEL_SIZE_V1 as usize,
        SKRULL_COST_MODEL_SIZE_V2 as usize,
        SKRULL_COST_MODEL_SIZE_V3 as usize,
    ];
    // SAFETY: forwarded caller contract.
    let c = unsafe { read_sized(ptr, &sizes, base) }?;
    Ok(Some(c.to_core()?))
}

/// Writes the C form of `cost` to the first `min(out_size, sizeof)` bytes of `*out`, with
/// `struct_size` the bytes written.
///
/// # Safety
/// `out` is non-null, aligned and valid for writing `out_size` bytes.
unsafe fn write_cost_model(cost: &CostModel, out: *mut skrull_cost_model, out_size: usize) {
    let mut c = skrull_cost_model::from_core(cost);
    let n = out_size.min(size_of::<skrull_cost_model>());
    c.struct_size = n as u32;
    // SAFETY: `n` bytes are readable at the local `c` and writable at `out` (caller contract).
    unsafe {
        core::ptr::copy_nonoverlapping((&raw const c).cast::<u8>(), out.cast::<u8>(), n);
    }
}

/// Fills the first `out_size` bytes of `*out` with a GPU preset (`SKRULL_GPU_*`) for a model
/// shape (the shape picks the attention table: head dim 64 for the Qwen2.5-0.5B shape, 128
/// otherwise; NULL: the Qwen2.5-0.5B shape) and sets `struct_size = min(out_size,
/// sizeof(skrull_cost_model))`; call it as `skrull_cost_model_preset(gpu, shape, &m, sizeof
/// m)`. Every value and its source is in `docs/cost_model.md`.
///
/// Returns `SKRULL_STATUS_NULL_ARG` for a NULL `out`, `SKRULL_STATUS_INVALID_ENUM` for an
/// unknown GPU (or a `shape->swiglu` other than 0 or 1), `SKRULL_STATUS_INVALID_ARG` for a
/// misaligned pointer, `SKRULL_STATUS_BAD_STRUCT_SIZE` for an `out_size` below version 1;
/// on error nothing is written.
///
/// # Safety
/// Unless NULL, `shape` points to a readable `skrull_model_shape` and `out` is valid for
/// writing `out_size` bytes. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_cost_model_preset(
    gpu: u32,
    shape: *const skrull_model_shape,
    out: *mut skrull_cost_model,
    out_size: usize,
) -> skrull_status {
    guard(|| {
        if out.is_null() {
            return skrull_status::NullArg;
        }
        if !out.is_aligned() || !shape.is_aligned() {
            return skrull_status::InvalidArg;
        }
        if out_size < SKRULL_COST_MODEL_SIZE_V1 as usize {
            return skrull_status::BadStructSize;
        }
        let shape = if shape.is_null() {
            ModelShape::QWEN2_5_0_5B
        } else {
            // SAFETY: non-null, aligned (checked), readable (caller contract).
            let s = unsafe { shape.read() };
            let swiglu = match s.swiglu {
                0 => false,
                1 => true,
                _ => return skrull_status::InvalidEnum,
            };
            ModelShape {
                hidden: s.hidden,
                kv_hidden: s.kv_hidden,
                ffn: s.ffn,
                layers: s.layers,
                vocab: s.vocab,
                swiglu,
            }
        };
        let cost = match gpu {
            SKRULL_GPU_H100 => CostModel::h100(&shape),
            SKRULL_GPU_H200 => CostModel::h200(&shape),
            _ => return skrull_status::InvalidEnum,
        };
        // SAFETY: `out` is non-null, aligned (checked) and valid for `out_size` bytes (caller
        // contract).
        unsafe { write_cost_model(&cost, out, out_size) };
        skrull_status::Ok
    })
}

/// Writes to `*out` the cost model of the same machine `factor` times slower than `*model`:
/// every time it predicts (GEMMs, attention, ring latency and traffic, launches, the fixed
/// costs per micro-batch, iteration and sharded sequence) times `factor`, the overlap rule
/// unchanged; plans made with it are the same. It is the model a refit describes when it
/// finds only a uniform factor (`SKRULL_VERDICT_SCALE_ONLY`, `skrull_refit_report.scale`).
/// `out_size >= 264` bytes (version 1); `struct_size` is set to the bytes written.
///
/// Returns `SKRULL_STATUS_NULL_ARG` for a NULL `model` or `out`, `SKRULL_STATUS_INVALID_ARG`
/// for a misaligned pointer or a `factor` not finite and above 0,
/// `SKRULL_STATUS_BAD_STRUCT_SIZE` (`model->struct_size` or `out_size` below version 1),
/// `SKRULL_STATUS_INVALID_ENUM` (`model->overlap`), `SKRULL_STATUS_INVALID_COST_MODEL` (a
/// value of `*model`, or of the result, out of range); on error nothing is written. `model`
/// and `out` may be the same struct.
///
/// # Safety
/// `model` points to a `skrull_cost_model` whose `struct_size` bytes are readable; `out` is
/// valid for writing `out_size` bytes. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_cost_model_slowed(
    model: *const skrull_cost_model,
    factor: f64,
    out: *mut skrull_cost_model,
    out_size: usize,
) -> skrull_status {
    guard(|| {
        if model.is_null() || out.is_null() {
            return skrull_status::NullArg;
        }
        if !(out.is_aligned() && factor.is_finite() && factor > 0.0) {
            return skrull_status::InvalidArg;
        }
        if out_size < SKRULL_COST_MODEL_SIZE_V1 as usize {
            return skrull_status::BadStructSize;
        }
        // SAFETY: non-null; readable `struct_size` bytes (caller contract).
        let core = match unsafe { read_cost_model(model) } {
            Ok(Some(m)) => m,
            Ok(None) => return skrull_status::NullArg,
            Err(f) => return f.status,
        };
        let slowed = match core.validate().and_then(|()| core.slowed(factor)) {
            Ok(m) => m,
            Err(_) => return skrull_status::InvalidCostModel,
        };
        // SAFETY: `out` is non-null, aligned (checked) and valid for `out_size` bytes (caller
        // contract); `model` was read into a local copy, so `out` may alias it.
        unsafe { write_cost_model(&slowed, out, out_size) };
        skrull_status::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::config::cost::CostField;

    /// `skrull_cost_model_slowed`: the core's `CostModel::slowed` through the C form, in
    /// place too; a bad factor, a NULL or a short output refused with nothing written.
    #[test]
    fn a_slowed_model_is_the_cores_and_bad_arguments_write_nothing() {
        let core = CostModel::h100(&ModelShape::QWEN2_5_7B);
        let mut c = skrull_cost_model::from_core(&core);
        let mut out = skrull_cost_model::from_core(&core);
        let size = size_of::<skrull_cost_model>();
        // SAFETY: live, aligned structs of `size` bytes.
        let st = unsafe { skrull_cost_model_slowed(&c, 2.5, &mut out, size) };
        assert_eq!(st, skrull_status::Ok);
        assert_eq!(out.to_core(), Ok(core.slowed(2.5).unwrap()));
        let before = out;
        for factor in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            // SAFETY: as above.
            let st = unsafe { skrull_cost_model_slowed(&c, factor, &mut out, size) };
            assert_eq!((st, out), (skrull_status::InvalidArg, before), "{factor}");
        }
        let mut bad = c;
        bad.kernel_launch_s = f64::NAN;
        // SAFETY: as above.
        let st = unsafe { skrull_cost_model_slowed(&bad, 2.0, &mut out, size) };
        assert_eq!((st, out), (skrull_status::InvalidCostModel, before));
        // SAFETY: as above; NULL and a short size are refused before any access.
        unsafe {
            assert_eq!(
                skrull_cost_model_slowed(core::ptr::null(), 2.0, &mut out, size),
                skrull_status::NullArg
            );
            assert_eq!(
                skrull_cost_model_slowed(&c, 2.0, &mut out, 8),
                skrull_status::BadStructSize
            );
            let p = &raw mut c;
            assert_eq!(skrull_cost_model_slowed(p, 4.0, p, size), skrull_status::Ok);
        }
        assert_eq!(c.to_core(), Ok(core.slowed(4.0).unwrap()));
    }

    #[test]
    fn presets_round_trip_through_the_c_form() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            for c in [CostModel::h100(&shape), CostModel::h200(&shape)] {
                assert_eq!(skrull_cost_model::from_core(&c).to_core(), Ok(c));
            }
        }
    }

    /// Version 2's `sharded_sequence_s` round-trips through the C form, and a version-1
    /// struct (264 bytes) reads as the same model without it (0: no cost per sequence).
    #[test]
    fn the_per_sequence_cost_round_trips_and_version_1_reads_without_it() {
        let mut core = CostModel::h100(&ModelShape::QWEN2_5_7B);
        core.sharded_sequence_s = 0.004_25;
        let c = skrull_cost_model::from_core(&core);
        assert_eq!(c.struct_size, SKRULL_COST_MODEL_SIZE_V3);
        assert_eq!(c.to_core(), Ok(core));
        // SAFETY: `c` is a live, aligned struct of its `struct_size` bytes.
        let read = unsafe { read_cost_model(&c) }.unwrap();
        assert_eq!(read, Some(core));
        let mut v1 = c;
        v1.struct_size = SKRULL_COST_MODEL_SIZE_V1;
        // SAFETY: as above (the first 264 bytes are read).
        let read = unsafe { read_cost_model(&v1) }.unwrap().unwrap();
        assert_eq!(read.sharded_sequence_s, 0.0);
        assert_eq!(read.gemm_efficiency, core.gemm_efficiency);
        let mut cut = c;
        cut.struct_size = SKRULL_COST_MODEL_SIZE_V1 + 4;
        // SAFETY: as above.
        assert!(unsafe { read_cost_model(&cut) }.is_err());
    }

    /// Version 3's `local_sequence_s` round-trips through the C form, and a version-2 struct
    /// (272 bytes) reads as the same model without it (0: a varlen kernel's).
    #[test]
    fn the_per_local_sequence_cost_round_trips_and_version_2_reads_without_it() {
        let mut core = CostModel::h100(&ModelShape::QWEN2_5_7B);
        core.sharded_sequence_s = 0.001;
        core.local_sequence_s = 0.000_75;
        let c = skrull_cost_model::from_core(&core);
        // SAFETY: `c` is a live, aligned struct of its `struct_size` bytes.
        assert_eq!(unsafe { read_cost_model(&c) }.unwrap(), Some(core));
        let mut v2 = c;
        v2.struct_size = SKRULL_COST_MODEL_SIZE_V2;
        // SAFETY: as above (the first 272 bytes are read).
        let read = unsafe { read_cost_model(&v2) }.unwrap().unwrap();
        assert_eq!(read.local_sequence_s, 0.0);
        assert_eq!(read.sharded_sequence_s, 0.001);
    }

    /// Regression: the error details' `field` once skipped `overlap` (so the last four fields
    /// were numbered one low, the first of them colliding with `overlap`) and named both
    /// attention throughput arrays as the forward one. Each field, made invalid alone, must
    /// report its own 1-based position in the struct.
    #[test]
    fn cost_model_field_numbers_follow_the_struct_order() {
        type Poison = fn(&mut skrull_cost_model);
        let cases: [(u32, Poison); 23] = [
            (1, |c| c.attention_tile = 0),
            (2, |c| c.peak_flops = -1.0),
            (3, |c| c.gemm_efficiency = 2.0),
            (4, |c| c.hbm_bandwidth = 0.0),
            (5, |c| c.weight_bytes = -1.0),
            (6, |c| c.weight_passes = f64::NAN),
            (7, |c| c.attention_seqlen[2] = c.attention_seqlen[1]),
            (8, |c| c.attention_fwd_flops[0] = 0.0),
            (9, |c| c.attention_bwd_flops[3] = -1.0),
            (10, |c| c.attention_bwd_ratio = -1.0),
            (11, |c| c.kv_element_bytes = f64::INFINITY),
            (12, |c| c.comm_passes = -1.0),
            (13, |c| c.ring_step_latency_s = -1.0),
            (14, |c| c.inter_node_ring_step_latency_s = -1.0),
            (15, |c| c.intra_node_bandwidth = 0.0),
            (16, |c| c.inter_node_bandwidth = 0.0),
            (17, |c| c.gpus_per_node = 0),
            (19, |c| c.kernels_per_layer = -1.0),
            (20, |c| c.kernel_launch_s = -1.0),
            (21, |c| c.micro_batch_extra_s = -1.0),
            (22, |c| c.iteration_fixed_s = -1.0),
            (23, |c| c.sharded_sequence_s = f64::NAN),
            (24, |c| c.local_sequence_s = -1.0),
        ];
        let preset = skrull_cost_model::from_core(&CostModel::h100(&ModelShape::QWEN2_5_7B));
        for (want, poison) in cases {
            let mut c = preset;
            poison(&mut c);
            let err = c.to_core().unwrap().validate().unwrap_err();
            assert_eq!(err.field.number(), want, "{}", err.field);
        }
        // Field 18, `overlap`, is an enum: an unknown value is `InvalidEnum`.
        let mut c = preset;
        c.overlap = 7;
        assert_eq!(c.to_core(), Err(skrull_status::InvalidEnum));
        assert_eq!(CostField::Overlap.number(), 18);
        assert_eq!(CostField::ALL.len(), 24);
    }
}
