//! Command-line parsing helpers: `--flag value` pairs, token counts with a `K` suffix, model
//! shapes, and length files.

use std::collections::BTreeMap;
use std::io::Read;

use skrull_core::config::cost::Overlap;
use skrull_core::{
    Chunking, Config, CostModel, FlopsFormula, ModelShape, Policy, ShardPadding, Victim,
};

/// `--flag value` pairs and bare `--switch`es after the subcommand.
#[derive(Debug, Default)]
pub struct Flags {
    values: BTreeMap<String, String>,
    used: std::cell::RefCell<Vec<String>>,
}

/// Flags that take no value.
const SWITCHES: [&str; 6] = [
    "--help",
    "--online",
    "--no-rollback",
    "--pad-local",
    "--lockstep",
    "--fill-empty",
];

impl Flags {
    /// Parses `args` (without the program and subcommand names).
    ///
    /// # Errors
    /// A message naming a stray argument or a flag missing its value.
    pub fn parse(args: &[String]) -> Result<Flags, String> {
        let mut values = BTreeMap::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if !a.starts_with("--") {
                return Err(format!("unexpected argument '{a}'"));
            }
            if SWITCHES.contains(&a.as_str()) {
                values.insert(a.clone(), String::new());
                continue;
            }
            let Some(v) = it.next() else {
                return Err(format!("{a} needs a value"));
            };
            values.insert(a.clone(), v.clone());
        }
        Ok(Flags {
            values,
            used: Default::default(),
        })
    }

    /// The value of `--name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.used.borrow_mut().push(name.to_string());
        self.values.get(name).map(String::as_str)
    }

    /// Whether the switch `--name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Rejects flags no command asked for.
    ///
    /// # Errors
    /// A message naming the first unknown flag.
    pub fn finish(&self) -> Result<(), String> {
        let used = self.used.borrow();
        match self.values.keys().find(|k| !used.contains(k)) {
            Some(k) => Err(format!("unknown flag {k}")),
            None => Ok(()),
        }
    }

    /// `--name` as a token count (`26K` = 26,624), or `default`.
    ///
    /// # Errors
    /// A message naming the flag and the bad value.
    pub fn tokens(&self, name: &str, default: u32) -> Result<u32, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_tokens(v).ok_or_else(|| format!("{name}: '{v}' is not a token count")),
        }
    }

    /// `--name` as an unsigned integer, or `default`.
    ///
    /// # Errors
    /// A message naming the flag and the bad value.
    pub fn u64(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{name}: '{v}' is not a whole number")),
        }
    }
}

/// Parses `123`, `26K` or `26k` (K = 1024); `None` on anything else or on overflow.
pub fn parse_tokens(s: &str) -> Option<u32> {
    let s = s.trim();
    let (digits, mult) = match s.strip_suffix(['K', 'k']) {
        Some(d) => (d, 1024u64),
        None => (s, 1u64),
    };
    let v: u64 = digits.parse().ok()?;
    u32::try_from(v.checked_mul(mult)?).ok()
}

/// Parses a preset name or `custom:hidden=H,kv_hidden=KV,ffn=F,layers=L,vocab=V,swiglu=true`.
///
/// # Errors
/// A message naming the unknown preset or the bad field.
pub fn parse_model(s: &str) -> Result<ModelShape, String> {
    if let Some(shape) = ModelShape::preset(s) {
        return Ok(shape);
    }
    let Some(fields) = s.strip_prefix("custom:") else {
        return Err(format!(
            "unknown model '{s}' (presets: qwen2.5-0.5b, qwen2.5-7b; or custom:hidden=..,kv_hidden=..,ffn=..,layers=..,vocab=..,swiglu=true)"
        ));
    };
    let mut m = ModelShape {
        hidden: 0,
        kv_hidden: 0,
        ffn: 0,
        layers: 0,
        vocab: 0,
        swiglu: true,
    };
    for kv in fields.split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("model field '{kv}' needs key=value"))?;
        if k == "swiglu" {
            m.swiglu = matches!(v, "true" | "1" | "yes");
            continue;
        }
        let n: u32 = v
            .parse()
            .map_err(|_| format!("model field {k}: '{v}' is not a number"))?;
        match k {
            "hidden" => m.hidden = n,
            "kv_hidden" => m.kv_hidden = n,
            "ffn" => m.ffn = n,
            "layers" => m.layers = n,
            "vocab" => m.vocab = n,
            _ => return Err(format!("unknown model field '{k}'")),
        }
    }
    Ok(m)
}

/// The name `--model` accepts for `shape`.
pub fn model_name(shape: &ModelShape) -> String {
    for name in ["qwen2.5-0.5b", "qwen2.5-7b"] {
        if ModelShape::preset(name) == Some(*shape) {
            return name.to_string();
        }
    }
    format!(
        "custom:hidden={},kv_hidden={},ffn={},layers={},vocab={},swiglu={}",
        shape.hidden, shape.kv_hidden, shape.ffn, shape.layers, shape.vocab, shape.swiglu
    )
}

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
/// --subgroups --chunk-size --chunk-keep --chunk-state-permille`, and the cost model: `--gpu
/// --cost-model --gpus-per-node --overlap`, see [`cost_over`]), then validated. `skrull plan`
/// starts from the paper's defaults, `skrull evaluate` from the plan file's configuration,
/// `skrull simulate` from each setup's. `chunkflow` with chunking off (and no `--chunk-size`)
/// gets the default chunk size for the longest sequence the layout accepts
/// ([`default_chunk_size`](crate::chunking::default_chunk_size)).
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
        // chunkflow needs a chunk size: the default for the longest sequence that fits.
        let longest = cfg.budget().max_sharded_len();
        cfg.chunking.size = crate::chunking::default_chunk_size(&cfg, longest).unwrap_or(0);
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// `a|b|c`: the names an option flag accepts, for its error message.
pub fn one_of<const N: usize>(names: [&str; N]) -> String {
    names.join("|")
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
    options_with(flags, base, false)
}

/// [`options_over`], with `--subgroups compare` accepted (as sub-groups on) when `compare`.
///
/// # Errors
/// A message naming the bad flag and value.
pub fn options_with(flags: &Flags, base: Config, compare: bool) -> Result<Config, String> {
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
        cost =
            crate::calibrate::parse_cost_model(&text, &cost).map_err(|e| format!("{path}: {e}"))?;
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

/// Parses whitespace-separated token counts (a `K` suffix is accepted; `#` starts a comment).
///
/// # Errors
/// A message naming the bad token and its position.
pub fn parse_lengths(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        for word in line.split(|c: char| c.is_whitespace() || c == ',') {
            if word.is_empty() {
                continue;
            }
            let v = parse_tokens(word)
                .ok_or_else(|| format!("line {}: '{word}' is not a token count", line_no + 1))?;
            out.push(v);
        }
    }
    Ok(out)
}

/// Reads lengths from a file, or standard input for `-`.
///
/// # Errors
/// A message naming the file and the I/O or parse error.
pub fn read_lengths(path: &str) -> Result<Vec<u32>, String> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("stdin: {e}"))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?
    };
    parse_lengths(&text).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_suffixes() {
        assert_eq!(parse_tokens("26K"), Some(26_624));
        assert_eq!(parse_tokens("13k"), Some(13_312));
        assert_eq!(parse_tokens("100"), Some(100));
        assert_eq!(parse_tokens("4194304K"), None);
        assert_eq!(parse_tokens("-1"), None);
        assert_eq!(parse_tokens("1.5K"), None);
    }

    #[test]
    fn models_round_trip_through_names() {
        for shape in [ModelShape::QWEN2_5_0_5B, ModelShape::QWEN2_5_7B] {
            assert_eq!(parse_model(&model_name(&shape)), Ok(shape));
        }
        let custom = ModelShape {
            hidden: 1024,
            kv_hidden: 256,
            ffn: 4096,
            layers: 12,
            vocab: 0,
            swiglu: false,
        };
        assert_eq!(parse_model(&model_name(&custom)), Ok(custom));
        assert!(parse_model("llama").is_err());
    }

    #[test]
    fn length_files_name_the_bad_line() {
        assert_eq!(
            parse_lengths("1 2\n3K # c\n\n4,5"),
            Ok(vec![1, 2, 3072, 4, 5])
        );
        assert_eq!(
            parse_lengths("1\nx\n"),
            Err("line 2: 'x' is not a token count".into())
        );
    }

    #[test]
    fn unknown_flags_are_rejected() {
        let f = Flags::parse(&["--dp".into(), "2".into(), "--dpp".into(), "3".into()]).unwrap();
        assert_eq!(f.tokens("--dp", 1), Ok(2));
        assert_eq!(f.finish(), Err("unknown flag --dpp".into()));
        assert!(Flags::parse(&["--dp".into()]).is_err());
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
            options_with(&flags("compare"), off, true)
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
        let flags = |a: &[&str]| {
            Flags::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
        };
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
        // chunkflow without a size: the default for N x C = 212,992 tokens on one GPU of 26K.
        let cfg = config_from(&flags(&["--policy", "chunkflow"]), Policy::Balanced).unwrap();
        assert_eq!(cfg.policy, Policy::ChunkFlow);
        assert_eq!(cfg.chunking, Chunking::new(8192, 1));
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
}
