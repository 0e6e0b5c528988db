//! The kernel layer: the algorithms the policies are built from, each written once (crate
//! internals; their documentation is in the source).
//!
//! - `sort`: sequence indices by length (radix sort for large batches);
//! - `lpt`: longest-processing-time assignment to bins with `O(log bins)` tournament trees
//!   (GDS balances FLOPs over DP ranks with it, `balanced` estimated time);
//! - `group`: groupings of a DP rank's sequences into micro-batches (consecutive shares,
//!   next-fit under the shard budget, the strided interleave of GDS);
//! - `ranks`: the CP-rank state machine inside a micro-batch (local, shard, rollback, final
//!   recount), parameterised by the rule that picks a rank.

pub(crate) mod group;
pub(crate) mod lpt;
pub(crate) mod ranks;
pub(crate) mod sort;

pub use group::consecutive_share;
