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
//! Each folder is one layer (the evaluator and the refit, which read plans, sit above `plan`
//! and `policy`), and a file imports only its own layer and lower ones (`tests/layers.rs`
//! enforces it); each module's documentation says what lives there.
//! `docs/architecture.md` describes every file and follows one batch from `skrull_schedule()`
//! to the written plan.
//!
//! ```text
//! 7  owned       OwnedBuffers (feature `alloc`)
//! 6  evaluation  model::eval (iteration time of any plan), model::refit (online refit)
//! 6  window      the outlier-delay window across global batches (calls schedule)
//! 5  policy      schedule() and its dispatch; gds, dacp, baselines, balanced
//! 4  plan        types, writer, fill pass, checker, per-GPU layout
//! 3  setup       Setup (validated config, budget, cost models), the Workspace slab
//! 2  kernel      sort, LPT trees, groupings, CP-rank state machine
//! 1  model       FLOPs, time model, its integer form, calibration fit
//! 0  config      limits, options, shape, CostModel, Budget, CpGroup; error
//!                ^ imports point down only
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
//! the same input. The crate never allocates: the caller lends the [`Workspace`] (one slab of
//! words the core carves itself) and the [`PlanBuffers`]; [`PlanSizes`] and
//! [`WorkspaceSizes`] say how large they must be.
//!
//! ```
//! use skrull_core::{plan, Config, ModelShape, OwnedBuffers, Setup};
//! // Validate and prepare once; plan every batch with the same setup and buffers.
//! let setup = Setup::new(&Config::new(2, 4, 24, ModelShape::QWEN2_5_0_5B)).unwrap();
//! let mut bufs = OwnedBuffers::new();
//! let lengths = [1, 2, 2, 3, 4, 6, 9, 14, 30, 5];
//! let plan = bufs.schedule(&setup, &lengths).unwrap();
//! assert!(plan::check(&setup, &lengths, &plan).is_ok());
//! ```
//!
//! `OwnedBuffers` (the `alloc` feature) owns the memory; without a heap, lend a
//! [`Workspace`] slab and [`PlanBuffers`] sized by [`Setup::workspace_sizes`] and
//! [`PlanSizes::for_batch`] to [`schedule()`].
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(any(test, feature = "alloc"))]
extern crate alloc;
#[cfg(test)]
extern crate std;
#[cfg(test)]
mod test_support;

pub mod config;
pub mod error;
pub mod kernel;
pub mod model;
#[cfg(any(test, feature = "alloc"))]
pub mod owned;
pub mod plan;
pub mod policy;
pub mod setup;
pub mod window;

pub use config::budget::Budget;
pub use config::cost::CostModel;
pub use config::{
    Chunking, Config, FlopsFormula, ModelShape, Policy, ShardPadding, Synchronisation, Victim,
};
pub use error::Error;
#[cfg(any(test, feature = "alloc"))]
pub use owned::OwnedBuffers;
pub use plan::layout::{Gpu, Layout, LayoutBuffers, LayoutError, LayoutSizes, Span};
pub use plan::{CpGroup, MicroBatch, Placement, Plan, PlanBuffers, PlanParts, PlanSizes, Summary};
pub use policy::schedule;
pub use setup::Setup;
pub use setup::workspace::{Word, Workspace, WorkspaceSizes};
pub use window::{Deferred, Window, WindowError, WindowParams};
