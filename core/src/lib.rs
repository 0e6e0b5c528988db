//! # skrull-core
//!
//! An allocation-free, `no_std` implementation of the Skrull data scheduler for long-context
//! training (NeurIPS 2025, arXiv 2505.19609), plus the baselines it is measured against and a
//! cost-aware policy of our own.
//!
//! For every global batch a trainer hands skrull the token lengths of its sequences. skrull
//! decides, in two levels:
//!
//! 1. **GDS** ([`policy::gds`]): which data-parallel (DP) rank and which micro-batch runs each
//!    sequence;
//! 2. **DACP** ([`policy::dacp`]): inside each micro-batch, whether a sequence is *sharded*
//!    over the whole context-parallel (CP) group or kept *local*, whole, on one CP rank,
//!
//! so that work is balanced and no GPU holds more than `bucket` tokens in a micro-batch.
//!
//! # Layers
//!
//! Data flows one way; each folder is one layer and its module documentation says what lives
//! there:
//!
//! ```text
//! config (limits, options, Budget) ─▶ policy (dispatch, one module per policy) ─▶ plan (types,
//!          │                                  │ built from                   writer, checker,
//!          ▼                                  ▼                              layout, workspace)
//! model (FLOPs, cost model, time model,   kernel (sort, LPT trees, groupings,        │
//!        integer form, calibration,               CP-rank state machine)             ▼
//!        evaluator) ◀────────────────────────────────────────────────────────── evaluation
//! ```
//!
//! | policy | module |
//! |---|---|
//! | `skrull` (the paper) | [`policy::gds`] with [`policy::dacp`] |
//! | `roundrobin` (the paper's Algorithm 4) | [`policy::gds`] with [`policy::dacp`]'s worst-fit rule |
//! | `deepspeed`, `packed` (baselines) | [`policy::baselines`] |
//! | `balanced` (cost-aware, the CLI default) | [`policy::balanced`] |
//!
//! Every decision uses integer arithmetic, so every rank computes the bit-identical plan from
//! the same input. The crate never allocates: the caller lends the [`Workspace`] and the
//! [`PlanBuffers`]; [`PlanSizes`] and [`WorkspaceSizes`] say how large they must be.
//!
//! ```
//! use skrull_core::{schedule, Config, MicroBatch, ModelShape, Placement, PlanBuffers, PlanSizes,
//!                   Workspace, WorkspaceSizes};
//! let cfg = Config::new(2, 4, 24, ModelShape::QWEN2_5_0_5B);
//! let lengths = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];
//! // Size the buffers once for the largest batch, then reuse them every step.
//! let (n, ps, ws) = (lengths.len(), PlanSizes::for_batch(10, &cfg), WorkspaceSizes::for_batch(10, &cfg));
//! let mut placements = vec![Placement::default(); ps.placements];
//! let mut micro_batches = vec![MicroBatch::default(); ps.micro_batches];
//! let mut members = vec![0u32; ps.members];
//! let mut rank_tokens = vec![0u32; ps.rank_tokens];
//! let mut per_dp = vec![0u32; ps.micro_batches_per_dp];
//! let (mut keys, mut seqs, mut scratch, mut loads, mut heap, mut start) = (
//!     vec![0u64; ws.keys], vec![0u32; ws.seqs], vec![0u32; ws.scratch],
//!     vec![0u128; ws.dp_loads], vec![0u32; ws.dp_heap], vec![0u32; ws.dp_start]);
//! let (mut costs, mut marks) = (vec![0u64; ws.costs], vec![0u32; ws.marks]);
//! let mut work = Workspace { keys: &mut keys, seqs: &mut seqs, scratch: &mut scratch,
//!                            dp_loads: &mut loads, dp_heap: &mut heap, dp_start: &mut start,
//!                            costs: &mut costs, marks: &mut marks };
//! let out = PlanBuffers { placements: &mut placements, micro_batches: &mut micro_batches,
//!                         members: &mut members, rank_tokens: &mut rank_tokens,
//!                         micro_batches_per_dp: &mut per_dp };
//! let plan = schedule(&cfg, &lengths, &mut work, out).unwrap();
//! assert_eq!(plan.placements().len(), n);
//! assert!(skrull_core::plan::check(&cfg, &lengths, &plan).is_ok());
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;
#[cfg(test)]
mod test_support;

pub mod config;
pub mod error;
pub mod kernel;
pub mod model;
pub mod plan;
pub mod policy;

pub use config::budget::Budget;
pub use config::{Config, FlopsFormula, ModelShape, Policy, ShardPadding, Victim};
pub use error::Error;
pub use model::CostModel;
pub use plan::layout::{Gpu, Layout, LayoutBuffers, LayoutError, LayoutSizes, Span};
pub use plan::{
    CpGroup, MicroBatch, Placement, Plan, PlanBuffers, PlanParts, PlanSizes, Summary, Workspace,
    WorkspaceSizes,
};
pub use policy::schedule;
