//! The JSON form of a [`Config`] (the `"config"` object of `skrull plan --format json`): one
//! table of keys that the writer ([`write()`]) and the reader ([`read`]) both walk, so a new
//! field is added in one place.

use serde_json::Value;
use skrull_core::{
    Chunking, Config, FlopsFormula, ModelShape, Policy, ShardPadding, Synchronisation, Victim,
};

use crate::args::{model_name, parse_model};

/// How one key's value is written and read.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A whole number that fits a `u32`.
    U32(fn(&Config) -> u32, fn(&mut Config, u32)),
    /// `true` or `false`.
    Bool(fn(&Config) -> bool, fn(&mut Config, bool)),
    /// A name: the writer's string, and the parser (`None`: unknown name).
    Name(fn(&Config) -> String, fn(&mut Config, &str) -> Option<()>),
}

/// One key of the `"config"` object.
#[derive(Clone, Copy)]
pub struct Key {
    /// The JSON key.
    pub name: &'static str,
    /// Whether a plan file must give it (else the reader keeps [`base`]'s value).
    pub required: bool,
    /// Its type, getter and setter.
    pub kind: Kind,
    /// Whether the writer emits it for a configuration (every key but the chunking ones:
    /// those only when [`Config::chunking`] is not [`Chunking::OFF`], so plans without
    /// chunking read as before).
    pub written: fn(&Config) -> bool,
}

const fn key(name: &'static str, required: bool, kind: Kind) -> Key {
    Key {
        name,
        required,
        kind,
        written: |_| true,
    }
}

/// A chunking key: written only when chunking is not [`Chunking::OFF`].
const fn chunk_key(name: &'static str, kind: Kind) -> Key {
    Key {
        name,
        required: false,
        kind,
        written: |c| c.chunking != Chunking::OFF,
    }
}

/// Every key, in the order the writer emits them.
pub const KEYS: [Key; 19] = [
    key("dp", true, Kind::U32(|c| c.dp, |c, v| c.dp = v)),
    key("cp", true, Kind::U32(|c| c.cp, |c, v| c.cp = v)),
    key(
        "bucket_tokens",
        true,
        Kind::U32(|c| c.bucket, |c, v| c.bucket = v),
    ),
    key(
        "policy",
        false,
        Kind::Name(
            |c| c.policy.name().into(),
            |c, s| Policy::from_name(s).map(|v| c.policy = v),
        ),
    ),
    key(
        "victim",
        false,
        Kind::Name(
            |c| c.victim.name().into(),
            |c, s| Victim::from_name(s).map(|v| c.victim = v),
        ),
    ),
    key(
        "model",
        false,
        Kind::Name(
            |c| model_name(&c.model),
            |c, s| parse_model(s).ok().map(|m| c.model = m),
        ),
    ),
    key(
        "flops",
        false,
        Kind::Name(
            |c| c.flops.name().into(),
            |c, s| FlopsFormula::from_name(s).map(|v| c.flops = v),
        ),
    ),
    key(
        "max_micro_batches",
        false,
        Kind::U32(|c| c.max_micro_batches, |c, v| c.max_micro_batches = v),
    ),
    key(
        "shard_padding",
        false,
        Kind::Name(
            |c| c.shard_padding.name().into(),
            |c, s| ShardPadding::from_name(s).map(|v| c.shard_padding = v),
        ),
    ),
    key(
        "pad_multiple",
        false,
        Kind::U32(|c| c.pad_multiple, |c, v| c.pad_multiple = v),
    ),
    key(
        "pad_local",
        false,
        Kind::Bool(|c| c.pad_local, |c, v| c.pad_local = v),
    ),
    key(
        "lockstep",
        false,
        Kind::Bool(|c| c.lockstep, |c, v| c.lockstep = v),
    ),
    // Absent in plans written before sub-groups: the base's (on).
    key(
        "subgroups",
        false,
        Kind::Bool(|c| c.subgroups, |c, v| c.subgroups = v),
    ),
    key(
        "fill_empty",
        false,
        Kind::Bool(|c| c.fill_empty, |c, v| c.fill_empty = v),
    ),
    key(
        "micro_batches",
        false,
        Kind::U32(|c| c.micro_batches, |c, v| c.micro_batches = v),
    ),
    // Absent with chunking off (and in plans written before chunking): off.
    chunk_key(
        "chunk_size",
        Kind::U32(|c| c.chunking.size, |c, v| c.chunking.size = v),
    ),
    chunk_key(
        "chunk_keep",
        Kind::U32(|c| c.chunking.keep, |c, v| c.chunking.keep = v),
    ),
    chunk_key(
        "chunk_state_permille",
        Kind::U32(
            |c| c.chunking.state_permille,
            |c, v| c.chunking.state_permille = v,
        ),
    ),
    // Absent at the default (and in plans written before it): cp-group.
    Key {
        name: "sync",
        required: false,
        kind: Kind::Name(
            |c| c.sync.name().into(),
            |c, s| Synchronisation::from_name(s).map(|v| c.sync = v),
        ),
        written: |c| c.sync != Synchronisation::CpGroup,
    },
];

/// What the reader starts from: [`Config::new`]'s options, Qwen2.5-0.5B, and zero for the
/// required layout keys.
pub fn base() -> Config {
    Config::new(0, 0, 0, ModelShape::QWEN2_5_0_5B)
}

/// The `"config"` object of `cfg`: `{"dp": 4, "cp": 8, ...}` on one line, in [`KEYS`] order
/// (the keys [`Key::written`] for it).
pub fn write(cfg: &Config) -> String {
    let fields: Vec<String> = KEYS
        .iter()
        .filter(|k| (k.written)(cfg))
        .map(|k| {
            let value = match k.kind {
                Kind::U32(get, _) => get(cfg).to_string(),
                Kind::Bool(get, _) => get(cfg).to_string(),
                Kind::Name(get, _) => Value::String(get(cfg)).to_string(),
            };
            format!("\"{}\": {value}", k.name)
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// Reads a `"config"` object: [`base`] with every key given applied (`null` counts as
/// absent). Not validated: the caller's flags have their say first.
///
/// # Errors
/// A message naming a missing required key, a value of the wrong type, a number out of
/// range or an unknown name.
pub fn read(obj: &Value) -> Result<Config, String> {
    let ctx = "plan config";
    let mut cfg = base();
    for k in &KEYS {
        let v = match obj.get(k.name) {
            None | Some(Value::Null) if k.required => {
                return Err(format!("{ctx}: \"{}\" must be a whole number", k.name));
            }
            None | Some(Value::Null) => continue,
            Some(v) => v,
        };
        match k.kind {
            Kind::U32(_, set) => {
                let n = v
                    .as_u64()
                    .ok_or_else(|| format!("{ctx}: \"{}\" must be a whole number", k.name))?;
                let n = u32::try_from(n)
                    .map_err(|_| format!("{ctx}: {} {n} is out of range", k.name))?;
                set(&mut cfg, n);
            }
            Kind::Bool(_, set) => {
                let b = v
                    .as_bool()
                    .ok_or_else(|| format!("{ctx}: \"{}\" must be true or false", k.name))?;
                set(&mut cfg, b);
            }
            Kind::Name(_, set) => {
                let s = v
                    .as_str()
                    .ok_or_else(|| format!("{ctx}: \"{}\" must be a string", k.name))?;
                set(&mut cfg, s).ok_or_else(|| format!("{ctx}: unknown {} '{s}'", k.name))?;
            }
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_kit::sample::Rng;

    fn pick<T: Copy, const N: usize>(rng: &mut Rng, all: [T; N]) -> T {
        all[rng.below(N as u64) as usize]
    }

    /// A configuration with every key drawn at random (not necessarily valid).
    fn random_config(rng: &mut Rng) -> Config {
        let models = [
            ModelShape::QWEN2_5_0_5B,
            ModelShape::QWEN2_5_7B,
            ModelShape {
                hidden: 1 + rng.below(5000) as u32,
                kv_hidden: rng.below(5000) as u32,
                ffn: rng.below(1 << 20) as u32,
                layers: rng.below(100) as u32,
                vocab: rng.below(1 << 23) as u32,
                swiglu: rng.below(2) == 1,
            },
        ];
        let num = |rng: &mut Rng| match rng.below(3) {
            0 => 0,
            1 => rng.below(100) as u32,
            _ => rng.next_u64() as u32,
        };
        let mut cfg = Config::new(num(rng), num(rng), num(rng), pick(rng, models));
        cfg.policy = pick(rng, Policy::ALL);
        cfg.victim = pick(rng, Victim::ALL);
        cfg.flops = pick(rng, FlopsFormula::ALL);
        cfg.shard_padding = pick(rng, ShardPadding::ALL);
        cfg.max_micro_batches = num(rng);
        cfg.pad_multiple = num(rng);
        cfg.micro_batches = num(rng);
        cfg.pad_local = rng.below(2) == 1;
        cfg.lockstep = rng.below(2) == 1;
        cfg.subgroups = rng.below(2) == 1;
        cfg.fill_empty = rng.below(2) == 1;
        cfg.sync = pick(rng, Synchronisation::ALL);
        if rng.below(2) == 1 {
            cfg.chunking = Chunking {
                size: num(rng),
                keep: num(rng),
                state_permille: num(rng),
            };
        }
        cfg
    }

    #[test]
    fn random_configs_round_trip_through_json() {
        let mut rng = Rng::new(21);
        let mut chunked = 0;
        for _ in 0..2000 {
            let cfg = random_config(&mut rng);
            let text = write(&cfg);
            let v: Value = serde_json::from_str(&text).unwrap();
            let absent = 3 * usize::from(cfg.chunking == Chunking::OFF)
                + usize::from(cfg.sync == Synchronisation::CpGroup);
            let keys = KEYS.len() - absent;
            assert_eq!(v.as_object().map(|o| o.len()), Some(keys), "{text}");
            assert_eq!(read(&v), Ok(cfg), "{text}");
            chunked += usize::from(cfg.chunking != Chunking::OFF);
        }
        assert!(chunked > 500, "{chunked} of 2000 with chunking");
    }

    #[test]
    fn chunking_keys_are_written_when_chunking_is_not_off() {
        let mut cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
        cfg.policy = Policy::ChunkFlow;
        cfg.chunking = Chunking::new(16_384, 2);
        let text = write(&cfg);
        assert!(
            text.ends_with(
                "\"micro_batches\": 0, \"chunk_size\": 16384, \"chunk_keep\": 2, \
                 \"chunk_state_permille\": 64}"
            ),
            "{text}"
        );
        assert!(text.contains("\"policy\": \"chunkflow\""), "{text}");
        assert_eq!(read(&serde_json::from_str(&text).unwrap()), Ok(cfg));
        // A plan without the keys reads with chunking off.
        let old = "{\"dp\": 1, \"cp\": 8, \"bucket_tokens\": 64}";
        let old = read(&serde_json::from_str(old).unwrap()).unwrap();
        assert_eq!(old.chunking, Chunking::OFF);
    }

    #[test]
    fn every_key_is_read_and_written() {
        let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate key");
        let text = write(&Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B));
        assert_eq!(
            text,
            "{\"dp\": 4, \"cp\": 8, \"bucket_tokens\": 26624, \"policy\": \"skrull\", \
             \"victim\": \"shortest\", \"model\": \"qwen2.5-0.5b\", \"flops\": \"paper\", \
             \"max_micro_batches\": 0, \"shard_padding\": \"none\", \"pad_multiple\": 1, \
             \"pad_local\": false, \"lockstep\": false, \"subgroups\": true, \
             \"fill_empty\": false, \"micro_batches\": 0}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let read_text = |t: &str| read(&serde_json::from_str(t).unwrap());
        let err = |t: &str| read_text(t).unwrap_err();
        assert_eq!(
            err("{\"cp\": 8, \"bucket_tokens\": 64}"),
            "plan config: \"dp\" must be a whole number"
        );
        let base = "\"dp\": 1, \"cp\": 8, \"bucket_tokens\": 64";
        assert_eq!(
            err(&format!("{{{base}, \"flops\": \"exact\"}}")),
            "plan config: unknown flops 'exact'"
        );
        assert_eq!(
            err(&format!("{{{base}, \"lockstep\": 1}}")),
            "plan config: \"lockstep\" must be true or false"
        );
        assert_eq!(
            err(&format!("{{{base}, \"policy\": 4}}")),
            "plan config: \"policy\" must be a string"
        );
        let ok = read_text(&format!("{{{base}, \"victim\": null}}")).unwrap();
        assert_eq!(ok.victim, Victim::Shortest);
        assert!(ok.subgroups, "absent: the base's");
    }

    /// Regression: a `max_micro_batches` above `u32::MAX` read as 0 ("no limit") instead of
    /// being refused.
    #[test]
    fn out_of_range_max_micro_batches_is_an_error_not_no_limit() {
        let text =
            "{\"dp\": 1, \"cp\": 8, \"bucket_tokens\": 64, \"max_micro_batches\": 4294967296}";
        assert_eq!(
            read(&serde_json::from_str(text).unwrap()),
            Err("plan config: max_micro_batches 4294967296 is out of range".into())
        );
    }
}
