//! The model layer: what work a sequence is and what it costs.
//!
//! - [`flops`]: integer FLOPs of a sequence (the paper's formula or Megatron's), which GDS and
//!   DACP balance;
//! - [`time`]: a cost model bound to a configuration ([`TimeModel`]): GEMM, attention, ring
//!   communication over intra- or inter-node links, fixed costs, in seconds;
//! - [`chunked`]: the time of a chunked sequence (its passes in order, recomputation);
//! - [`fixed`]: its integer form ([`IntModel`]), which `balanced` plans on;
//! - [`fit`]: least-squares calibration from measured samples;
//! - [`refit`]: the online refit from measured micro-batch times (a window of the last steps);
//! - [`eval`]: the evaluator (iteration time of any plan) and the lower bound.
//!
//! The coefficients ([`CostModel`](crate::config::cost::CostModel): hardware, kernels,
//! topology) and their presets live in the configuration layer
//! ([`config::cost`](crate::config::cost)); planning and evaluation read the same one, the
//! one in [`Config::cost`](crate::Config::cost).

pub mod chunked;
pub mod eval;
pub mod fit;
pub mod fixed;
pub mod flops;
pub mod refit;
pub mod time;

pub use fixed::IntModel;
pub use time::{Ring, TimeModel};
