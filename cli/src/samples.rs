//! The calibration samples file (`skrull calibrate --samples CSV`, written by
//! `python -m skrull.profile`): one measurement per row, `KIND,SIZE,VALUE[,EXTRA...]`.
//! `docs/profiling.md` documents every kind.

use std::collections::BTreeMap;

/// Which links a collective crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub enum Scope {
    /// Every GPU of the group in one node (`intra`, the default).
    #[default]
    Intra,
    /// The group spans nodes (`inter`).
    Inter,
}

impl Scope {
    /// The name rows use (`intra`, `inter`).
    pub fn name(self) -> &'static str {
        match self {
            Scope::Intra => "intra",
            Scope::Inter => "inter",
        }
    }
}

/// Whether the activations of a memory sample were checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub enum MemoryMode {
    /// Every layer keeps its activations for the backward pass (`plain`, the default).
    #[default]
    Plain,
    /// Activation checkpointing: a layer keeps only its input and recomputes the rest
    /// (`checkpoint`).
    Checkpoint,
}

impl MemoryMode {
    /// The name rows use (`plain`, `checkpoint`).
    pub fn name(self) -> &'static str {
        match self {
            MemoryMode::Plain => "plain",
            MemoryMode::Checkpoint => "checkpoint",
        }
    }
}

/// `collective,BYTES,SECONDS[,GROUP][,intra|inter]`: one all-gather whose output is `BYTES`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveSample {
    /// Size of the gathered result, bytes.
    pub bytes: f64,
    /// Seconds it took (the slowest rank).
    pub seconds: f64,
    /// GPUs in the group (`None`: the `--group` flag).
    pub group: Option<u32>,
    /// Inside one node or across nodes.
    pub scope: Scope,
}

/// `attention,LENGTH,SECONDS[,COUNT]`: causal attention forward + backward of **one layer**
/// over `COUNT` sequences of `LENGTH` tokens packed into one varlen call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSample {
    /// Tokens per sequence.
    pub len: u32,
    /// Sequences in the pack.
    pub count: u32,
    /// Seconds.
    pub seconds: f64,
}

/// `memory,TOKENS,BYTES[,plain|checkpoint]`: the peak memory of one GPU for a micro-batch of
/// `TOKENS` tokens, model states included.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemorySample {
    /// Tokens the GPU holds in the micro-batch.
    pub tokens: u32,
    /// Peak bytes.
    pub bytes: f64,
    /// With or without activation checkpointing.
    pub mode: MemoryMode,
}

/// `sharded,COUNT,SECONDS[,TOKENS[,GROUP]]`: one layer's attention, forward + backward, of a
/// micro-batch holding `COUNT` sequences of `TOKENS` tokens each, all sharded over a ring of
/// `GROUP` GPUs (the executor's path: its work per sharded sequence is what the rows' slope
/// measures).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardedSample {
    /// Sharded sequences in the micro-batch.
    pub count: u32,
    /// Seconds.
    pub seconds: f64,
    /// Tokens per sequence (`None`: not given).
    pub tokens: Option<u32>,
    /// GPUs in the ring (`None`: the `--group` flag).
    pub group: Option<u32>,
}

/// `local,COUNT,SECONDS,TOKENS`: one layer's attention, forward + backward, of `COUNT`
/// sequences of `TOKENS` tokens each, every one whole on the GPU (the executor's path: where
/// it calls the kernel once per sequence, the rows' slope measures the cost per call).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalSample {
    /// Sequences in the micro-batch.
    pub count: u32,
    /// Seconds.
    pub seconds: f64,
    /// Tokens per sequence.
    pub tokens: u32,
}

/// Samples read from a calibration CSV.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Samples {
    /// `compute,LENGTH,SECONDS` (or a bare `LENGTH,SECONDS`): forward + backward of the whole
    /// model on one `LENGTH`-token sequence, whole on one GPU.
    pub compute: Vec<(u32, f64)>,
    /// `layer,TOKENS,SECONDS`: forward + backward of one decoder layer on one `TOKENS`-token
    /// sequence.
    pub layer: Vec<(u32, f64)>,
    /// `head,TOKENS,SECONDS`: forward + backward of the final norm, LM head and loss on
    /// `TOKENS` tokens.
    pub head: Vec<(u32, f64)>,
    /// Packed causal attention of one layer.
    pub attention: Vec<AttentionSample>,
    /// Collectives.
    pub collective: Vec<CollectiveSample>,
    /// Peak memory per GPU against tokens.
    pub memory: Vec<MemorySample>,
    /// One layer's sharded attention against the number of sharded sequences.
    pub sharded: Vec<ShardedSample>,
    /// One layer's attention of whole sequences against their number.
    pub local: Vec<LocalSample>,
    /// `step,PARAMETERS,SECONDS`: one optimizer step (gradients zeroed, parameters updated)
    /// over `PARAMETERS` parameters.
    pub step: Vec<(f64, f64)>,
}

impl Samples {
    /// Whether no row was read.
    pub fn is_empty(&self) -> bool {
        self.compute.is_empty()
            && self.layer.is_empty()
            && self.head.is_empty()
            && self.attention.is_empty()
            && self.collective.is_empty()
            && self.memory.is_empty()
            && self.sharded.is_empty()
            && self.local.is_empty()
            && self.step.is_empty()
    }

    /// Whole-model compute samples: the `compute` rows, then one sample per token count of the
    /// `layer` rows, `layers x layer + head` (the mean where a count was measured several
    /// times; without a vocabulary, `vocab == 0`, no head is needed and `head` rows are
    /// refused).
    ///
    /// # Errors
    /// A message naming a token count measured for the layer but not the head, or the other
    /// way round.
    pub fn whole_model(&self, layers: u32, vocab: u32) -> Result<Vec<(u32, f64)>, String> {
        let mean = |rows: &[(u32, f64)]| {
            let mut m: BTreeMap<u32, (f64, u32)> = BTreeMap::new();
            for &(s, t) in rows {
                let e = m.entry(s).or_default();
                e.0 += t;
                e.1 += 1;
            }
            m.into_iter()
                .map(|(s, (sum, n))| (s, sum / f64::from(n)))
                .collect::<BTreeMap<u32, f64>>()
        };
        let (layer, head) = (mean(&self.layer), mean(&self.head));
        if vocab == 0 && !head.is_empty() {
            return Err("head samples given for a model without a vocabulary (vocab = 0)".into());
        }
        if let Some(s) = head.keys().find(|s| !layer.contains_key(s)) {
            return Err(format!(
                "head samples at {s} tokens have no layer sample at the same count"
            ));
        }
        let mut out = self.compute.clone();
        for (&s, &t) in &layer {
            let h = match head.get(&s) {
                Some(&h) => h,
                None if vocab == 0 => 0.0,
                None => {
                    return Err(format!(
                        "layer samples at {s} tokens have no head sample at the same count"
                    ));
                }
            };
            out.push((s, f64::from(layers) * t + h));
        }
        Ok(out)
    }
}

fn token_count(cell: &str, what: &str) -> Result<u32, String> {
    let v: f64 = cell
        .parse()
        .map_err(|_| format!("'{cell}' is not {what}"))?;
    if !(v >= 1.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0) {
        return Err(format!("'{cell}' is not {what}"));
    }
    Ok(v as u32)
}

fn positive(cell: &str) -> Result<f64, String> {
    match cell.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("sizes, times and bytes must be positive".into()),
        Err(_) => Err(format!("'{cell}' is not a number")),
    }
}

/// Parses one data row (cells already split and trimmed) into `out`.
fn parse_row(cells: &[&str], out: &mut Samples) -> Result<(), String> {
    let (kind, rest) = match cells {
        [x, t] => ("compute", [*x, *t].to_vec()),
        [k, rest @ ..] => (*k, rest.to_vec()),
        [] => return Err("empty row".into()),
    };
    let arity = |lo: usize, hi: usize, form: &str| {
        if rest.len() < lo || rest.len() > hi {
            Err(format!("expected {form}"))
        } else {
            Ok(())
        }
    };
    match kind {
        "compute" | "layer" | "head" => {
            arity(2, 2, &format!("{kind},TOKENS,SECONDS"))?;
            let s = token_count(rest[0], "a token count")?;
            let t = positive(rest[1])?;
            let v = match kind {
                "compute" => &mut out.compute,
                "layer" => &mut out.layer,
                _ => &mut out.head,
            };
            v.push((s, t));
        }
        "attention" => {
            arity(2, 3, "attention,LENGTH,SECONDS[,COUNT]")?;
            let len = token_count(rest[0], "a token count")?;
            let seconds = positive(rest[1])?;
            let count = match rest.get(2) {
                Some(c) => token_count(c, "a sequence count")?,
                None => 1,
            };
            out.attention.push(AttentionSample {
                len,
                count,
                seconds,
            });
        }
        "collective" => {
            arity(2, 4, "collective,BYTES,SECONDS[,GROUP][,intra|inter]")?;
            let mut s = CollectiveSample {
                bytes: positive(rest[0])?,
                seconds: positive(rest[1])?,
                group: None,
                scope: Scope::Intra,
            };
            for cell in &rest[2..] {
                match *cell {
                    "intra" => s.scope = Scope::Intra,
                    "inter" => s.scope = Scope::Inter,
                    c => {
                        let g = token_count(c, "a group size (or intra|inter)")?;
                        if g < 2 {
                            return Err("a collective's group has at least 2 GPUs".into());
                        }
                        s.group = Some(g);
                    }
                }
            }
            out.collective.push(s);
        }
        "memory" => {
            arity(2, 3, "memory,TOKENS,BYTES[,plain|checkpoint]")?;
            let tokens = token_count(rest[0], "a token count")?;
            let bytes = positive(rest[1])?;
            let mode = match rest.get(2).copied() {
                None | Some("plain") => MemoryMode::Plain,
                Some("checkpoint") => MemoryMode::Checkpoint,
                Some(m) => return Err(format!("'{m}' is not plain|checkpoint")),
            };
            out.memory.push(MemorySample {
                tokens,
                bytes,
                mode,
            });
        }
        "sharded" => {
            arity(2, 4, "sharded,COUNT,SECONDS[,TOKENS[,GROUP]]")?;
            let count = token_count(rest[0], "a sequence count")?;
            let seconds = positive(rest[1])?;
            let tokens = rest
                .get(2)
                .map(|c| token_count(c, "a token count"))
                .transpose()?;
            let group = rest
                .get(3)
                .map(|c| token_count(c, "a group size"))
                .transpose()?;
            out.sharded.push(ShardedSample {
                count,
                seconds,
                tokens,
                group,
            });
        }
        "local" => {
            arity(3, 3, "local,COUNT,SECONDS,TOKENS")?;
            out.local.push(LocalSample {
                count: token_count(rest[0], "a sequence count")?,
                seconds: positive(rest[1])?,
                tokens: token_count(rest[2], "a token count")?,
            });
        }
        "step" => {
            arity(2, 2, "step,PARAMETERS,SECONDS")?;
            let params = positive(rest[0])?;
            out.step.push((params, positive(rest[1])?));
        }
        other => {
            return Err(format!(
                "unknown kind '{other}' (compute, layer, head, attention, collective, memory, \
                 sharded, local, step)"
            ));
        }
    }
    Ok(())
}

/// Parses a calibration CSV: one row per line, `#` starts a comment, blank lines are skipped,
/// and so is a header (a first row whose size cell is not a number).
///
/// # Errors
/// A message naming the bad line.
pub fn parse_samples(text: &str) -> Result<Samples, String> {
    let mut out = Samples::default();
    let mut first = true;
    for (no, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let size_cell = match cells.as_slice() {
            [x, _] => Some(*x),
            [_, x, ..] => Some(*x),
            _ => None,
        };
        let header = first && size_cell.is_some_and(|x| x.parse::<f64>().is_err());
        first = false;
        if header {
            continue;
        }
        parse_row(&cells, &mut out).map_err(|e| format!("line {}: {e}: '{raw}'", no + 1))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_with_its_optional_cells() {
        let s = parse_samples(
            "kind,size,value,extra\n# c\n1024,0.01\ncompute,2048, 0.02\nlayer,512,1e-3\n\
             head,512,2e-4\nattention,256,1e-4\nattention,128,1e-4,4\ncollective,1e6,5e-5\n\
             collective,1e6,9e-5,16,inter\ncollective,2e6,6e-5,intra\nmemory,512,1e9\n\
             memory,1024,1.5e9,checkpoint # trailing comment\n",
        )
        .unwrap();
        assert_eq!(s.compute, vec![(1024, 0.01), (2048, 0.02)]);
        assert_eq!(
            (s.layer.clone(), s.head.clone()),
            (vec![(512, 1e-3)], vec![(512, 2e-4)])
        );
        assert_eq!(
            s.attention,
            vec![
                AttentionSample {
                    len: 256,
                    count: 1,
                    seconds: 1e-4
                },
                AttentionSample {
                    len: 128,
                    count: 4,
                    seconds: 1e-4
                }
            ]
        );
        assert_eq!(s.collective.len(), 3);
        let t = parse_samples("sharded,4,0.02,256,2\nsharded,1,0.01\nstep,1e6,0.005\n").unwrap();
        assert_eq!(
            t.sharded,
            vec![
                ShardedSample {
                    count: 4,
                    seconds: 0.02,
                    tokens: Some(256),
                    group: Some(2)
                },
                ShardedSample {
                    count: 1,
                    seconds: 0.01,
                    tokens: None,
                    group: None
                }
            ]
        );
        assert_eq!(t.step, vec![(1e6, 0.005)]);
        assert!(!t.is_empty());
        assert!(
            parse_samples("sharded,0,0.01\n")
                .unwrap_err()
                .contains("sequence count")
        );
        let err = parse_samples("step,1e6,0.1\nstep,1e6,0.1,9\n").unwrap_err();
        assert!(err.contains("step,PARAMETERS"), "{err}");
        assert_eq!(
            (s.collective[1].group, s.collective[1].scope),
            (Some(16), Scope::Inter)
        );
        assert_eq!(
            (s.collective[2].group, s.collective[2].scope),
            (None, Scope::Intra)
        );
        assert_eq!(
            s.memory,
            vec![
                MemorySample {
                    tokens: 512,
                    bytes: 1e9,
                    mode: MemoryMode::Plain
                },
                MemorySample {
                    tokens: 1024,
                    bytes: 1.5e9,
                    mode: MemoryMode::Checkpoint
                }
            ]
        );
    }

    #[test]
    fn bad_rows_name_their_line_and_problem() {
        let err = |text: &str| parse_samples(text).unwrap_err();
        assert!(err("1024,0.01\nx,y\n").contains("line 2"));
        assert!(err("1024,-1\n").contains("positive"));
        assert!(err("gpu,1,1\n").contains("unknown kind 'gpu'"));
        assert!(err("1.5,1\n").contains("token count"));
        assert!(err("memory,512,1e9,recompute\n").contains("plain|checkpoint"));
        assert!(err("collective,1e6,1e-5,1\n").contains("at least 2"));
        assert!(err("collective,1e6,1e-5,8,inter,9\n").contains("expected collective"));
        assert!(err("layer,512,1e-3,4\n").contains("expected layer,TOKENS,SECONDS"));
        assert!(err("attention,512,1e-3,0\n").contains("sequence count"));
        // Only the first row may be a header.
        assert!(err("layer,512,1e-3\nkind,size,value\n").contains("line 2"));
    }

    #[test]
    fn layer_and_head_rows_compose_whole_model_samples() {
        let s = parse_samples(
            "layer,512,1e-3\nlayer,512,3e-3\nhead,512,5e-3\nlayer,1024,4e-3\nhead,1024,6e-3\n\
             compute,4096,1.0\n",
        )
        .unwrap();
        let w = s.whole_model(10, 1000).unwrap();
        assert_eq!(w[0], (4096, 1.0));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert_eq!((w[1].0, w[2].0), (512, 1024));
        assert!(close(w[1].1, 10.0 * 2e-3 + 5e-3) && close(w[2].1, 10.0 * 4e-3 + 6e-3));
        let lonely = parse_samples("layer,512,1e-3\nlayer,1024,1e-3\nhead,512,1e-3\n").unwrap();
        assert!(lonely.whole_model(2, 100).unwrap_err().contains("1024"));
        assert!(lonely.whole_model(2, 0).unwrap_err().contains("vocab"));
        let headless = parse_samples("layer,512,1e-3\n").unwrap();
        assert_eq!(headless.whole_model(3, 0), Ok(vec![(512, 3e-3)]));
        let orphan = parse_samples("layer,512,1e-3\nhead,512,1e-3\nhead,64,1e-3\n").unwrap();
        assert!(orphan.whole_model(3, 10).unwrap_err().contains("64 tokens"));
    }
}
