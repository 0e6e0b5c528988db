//! The input format of the `c_abi` and `rust_api` fuzz targets (and of the `layout` target
//! after its 16 header bytes): a mode byte, the configuration fields, one malformation of the
//! call, then the lengths. The committed corpora (`fuzz/corpus/`) mean what this decoder
//! makes of them: a change here changes every seed.

use skrull::{
    SKRULL_PRESET_QWEN2_5_0_5B, SKRULL_PRESET_QWEN2_5_7B, skrull_config, skrull_cost_model,
    skrull_status,
};
use skrull_core::{Config, CostModel, ModelShape};

/// The most sequences one input decodes to (keeps executions fast).
pub const MAX_N: usize = 1024;

/// Reads little-endian integers off the input, giving zeros once it runs out.
pub struct Reader<'a> {
    d: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `d`.
    pub fn new(d: &'a [u8]) -> Self {
        Reader { d }
    }
    /// The bytes left.
    pub fn remaining(&self) -> usize {
        self.d.len()
    }
    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, rest)) => {
                self.d = rest;
                b
            }
            None => 0,
        }
    }
    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

/// One selector byte: below 0xF0 it picks from `small`, otherwise a raw `u32` follows.
fn field(r: &mut Reader<'_>, small: &[u32]) -> u32 {
    let s = r.u8();
    if s >= 0xF0 {
        r.u32()
    } else {
        small[s as usize % small.len()]
    }
}

/// At most one malformation of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perturb {
    /// A well-formed call.
    None,
    /// The workspace one byte short (Rust: slice `which % 6` one element short).
    WorkspaceShort(u8),
    /// Output buffer `which % 6` one element short: placements, micro_batches, members,
    /// rank_tokens, per_dp, cp_groups (the Rust API: `which % 5`, the first five).
    OutputShort(u8),
    /// Pointer `which % 9` NULL: placements, micro_batches, members, rank_tokens, per_dp,
    /// summary, workspace, lengths, cp_groups (with capacity 0).
    Null(u8),
    /// `out.struct_size` replaced.
    OutStructSize(u32),
    /// `out._reserved` nonzero.
    OutReserved,
    /// `config.struct_size = 128` with one nonzero byte past the known fields.
    ConfigTail(u8),
    /// `config.struct_size` replaced.
    ConfigStructSize(u32),
    /// The workspace starts at an odd address (allowed: any alignment).
    OddWorkspace,
    /// The configuration as a version-1 program holds it: its first 60 bytes
    /// (`struct_size = 60`) at an address 4 past an 8-byte boundary (allowed: a struct that
    /// ends before `cost_model` needs 4-byte alignment only).
    V1ConfigAtFour,
    /// The error details pointed at an output buffer, `which % 2`: `micro_batches_per_dp`, the
    /// summary. The call must fail (the first problem in the order, `INVALID_ARG` when there
    /// is no earlier one) and write neither the details nor the output.
    DetailsOnOutput(u8),
    /// `cp_groups` NULL (capacity 0) and `micro_batches_per_dp` one short: the short buffer
    /// comes first in the field order, so never `NULL_ARG`, with sub-groups or without.
    GroupsNullPerDpShort,
}

/// A decoded fuzz input.
#[derive(Debug, Clone)]
pub struct Input {
    /// The configuration, as C passes it (its `cost_model` pointer NULL: point it at
    /// [`Input::cost`] right before the call).
    pub cfg: skrull_config,
    /// A caller cost model, one field perhaps out of range or unusual (mode bit `0x08`).
    pub cost: Option<skrull_cost_model>,
    /// Whether the call passes a `skrull_error_info` for the details (mode bit `0x04`).
    pub error_details: bool,
    /// The malformation of the call.
    pub perturb: Perturb,
    /// The batch.
    pub lengths: Vec<u32>,
}

/// Decodes bytes: a mode byte, the configuration fields, one perturbation, then lengths
/// (2 bytes each; 0xFFF0 and above is followed by a raw 4-byte length; in "fit" mode the
/// 2-byte value is folded into `1..=cp x bucket`).
///
/// Mode bits: `0x80` the Qwen2.5-7B preset, `0x40` model fields follow, `0x20` "fit" lengths,
/// `0x10` pad multiple, local padding and lockstep selectors follow, `0x08` a caller cost
/// model follows, `0x04` error details, `0x01` sub-groups on (`subgroups = 1`; with `0x02`
/// too: `subgroups = 2`, not a flag). `0x02` alone fills empty micro-batches
/// (`fill_empty = 1`) and makes the decoded `max_micro_batches` a fixed count instead
/// (`micro_batches`, then no limit). These bits read no byte, so an input written before
/// they existed keeps its fields and lengths.
///
/// Chunking: a perturbation selector of 4 (mod 16; a well-formed call, as 0 to 3) is followed
/// by a chunking selector byte (bit 0: policy `chunkflow`), then `chunk_size` (0, 1, or a
/// fraction of `cp x bucket` or of the bucket), `chunk_keep` and `chunk_state_permille`
/// selectors, some out of range ([`chunking`]). Inputs written before read the same bytes
/// unless that selector was 4.
pub fn decode(data: &[u8]) -> Input {
    let mut r = Reader::new(data);
    let mode = r.u8();
    let preset = if mode & 0x80 != 0 {
        SKRULL_PRESET_QWEN2_5_7B
    } else {
        SKRULL_PRESET_QWEN2_5_0_5B
    };
    let mut cfg = skrull_config::preset(preset).expect("presets exist");
    cfg.dp = field(&mut r, &[1, 2, 3, 4, 5, 8, 16, 64]);
    cfg.cp = field(&mut r, &[1, 2, 3, 4, 7, 8, 16, 256]);
    cfg.bucket_tokens = field(
        &mut r,
        &[1, 2, 3, 7, 10, 64, 100, 1000, 4096, 26_624, i32::MAX as u32],
    );
    cfg.policy = field(&mut r, &[0, 1, 2, 3, 4]);
    cfg.victim = field(&mut r, &[0, 1]);
    cfg.flops = field(&mut r, &[0, 1]);
    cfg.shard_padding = field(&mut r, &[0, 1]);
    cfg.max_micro_batches = field(&mut r, &[0, 0, 0, 1, 2, 3, 8]);
    if mode & 0x40 != 0 {
        let m = &mut cfg.model;
        m.hidden = field(&mut r, &[896, 3584, 1, 64, 1 << 16]);
        m.kv_hidden = field(&mut r, &[128, 512, 1, 64]);
        m.ffn = field(&mut r, &[4864, 18_944, 1, 1 << 18]);
        m.layers = field(&mut r, &[24, 28, 1, 1 << 10]);
        m.vocab = field(&mut r, &[151_936, 1, 1 << 22]);
        m.swiglu = field(&mut r, &[0, 1]);
    }
    if mode & 0x10 != 0 {
        // Pad multiple (0: none, as C reads it; 65,537: out of range), local padding and
        // lockstep (2: not a flag).
        cfg.pad_multiple = field(&mut r, &[1, 0, 2, 3, 8, 16, 64, 65_536, 65_537]);
        cfg.pad_local = field(&mut r, &[0, 1, 2]);
        cfg.lockstep = field(&mut r, &[0, 1, 2]);
    }
    let cost = (mode & 0x08 != 0).then(|| cost_model(&mut r, &cfg));
    // Set after the cost model, which reads the model shape through `to_core`.
    cfg.subgroups = match mode & 0x03 {
        0x01 => 1,
        0x03 => 2,
        _ => 0,
    };
    if mode & 0x03 == 0x02 {
        cfg.fill_empty = 1;
        (cfg.micro_batches, cfg.max_micro_batches) = (cfg.max_micro_batches, 0);
    }
    let perturb = match r.u8() % 16 {
        4 => {
            chunking(&mut r, &mut cfg);
            Perturb::None
        }
        9 => Perturb::WorkspaceShort(r.u8()),
        10 => Perturb::OutputShort(r.u8()),
        11 => Perturb::Null(r.u8()),
        12 => Perturb::OutStructSize(field(&mut r, &[0, 8, 95, 97, 104, 4096, 4097])),
        13 => Perturb::OutReserved,
        14 => Perturb::ConfigTail(r.u8()),
        15 => Perturb::ConfigStructSize(field(&mut r, &[0, 56, 59, 61, 64, 4096, 4097])),
        8 => Perturb::OddWorkspace,
        7 => Perturb::V1ConfigAtFour,
        6 => Perturb::DetailsOnOutput(r.u8()),
        5 => Perturb::GroupsNullPerDpShort,
        _ => Perturb::None,
    };
    let fit = mode & 0x20 != 0;
    let cap = u64::from(cfg.cp.max(1)) * u64::from(cfg.bucket_tokens.max(1));
    let mut lengths = Vec::new();
    while r.remaining() >= 2 && lengths.len() < MAX_N {
        let v = r.u16();
        let len = if v >= 0xFFF0 {
            r.u32()
        } else if fit {
            (1 + u64::from(v) % cap) as u32
        } else {
            u32::from(v)
        };
        lengths.push(len);
    }
    Input {
        cfg,
        cost,
        error_details: mode & 0x04 != 0,
        perturb,
        lengths,
    }
}

/// Reads the chunking fields (the input format above): the policy `chunkflow` (selector bit
/// 0), a chunk size from 0 (off) to `cp x bucket`, K from 0 to 65 and a state charge from 0 to
/// 1001 thousandths (0, 65 and 1001 out of range).
fn chunking(r: &mut Reader<'_>, cfg: &mut skrull_config) {
    let sel = r.u8();
    if sel & 1 != 0 {
        cfg.policy = 5;
    }
    let whole = cfg.cp.max(1).saturating_mul(cfg.bucket_tokens.max(1));
    let bucket = cfg.bucket_tokens.max(1);
    cfg.chunk_size = field(
        r,
        &[
            whole / 2,
            whole / 4,
            bucket / 2,
            bucket,
            whole / 8,
            0,
            1,
            4096,
            whole,
        ],
    );
    cfg.chunk_keep = field(r, &[1, 2, 4, 1, 64, 0, 65]);
    cfg.chunk_state_permille = field(r, &[64, 0, 1000, 64, 500, 1001]);
}

/// The H100 preset for the configuration's model (the 0.5B shape when it is not a valid
/// one), with one field set from the input: topology, ring costs, overlap, tile, kernel
/// overhead, some of them out of range.
fn cost_model(r: &mut Reader<'_>, cfg: &skrull_config) -> skrull_cost_model {
    let shape = cfg
        .to_core()
        .ok()
        .map(|c| c.model)
        .filter(|m| m.validate().is_ok())
        .unwrap_or(ModelShape::QWEN2_5_0_5B);
    let mut c = skrull_cost_model::from_core(&CostModel::h100(&shape));
    let pick = |r: &mut Reader<'_>, xs: &[f64]| xs[r.u8() as usize % xs.len()];
    match r.u8() % 8 {
        0 => c.gpus_per_node = field(r, &[8, 1, 2, 4, 16, 0]),
        1 => c.inter_node_bandwidth = pick(r, &[45e9, 1e6, 1e12, 0.0, f64::NAN]),
        2 => c.ring_step_latency_s = pick(r, &[6e-6, 0.0, 1.0, -1.0, f64::INFINITY]),
        3 => c.inter_node_ring_step_latency_s = pick(r, &[1e-3, 0.0, 1e-9, -1e-6]),
        4 => c.overlap = field(r, &[0, 1, 7]),
        5 => c.attention_tile = field(r, &[128, 1, 64, 4096, 0]),
        6 => c.kernel_launch_s = pick(r, &[5e-6, 0.0, 1e3, f64::NAN]),
        _ => c.attention_fwd_flops[r.u8() as usize % 6] = pick(r, &[1e12, 1e16, 0.0, -1.0]),
    }
    c
}

impl Input {
    /// The core configuration a correct library plans this input with, or the status it
    /// must refuse the configuration with first (option integers, then the cost model's
    /// enum; range errors are the core's `validate`, inside `schedule`).
    pub fn core_config(&self) -> Result<Config, skrull_status> {
        self.core_config_sized(u32::MAX)
    }

    /// [`Input::core_config`] as a library reads it from a `struct_size` of `size` bytes:
    /// the fields that end past it keep their defaults (pad multiple 1, no local padding, no
    /// lockstep, no cost model, no sub-groups, no filling, no fixed count, chunking off with
    /// K 1 and 64 permille). Offsets written out: 60 (version 1), 64, 68, 72, 80, 84, 88, 92,
    /// 96, 100, 104.
    pub fn core_config_sized(&self, size: u32) -> Result<Config, skrull_status> {
        let mut c = self.cfg;
        if size < 96 {
            c.chunk_size = 0;
        }
        if size < 100 {
            c.chunk_keep = 1;
        }
        if size < 104 {
            c.chunk_state_permille = 64;
        }
        if size < 84 {
            c.subgroups = 0;
        }
        if size < 88 {
            c.fill_empty = 0;
        }
        if size < 92 {
            c.micro_batches = 0;
        }
        if size < 64 {
            c.pad_multiple = 1;
        }
        if size < 68 {
            c.pad_local = 0;
        }
        if size < 72 {
            c.lockstep = 0;
        }
        let mut cfg = c.to_core()?;
        if let (Some(m), true) = (&self.cost, size >= 80) {
            cfg.cost = Some(m.to_core()?);
        }
        Ok(cfg)
    }
}
