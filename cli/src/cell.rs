//! One simulated cell's inputs: the policies the simulator runs, its options, and the sampled
//! batches every policy of a cell plans (the same for every run of the cell).

use skrull_core::{Config, CostModel, ModelShape, Policy};
use skrull_kit::sample::{Dataset, Rng};

use crate::setups::{K, Setup, sharded_limit};

/// A policy the simulator runs: a core policy, or LongAlign sorted batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPolicy {
    /// A core policy on each sampled batch.
    Core(Policy),
    /// Sort the pool of all batches by length, cut into batches, plan each with `packed`.
    Sorted,
}

impl SimPolicy {
    /// Every policy `--policy` accepts, in print order.
    pub const ALL: [SimPolicy; 7] = [
        SimPolicy::Core(Policy::Skrull),
        SimPolicy::Core(Policy::DeepSpeed),
        SimPolicy::Core(Policy::Packed),
        SimPolicy::Sorted,
        SimPolicy::Core(Policy::RoundRobin),
        SimPolicy::Core(Policy::Balanced),
        SimPolicy::Core(Policy::ChunkFlow),
    ];

    /// The policies run without `--policy`: all but `chunkflow` (which needs a ChunkSize:
    /// ask for it by name, or see `--chunking compare`).
    pub const DEFAULT: [SimPolicy; 6] = [
        SimPolicy::Core(Policy::Skrull),
        SimPolicy::Core(Policy::DeepSpeed),
        SimPolicy::Core(Policy::Packed),
        SimPolicy::Sorted,
        SimPolicy::Core(Policy::RoundRobin),
        SimPolicy::Core(Policy::Balanced),
    ];

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Core(p) => p.name(),
            SimPolicy::Sorted => "sorted",
        }
    }

    /// Parses a name given by [`SimPolicy::name`].
    pub fn from_name(name: &str) -> Option<SimPolicy> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// Everything a simulation run needs besides the setup and dataset.
#[derive(Debug, Clone)]
pub struct Options {
    /// Iterations per cell.
    pub iterations: usize,
    /// Seed of the first batch (the same for every cell, so cells with one dataset share
    /// their batches up to clipping and size).
    pub seed: u64,
    /// Training context limit every sampled length is clipped at (before `N x C`).
    pub context: u32,
    /// Policies to run (deepspeed is always run as the reference).
    pub policies: Vec<SimPolicy>,
    /// Applied to each setup's configuration (policy, victim, FLOPs formula, padding).
    pub template: Config,
    /// Whether the Gantt chart gets a `sorted` panel (its batch 0 holds other sequences).
    pub draw_sorted: bool,
    /// Whether to also run `balanced` without and with sub-groups on every cell
    /// (`--subgroups compare`, [`compare_subgroups`](crate::simulate::compare_subgroups)).
    pub compare_subgroups: bool,
    /// Whether to also run `balanced` without and with chunking, `chunkflow` and `skrull` on
    /// every cell (`--chunking compare`,
    /// [`compare_chunking`](crate::chunking::compare_chunking)).
    pub compare_chunking: bool,
    /// Whether to also compare `balanced` planned for the default composition and for each
    /// other synchronisation, evaluated the way that trainer runs (`--sync compare`,
    /// [`compare_sync`](crate::sync_compare::compare_sync)).
    pub compare_sync: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            iterations: 20,
            seed: skrull_kit::batch::DEFAULT_SEED,
            context: 128 * K,
            policies: SimPolicy::DEFAULT.to_vec(),
            template: Config::new(1, 1, 1, ModelShape::QWEN2_5_0_5B),
            draw_sorted: false,
            compare_subgroups: false,
            compare_chunking: false,
            compare_sync: false,
        }
    }
}

fn config_for(setup: &Setup, template: &Config) -> Config {
    Config {
        dp: setup.dp,
        cp: setup.cp,
        bucket: setup.bucket,
        model: setup.model,
        ..*template
    }
}

/// A cell's configuration (the setup over `opts.template`, with `cost`), the length its
/// sequences are clipped at and its `opts.iterations` sampled batches of `dp x batch_size`
/// lengths: the same for every policy and every run of the cell.
pub fn sample_cell(
    setup: &Setup,
    dataset: Dataset,
    cost: &CostModel,
    opts: &Options,
) -> Result<(Config, u32, Vec<Vec<u32>>), String> {
    let base = config_for(setup, &opts.template).with_cost(*cost);
    base.validate().map_err(|e| e.to_string())?;
    let clip = opts.context.min(sharded_limit(&base)).max(1);
    let n = (setup.dp * setup.batch_size) as usize;
    let mut rng = Rng::new(opts.seed);
    let batches: Vec<Vec<u32>> = (0..opts.iterations)
        .map(|_| dataset.batch(rng.next_u64(), n, clip))
        .collect();
    Ok((base, clip, batches))
}
