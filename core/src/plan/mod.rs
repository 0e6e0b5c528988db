//! The plan layer: the one plan type every policy writes ([`types`]), how policies write it
//! (the crate-internal `writer`), the independent checker every plan passes
//! ([`check`](mod@check)), the per-GPU execution
//! layout trainers feed their kernels ([`layout`]) and the post-policy fill pass. Nothing here
//! knows which policy made a plan.

pub mod check;
pub(crate) mod fill;
pub mod layout;
pub mod types;
pub(crate) mod writer;

pub use check::{CheckError, check};
pub use types::{
    CHUNKED, CpGroup, MicroBatch, Placement, Plan, PlanBuffers, PlanParts, PlanSizes, SHARDED,
    Summary,
};
pub(crate) use writer::PlanWriter;
