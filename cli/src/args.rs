//! Command-line parsing helpers: `--flag value` pairs, token counts with a `K` suffix, model
//! shapes, and length files. A leaf: the flags that build a configuration or a cost model are
//! read in `config_flags`.

use std::collections::BTreeMap;
use std::io::Read;

use skrull_core::ModelShape;

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

/// `a|b|c`: the names an option flag accepts, for its error message.
pub fn one_of<const N: usize>(names: [&str; N]) -> String {
    names.join("|")
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
}
