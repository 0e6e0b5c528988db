//! The flags that build a configuration and its cost model: the layout, the policy and its
//! options, chunking, and `--gpu --cost-model --gpus-per-node --overlap`.

use skrull_core::config::cost::Overlap;
use skrull_core::{
    Chunking, Config, CostModel, Error, FlopsFormula, ModelShape, Policy, ShardPadding,
    Synchronisation, Victim,
};

use crate::args::{Flags, one_of, parse_model, parse_tokens};
use crate::cost_json::parse_cost_model;

/// The policy the CLI plans with when `--policy` is not given: the core's
/// [`RECOMMENDED_POLICY`](skrull_core::config::RECOMMENDED_POLICY) (`balanced`).
pub const DEFAULT_POLICY: Policy = skrull_core::config::RECOMMENDED_POLICY;

/// Builds a [`Config`] from the flags over [`Config::recommended`] for the paper's layout
/// (DP 4, CP 8, BucketSize 26K, Qwen2.5-0.5B) with `default_policy`: see [`config_over`].
///
/// # Errors
/// A message naming the bad flag and value, or the configuration error.
pub fn config_from(flags: &Flags, default_policy: Policy) -> Result<Config, String> {
    let base =
        Config::recommended(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B).with_policy(default_policy);
    config_over(flags, base)
}

/// The one place the CLI turns flags into a [`Config`]: `base` with every flag given applied
/// on top (`--dp --cp --bucket --model --policy --victim --flops --shard-padding
/// --max-micro-batches --pad-multiple --pad-local --lockstep --fill-empty --micro-batches
/// --subgroups --chunk-size --chunk-keep --chunk-state-permille --sync`, and the cost model: `--gpu
/// --cost-model --gpus-per-node --overlap`, see [`cost_over`]), then validated. `skrull plan`
/// starts from the paper's defaults, `skrull evaluate` from the plan file's configuration,
/// `skrull simulate` from each setup's. `chunkflow` with chunking off (and no `--chunk-size`)
/// gets the core's default chunk size for the longest sequence the layout accepts sharded
/// ([`Config::default_chunk_size`]).
///
/// # Errors
/// A message naming the bad flag and value, or the configuration error.
pub fn config_over(flags: &Flags, base: Config) -> Result<Config, String> {
    let mut cfg = options_over(flags, base)?;
    if let Some(p) = flags.get("--policy") {
        cfg.policy =
            Policy::from_name(p).ok_or_else(|| format!("--policy: unknown policy '{p}'"))?;
    }
    cfg.dp = flags.tokens("--dp", cfg.dp)?;
    cfg.cp = flags.tokens("--cp", cfg.cp)?;
    cfg.bucket = flags.tokens("--bucket", cfg.bucket)?;
    if let Some(m) = flags.get("--model") {
        cfg.model = parse_model(m)?;
    }
    cfg.cost = cost_over(flags, &cfg.model, cfg.cost)?;
    let sized = flags.get("--chunk-size").is_some();
    if cfg.policy == Policy::ChunkFlow && !cfg.chunking.is_on() && !sized {
        // chunkflow needs a chunk size: the core's default for the longest sequence that fits.
        cfg.chunking.size = cfg.default_chunk_size(0).map_err(|e| no_chunk_size(&e))?;
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// The CLI's words for [`Error::NoChunkSize`] (any other error as the core words it).
fn no_chunk_size(e: &Error) -> String {
    match *e {
        Error::NoChunkSize {
            longest,
            group,
            peak,
        } => format!(
            "--policy chunkflow: no default chunk size fits: a {longest}-token sequence chunked \
             on {group} GPU(s) holds at least {peak} tokens per GPU (its K/V state with \
             one-token chunks), over --bucket; give --chunk-size, lower --chunk-state-permille \
             or --chunk-keep, or raise --bucket"
        ),
        e => e.to_string(),
    }
}

/// What `--subgroups` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subgroups {
    /// `on`: policies may shard a sequence over an aligned sub-group of the CP ranks
    /// ([`Config::subgroups`], the default).
    On,
    /// `off`: a sharded sequence always spans the whole CP group.
    Off,
    /// `compare` (`skrull simulate` only): plan with sub-groups, and also run `balanced`
    /// without them to show what they change.
    Compare,
}

impl Subgroups {
    /// Whether plans may use sub-groups under this choice.
    pub fn enabled(self) -> bool {
        self != Subgroups::Off
    }
}

/// The value of `--subgroups` (`on|off`, and `compare` when `compare` allows it), `None` when
/// the flag is absent.
///
/// # Errors
/// A message naming the bad value.
pub fn subgroups_flag(flags: &Flags, compare: bool) -> Result<Option<Subgroups>, String> {
    let Some(v) = flags.get("--subgroups") else {
        return Ok(None);
    };
    match v {
        "on" => Ok(Some(Subgroups::On)),
        "off" => Ok(Some(Subgroups::Off)),
        "compare" if compare => Ok(Some(Subgroups::Compare)),
        "compare" => Err("--subgroups: 'compare' is for skrull simulate only (on|off)".into()),
        _ if compare => Err(format!("--subgroups: '{v}' is not on|off|compare")),
        _ => Err(format!("--subgroups: '{v}' is not on|off")),
    }
}

/// `base` with the option flags applied (everything but the policy, the layout, the model
/// and the cost model), not validated: what `skrull simulate` applies to every setup.
///
/// # Errors
/// A message naming the bad flag and value.
pub fn options_over(flags: &Flags, base: Config) -> Result<Config, String> {
    options_with(flags, base, false, false)
}

/// [`options_over`], with `--subgroups compare` accepted (as sub-groups on) when `compare`,
/// and `--sync compare` (as the default) when `sync_compare`.
///
/// # Errors
/// A message naming the bad flag and value.
pub fn options_with(
    flags: &Flags,
    base: Config,
    compare: bool,
    sync_compare: bool,
) -> Result<Config, String> {
    let mut cfg = base;
    if let Some(s) = subgroups_flag(flags, compare)? {
        cfg.subgroups = s.enabled();
    }
    if let Some(v) = flags.get("--victim") {
        cfg.victim = Victim::from_name(v).ok_or_else(|| {
            format!(
                "--victim: '{v}' is not {}",
                one_of(Victim::ALL.map(Victim::name))
            )
        })?;
    }
    if let Some(f) = flags.get("--flops") {
        cfg.flops = FlopsFormula::from_name(f).ok_or_else(|| {
            format!(
                "--flops: '{f}' is not {}",
                one_of(FlopsFormula::ALL.map(FlopsFormula::name))
            )
        })?;
    }
    if let Some(p) = flags.get("--shard-padding") {
        cfg.shard_padding = ShardPadding::from_name(p).ok_or_else(|| {
            format!(
                "--shard-padding: '{p}' is not {}",
                one_of(ShardPadding::ALL.map(ShardPadding::name))
            )
        })?;
    }
    cfg.max_micro_batches = flags.tokens("--max-micro-batches", cfg.max_micro_batches)?;
    cfg.pad_multiple = flags.tokens("--pad-multiple", cfg.pad_multiple)?;
    cfg.pad_local |= flags.has("--pad-local");
    cfg.lockstep |= flags.has("--lockstep");
    cfg.fill_empty |= flags.has("--fill-empty");
    cfg.micro_batches = flags.tokens("--micro-batches", cfg.micro_batches)?;
    cfg.chunking = chunking_over(flags, cfg.chunking)?;
    if let Some(v) = flags
        .get("--sync")
        .filter(|&v| !(sync_compare && v == "compare"))
    {
        cfg.sync = Synchronisation::from_name(v).ok_or_else(|| {
            format!(
                "--sync: '{v}' is not {}",
                one_of(Synchronisation::ALL.map(Synchronisation::name))
            )
        })?;
    }
    Ok(cfg)
}

/// `base` with `--chunk-size C` (tokens, `K` suffix; 0: off), `--chunk-keep K` and
/// `--chunk-state-permille P` applied ([`Chunking`]), not validated.
///
/// # Errors
/// A message naming the bad flag and value.
pub fn chunking_over(flags: &Flags, base: Chunking) -> Result<Chunking, String> {
    let mut c = base;
    c.size = flags.tokens("--chunk-size", c.size)?;
    let keep = flags.u64("--chunk-keep", u64::from(c.keep))?;
    c.keep = u32::try_from(keep).map_err(|_| format!("--chunk-keep: {keep} is out of range"))?;
    let state = flags.u64("--chunk-state-permille", u64::from(c.state_permille))?;
    c.state_permille = u32::try_from(state)
        .map_err(|_| format!("--chunk-state-permille: {state} is out of range"))?;
    Ok(c)
}

/// The cost model the flags ask for, for `shape`: `None` (keep `base`, or the H100 preset when
/// that is `None` too) when no cost flag is given; else the `--gpu` preset (default `h100`),
/// or `base` when only overrides are given, with `--cost-model FILE` on top and
/// `--gpus-per-node` and `--overlap` on top of that.
///
/// # Errors
/// A message naming the unknown GPU, the unreadable file or the bad field.
pub fn cost_over(
    flags: &Flags,
    shape: &ModelShape,
    base: Option<CostModel>,
) -> Result<Option<CostModel>, String> {
    let any = ["--gpu", "--cost-model", "--gpus-per-node", "--overlap"]
        .iter()
        .any(|f| flags.get(f).is_some());
    if !any {
        return Ok(base);
    }
    let mut cost = match flags.get("--gpu") {
        Some(gpu) => CostModel::preset(gpu, shape)
            .ok_or_else(|| format!("--gpu: unknown GPU '{gpu}' (h100, h200)"))?,
        None => base.unwrap_or_else(|| CostModel::h100(shape)),
    };
    if let Some(path) = flags.get("--cost-model") {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        cost = parse_cost_model(&text, &cost).map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(v) = flags.get("--gpus-per-node") {
        cost.gpus_per_node = parse_tokens(v)
            .filter(|&g| g > 0)
            .ok_or_else(|| format!("--gpus-per-node: '{v}' is not a positive whole number"))?;
    }
    if let Some(o) = flags.get("--overlap") {
        cost.overlap = Overlap::from_name(o).ok_or_else(|| {
            format!(
                "--overlap: '{o}' is not {}",
                one_of(Overlap::ALL.map(Overlap::name))
            )
        })?;
    }
    cost.validate().map_err(|e| e.to_string())?;
    Ok(Some(cost))
}

/// A label for the cost model the flags chose: the GPU preset's name, with the model file on
/// top when one is given.
pub fn cost_label(flags: &Flags) -> String {
    let gpu = flags.get("--gpu").unwrap_or("h100");
    match flags.get("--cost-model") {
        Some(f) => format!("{gpu} preset with {f} on top"),
        None => format!("{gpu} preset"),
    }
}

/// The cost model the flags ask for, for `shape` (the H100 preset when no cost flag is
/// given; see [`cost_over`]).
///
/// # Errors
/// A message naming the unknown GPU, the unreadable file or the bad field.
pub fn cost_from_flags(flags: &Flags, shape: &ModelShape) -> Result<CostModel, String> {
    Ok(cost_over(flags, shape, None)?.unwrap_or_else(|| CostModel::h100(shape)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(a: &[&str]) -> Flags {
        Flags::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn subgroups_flag_sets_the_config() {
        let flags = |v: &str| Flags::parse(&["--subgroups".into(), v.into()]).unwrap();
        let base = Config::new(1, 8, 1024, ModelShape::QWEN2_5_0_5B);
        assert!(base.subgroups, "on by default");
        assert!(
            config_from(&Flags::default(), Policy::Balanced)
                .unwrap()
                .subgroups
        );
        assert!(!config_over(&flags("off"), base).unwrap().subgroups);
        let mut off = base;
        off.subgroups = false;
        assert!(config_over(&flags("on"), off).unwrap().subgroups);
        let err = config_over(&flags("compare"), base).unwrap_err();
        assert!(err.contains("skrull simulate only"), "{err}");
        assert!(
            options_with(&flags("compare"), off, true, false)
                .unwrap()
                .subgroups
        );
        assert_eq!(
            subgroups_flag(&flags("compare"), true),
            Ok(Some(Subgroups::Compare))
        );
        let err = config_over(&flags("yes"), base).unwrap_err();
        assert_eq!(err, "--subgroups: 'yes' is not on|off");
        let err = subgroups_flag(&flags("maybe"), true).unwrap_err();
        assert_eq!(err, "--subgroups: 'maybe' is not on|off|compare");
    }

    #[test]
    fn chunking_flags_set_the_config_and_chunkflow_gets_a_default_size() {
        let f = flags(&[
            "--chunk-size",
            "8K",
            "--chunk-keep",
            "2",
            "--chunk-state-permille",
            "100",
        ]);
        let cfg = config_from(&f, Policy::Balanced).unwrap();
        assert_eq!(
            cfg.chunking,
            Chunking {
                size: 8192,
                keep: 2,
                state_permille: 100
            }
        );
        assert_eq!(cfg.policy, Policy::Balanced);
        assert!(
            config_from(&Flags::default(), Policy::Balanced)
                .unwrap()
                .chunking
                == Chunking::OFF
        );
        // chunkflow without a size: the core's default for N x C = 212,992 tokens chunked over
        // the whole group of 8 GPUs of 26K (state 1,704 tokens per GPU), at most BucketSize.
        let cfg = config_from(&flags(&["--policy", "chunkflow"]), Policy::Balanced).unwrap();
        assert_eq!(cfg.policy, Policy::ChunkFlow);
        assert_eq!(cfg.chunking, Chunking::new(16_384, 1));
        let given = flags(&["--policy", "chunkflow", "--chunk-size", "4096"]);
        assert_eq!(
            config_from(&given, Policy::Balanced).unwrap().chunking.size,
            4096
        );
        let err = config_from(
            &flags(&["--chunk-size", "1K", "--chunk-keep", "0"]),
            Policy::Balanced,
        )
        .unwrap_err();
        assert!(err.contains("chunk"), "{err}");
        let err = config_from(&flags(&["--chunk-keep", "x"]), Policy::Balanced).unwrap_err();
        assert_eq!(err, "--chunk-keep: 'x' is not a whole number");
    }

    /// Regression: `skrull plan --dp 2 --cp 16 --policy chunkflow` refused its own default
    /// (the chunk was sized for one GPU, where the state of a 212,992-token sequence alone is
    /// over BucketSize), also with the 7B model at 13K and the 0.5B at 26K.
    #[test]
    fn chunkflow_default_chunk_size_plans_at_dp2_cp16() {
        for extra in [
            &[][..],
            &["--model", "qwen2.5-7b", "--bucket", "13312"][..],
            &["--model", "qwen2.5-0.5b", "--bucket", "26624"][..],
        ] {
            let mut args = vec!["--dp", "2", "--cp", "16", "--policy", "chunkflow"];
            args.extend_from_slice(extra);
            let cfg = config_from(&flags(&args), Policy::Balanced).unwrap();
            assert!(cfg.chunking.is_on(), "{args:?}");
            assert_eq!(cfg.default_chunk_size(0), Ok(cfg.chunking.size));
        }
    }

    /// When no chunk size fits, the CLI says why with the numbers and which flag to set.
    #[test]
    fn no_default_chunk_size_names_the_flags() {
        let args = [
            "--dp",
            "1",
            "--cp",
            "1",
            "--bucket",
            "1000",
            "--policy",
            "chunkflow",
            "--chunk-state-permille",
            "1000",
        ];
        let err = config_from(&flags(&args), Policy::Balanced).unwrap_err();
        assert!(err.contains("no default chunk size fits"), "{err}");
        assert!(err.contains("--chunk-size"), "{err}");
    }
}
