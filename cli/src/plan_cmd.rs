//! `skrull plan`: read lengths (or draw the built-in default batch) and print the plan.

use skrull_kit::OwnedBuffers;
use skrull_kit::batch::default_lengths;

use crate::args::{Flags, read_lengths};
use crate::config_flags::config_from;
use crate::json::{plan_json, plan_table};
use crate::layout_out::{compute, layout_json, layout_table, parse_gpu};

/// Usage text of `skrull plan`.
pub const USAGE: &str = "\
skrull plan [--lengths FILE|-] [--dp 4] [--cp 8] [--bucket 26K] [--model qwen2.5-0.5b]
            [--policy balanced|skrull|deepspeed|packed|roundrobin|chunkflow]
            [--victim shortest|longest]
            [--flops paper|megatron] [--shard-padding none|zigzag]
            [--pad-multiple M] [--pad-local] [--lockstep] [--fill-empty]
            [--micro-batches G] [--subgroups on|off]
            [--chunk-size C] [--chunk-keep K] [--chunk-state-permille P]
            [--sync cp-group|every-gpu|sharded]
            [--gpu h100|h200] [--cost-model FILE] [--gpus-per-node 8]
            [--max-micro-batches M] [--format table|json] [--layout DP,MB,CP]

Plans one global batch. Without --lengths it plans the built-in default: 256 LMsys-like
sequences (seed 20250526), DP 4, CP 8, BucketSize 26K, Qwen2.5-0.5B.

--layout DP,MB,CP prints instead the execution layout of one GPU (DP rank, micro-batch, CP
rank): its token spans (local sequences whole, then its zigzag chunks of each sharded
sequence), the FlashAttention varlen cu_seqlens and max_seqlen of both groups, position-id
ranges and loss weights, and with chunking the chunk passes it runs (see docs/layout.md).

--pad-multiple M pads every sharded sequence to a multiple of lcm(2*CP, M) (Megatron with
sequence parallelism: M = 2*CP*TP), --pad-local pads local sequences to a multiple of M too,
and --lockstep gives every DP rank the same micro-batch count (the extra ones empty).
--fill-empty (with --lockstep) splits a rank's multi-sequence micro-batches instead of
leaving a micro-batch empty (sharded sequences move first), and --micro-batches G gives every
DP rank exactly G micro-batches, filled the same way (Hugging Face's
gradient_accumulation_steps); a batch that needs more than G is refused with the smallest G
that fits. A micro-batch stays empty only when its rank has fewer sequences than slots.

--subgroups on (the default) lets the balanced policy shard a sequence over an aligned
sub-group of the CP ranks (g ranks, g a power of two dividing CP, starting at a multiple of g)
instead of the whole group; off keeps every shard on the whole group. In the JSON form every
placement carries cp (-1: sharded, else the CP rank holding it whole) and the ranks that hold
it, cp_first and cp_size (local: r and 1; whole group: 0 and CP; sub-group: its first rank and
size); the table lists a micro-batch's sub-group shards after its sharded count, e.g.
`3 (shard 8-15 x2)`, and the layout prints the GPU's rings.

--chunk-size C (0, the default: off) lets a sequence longer than C tokens run as chunks of C
tokens, one after another on one GPU or an aligned group (ChunkFlow), the last K
(--chunk-keep, default 1) keeping their activations, the others recomputed; each GPU of the
group is charged the chunks alive at once plus P/1000 tokens of K/V state per token
(--chunk-state-permille, default 64), split over the group. --policy chunkflow chunks every
sequence longer than C over the whole CP group and packs the rest into C-token bins (and runs a
sequence too long to fit sharded chunked, when its chunked peak fits); without --chunk-size it
takes the largest power of two within BucketSize whose chunked peak on the CP group, for the
longest sequence the layout accepts sharded (N x C), fits BucketSize. A chunked placement has
cp -2 in the JSON form, with its group in cp_first and cp_size, kind chunked and its chunk
count; the table adds a chunked column (e.g. `1 (13 chunks on ranks 0-7)`). Without chunking the output
is unchanged.

--sync names how the trainer that runs the plan makes GPUs wait for each other: cp-group (the
default: every micro-batch waits for its slowest CP rank), every-gpu (every micro-batch waits
for every GPU of the job, as under ZeRO-2/3; every DP rank then runs the same micro-batch
count) or sharded (CP ranks meet only in micro-batches holding a sequence that spans several
of them, everyone at the step: DDP under no_sync, what SkrullTrainer runs). balanced arranges
its plan for it (docs/cost_model.md, section Synchronisation), and skrull evaluate composes its time
that way; the JSON config carries it when it is not cp-group.

--gpu, --cost-model FILE (the format `skrull calibrate` prints) and --gpus-per-node choose the
cost model the default policy (balanced) plans with: a calibrated model changes the plan.";

/// Runs `skrull plan`; returns the text to print.
///
/// # Errors
/// A message that names the offending value.
pub fn run(flags: &Flags) -> Result<String, String> {
    let cfg = config_from(flags, crate::config_flags::DEFAULT_POLICY)?;
    let lengths = match flags.get("--lengths") {
        Some(path) => read_lengths(path)?,
        None => default_lengths(cfg.cp, cfg.bucket),
    };
    let format = flags.get("--format").unwrap_or("table").to_string();
    let gpu = flags.get("--layout").map(parse_gpu).transpose()?;
    flags.finish()?;
    if !matches!(format.as_str(), "json" | "table") {
        return Err(format!("--format: '{format}' is not table|json"));
    }
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
    let plan = bufs.schedule(&cfg, &lengths).map_err(|e| e.to_string())?;
    if let Some(gpu) = gpu {
        let g = compute(&cfg, &lengths, &plan, gpu).map_err(|e| format!("--layout: {e}"))?;
        return Ok(match format.as_str() {
            "json" => layout_json(&cfg, &g),
            _ => layout_table(&cfg, &g),
        });
    }
    match format.as_str() {
        "json" => Ok(plan_json(&cfg, &lengths, &plan)),
        "table" => Ok(plan_table(&cfg, &lengths, &plan)),
        other => Err(format!("--format: '{other}' is not table|json")),
    }
}
