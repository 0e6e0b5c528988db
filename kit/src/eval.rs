//! Heap-backed evaluation buffers for the std side (CLI, tests, benches): allocate once,
//! evaluate many plans.

use skrull_core::model::eval::{
    EvalBuffers, EvalError, EvalSizes, Evaluation, MicroBatchTime, RankSlot, evaluate_placements,
};
use skrull_core::{Config, Placement, Setup};

use crate::buffers::grow;

/// Owns the [`EvalBuffers`] of the evaluator, grown on demand.
#[derive(Debug, Default, Clone)]
pub struct OwnedEval {
    micro_batches: Vec<MicroBatchTime>,
    ranks: Vec<RankSlot>,
    dp_times: Vec<f64>,
    dp_offsets: Vec<u32>,
}

impl OwnedEval {
    /// Buffers sized by [`EvalSizes::for_batch`] for `n` sequences under `cfg`.
    pub fn for_batch(n: usize, cfg: &Config) -> OwnedEval {
        let mut e = OwnedEval::default();
        e.reserve(n, cfg);
        e
    }

    fn reserve(&mut self, n: usize, cfg: &Config) {
        let s = EvalSizes::for_batch(n, cfg);
        grow(&mut self.micro_batches, s.micro_batches);
        grow(&mut self.ranks, s.ranks);
        grow(&mut self.dp_times, s.dp_times);
        grow(&mut self.dp_offsets, s.dp_offsets);
    }

    /// A borrow of the buffers as they are, for one evaluation (no allocation).
    pub fn buffers(&mut self) -> EvalBuffers<'_> {
        EvalBuffers {
            micro_batches: &mut self.micro_batches,
            ranks: &mut self.ranks,
            dp_times: &mut self.dp_times,
            dp_offsets: &mut self.dp_offsets,
        }
    }

    /// Evaluates `placements` of `lengths` under `cfg` (and its cost model), growing the
    /// buffers first.
    ///
    /// # Errors
    /// Whatever [`evaluate_placements`] returns.
    pub fn evaluate(
        &mut self,
        cfg: &Config,
        lengths: &[u32],
        placements: &[Placement],
    ) -> Result<Evaluation<'_>, EvalError> {
        let setup = Setup::without_models(cfg).map_err(EvalError::Config)?;
        if lengths.len() <= skrull_core::config::MAX_SEQS {
            self.reserve(lengths.len(), cfg);
        }
        evaluate_placements(&setup, lengths, placements, self.buffers())
    }
}
