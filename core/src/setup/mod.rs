//! The prepared planning context: a [`Config`] validated once, with what every call derives
//! from it (the token budget and its per-sub-group budgets, the float and integer cost
//! models), and the scratch memory layout of a call ([`workspace`]).
//!
//! Build one [`Setup`] per configuration and reuse it for every batch: [`schedule`],
//! [`plan::check`], the evaluator and the layout all take `&Setup`.
//!
//! [`schedule`]: crate::schedule
//! [`plan::check`]: crate::plan::check()

pub mod workspace;

use crate::config::Config;
use crate::config::budget::Budget;
use crate::config::cost::CostModel;
use crate::config::options::Policy;
use crate::error::Error;
use crate::model::fixed::{IntCoeffs, IntModel, Tiles};
use crate::model::time::TimeModel;
use workspace::WorkspaceSizes;

/// A validated configuration with its derived models (see the [module docs](self)).
///
/// Plain data: copy it, share it between threads, or keep it in caller memory (the C ABI's
/// prepared form). Building one validates the configuration and, for `balanced`, derives the
/// cost model in float and integer form; planning with it never does either again.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    cfg: Config,
    budget: Budget,
    /// The cost model in float and integer form, derived when the policy plans by cost
    /// (`balanced`); the other policies never read it while planning.
    models: Option<(TimeModel, IntCoeffs)>,
    /// With the models, for a setup built to plan many batches: every attention tile's cost.
    tiles: Option<Tiles>,
}

impl Setup {
    /// Validates `cfg` and derives everything a call needs.
    ///
    /// # Errors
    /// What [`Config::validate`] returns.
    #[inline]
    pub fn new(cfg: &Config) -> Result<Setup, Error> {
        Setup::build(cfg, true)
    }

    /// [`Setup::new`] for a setup that plans one batch: the attention costs per query tile
    /// are left to be computed as the call meets them (the stateless `skrull_schedule()`
    /// path). Plans are the same; a setup reused for many batches should come from
    /// [`Setup::new`], which computes every tile once.
    ///
    /// # Errors
    /// What [`Config::validate`] returns.
    #[inline]
    pub fn single_use(cfg: &Config) -> Result<Setup, Error> {
        Setup::build(cfg, false)
    }

    /// Validates `cfg` and derives the models `balanced` plans on (with every attention tile
    /// computed when `prefill`).
    #[inline(always)]
    fn build(cfg: &Config, prefill: bool) -> Result<Setup, Error> {
        cfg.validate()?;
        let budget = cfg.budget();
        let models = (cfg.policy == Policy::Balanced).then(|| {
            let time = TimeModel::with_budget(&cfg.cost_model(), &cfg.model, budget);
            (time, IntCoeffs::new(&time, budget))
        });
        let tiles = match &models {
            Some((_, coeffs)) if prefill => Some(coeffs.tiles()),
            _ => None,
        };
        Ok(Setup {
            cfg: *cfg,
            budget,
            models,
            tiles,
        })
    }

    /// Validates `cfg` and computes its budget only: the cost models are derived on each use
    /// ([`Setup::time_model`], [`Setup::int_model`]). For callers that only lay out or check
    /// plans.
    ///
    /// # Errors
    /// What [`Config::validate`] returns.
    pub fn without_models(cfg: &Config) -> Result<Setup, Error> {
        cfg.validate()?;
        Ok(Setup {
            cfg: *cfg,
            budget: cfg.budget(),
            models: None,
            tiles: None,
        })
    }

    /// The configuration.
    #[inline]
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The resolved cost model ([`Config::cost`], or the H100 preset for the model shape).
    #[inline]
    pub fn cost_model(&self) -> CostModel {
        match &self.models {
            Some((time, _)) => time.cost,
            None => self.cfg.cost_model(),
        }
    }

    /// The token budget: what each placement costs a GPU.
    #[inline]
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The cost model bound to the model shape and CP layout (derived on the spot when the
    /// policy does not plan by cost).
    pub fn time_model(&self) -> TimeModel {
        match &self.models {
            Some((time, _)) => *time,
            None => TimeModel::with_budget(&self.cfg.cost_model(), &self.cfg.model, self.budget),
        }
    }

    /// The integer cost model, with an empty tile cache (derived on the spot when the policy
    /// does not plan by cost).
    pub fn int_model(&self) -> IntModel {
        match &self.models {
            Some((_, c)) => match &self.tiles {
                Some(tiles) => IntModel::with_tiles(*c, tiles),
                None => IntModel::from_coeffs(*c),
            },
            None => IntModel::new(&self.time_model(), self.budget),
        }
    }

    /// The workspace size for a batch of `n` sequences.
    #[inline]
    pub fn workspace_sizes(&self, n: usize) -> WorkspaceSizes {
        WorkspaceSizes::for_batch(n, &self.cfg)
    }
}

impl TryFrom<&Config> for Setup {
    type Error = Error;
    fn try_from(cfg: &Config) -> Result<Setup, Error> {
        Setup::new(cfg)
    }
}
