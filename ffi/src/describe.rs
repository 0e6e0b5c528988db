//! Words for a status: `skrull_status_str()` (the library's short text), `skrull_status_name()`
//! (`"SEQUENCE_TOO_LONG"`) and `skrull_error_describe()`, the one sentence a binding shows its
//! caller for a failed call, written from the status, its `skrull_error_info` details and the
//! configuration. The Python binding and the torch op both ask for it, so each sentence is
//! written once, here; it names settings by their `skrull_config` field names
//! (`bucket_tokens`, `chunk_size`), which are the bindings' argument names too.

use core::ffi::{CStr, c_char};
use core::fmt::{self, Write};

use skrull_core::config::Policy;
use skrull_core::error::CostField;
use skrull_core::{Config, FlopsFormula};

use crate::boundary::guard;
use crate::config::{CONFIG_SIZES, SKRULL_POLICY_CHUNKFLOW, skrull_config};
use crate::error::skrull_error_info;
use crate::sized::read_lenient;
use crate::status::skrull_status;

/// Returns a static, NUL-terminated English message for a status number.
///
/// Unknown numbers (for example from a newer library) give `"unknown status"`. The string is
/// never NULL, lives as long as the program, and must not be freed.
///
/// # Safety
/// None: any value is accepted. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_status_str(status: u32) -> *const c_char {
    guard(|| {
        skrull_status::from_u32(status)
            .map_or(c"unknown status", skrull_status::message)
            .as_ptr()
    })
}

/// Returns the status's name as the header spells it without `SKRULL_STATUS_`
/// (`"SEQUENCE_TOO_LONG"` for `SKRULL_STATUS_SEQUENCE_TOO_LONG`), static and NUL-terminated;
/// NULL for a number this library has no status for.
///
/// # Safety
/// None: any value is accepted. Safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_status_name(status: u32) -> *const c_char {
    guard(|| skrull_status::from_u32(status).map_or(core::ptr::null(), |s| s.name().as_ptr()))
}

/// `skrull_error_details()` bit: the status's details carry `value`.
pub const SKRULL_DETAIL_VALUE: u32 = 1;
/// `skrull_error_details()` bit: the status's details carry `limit`.
pub const SKRULL_DETAIL_LIMIT: u32 = 2;

/// Which of `skrull_error_info`'s `value` and `limit` a failed call that returned `status`
/// fills (`SKRULL_DETAIL_VALUE | SKRULL_DETAIL_LIMIT`, 0 for neither or an unknown number),
/// as `docs/c_api.md` ("Error details") lists them; `index` is -1 and `field` 0 where they
/// name nothing.
///
/// # Safety
/// None: any value is accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_error_details(status: u32) -> u32 {
    guard(|| {
        let (value, limit) = value_limit(status);
        u32::from(value) * SKRULL_DETAIL_VALUE + u32::from(limit) * SKRULL_DETAIL_LIMIT
    })
}

/// The name of `skrull_error_info.field` for a status (`"ffn"` for `SKRULL_STATUS_INVALID_MODEL`
/// with field 3, `"gemm_efficiency"` for `SKRULL_STATUS_INVALID_COST_MODEL` with field 3), or
/// with `field` 0 the setting a status is about when its details name none (`"dp"` for
/// `SKRULL_STATUS_INVALID_DP`, `"bucket_tokens"`, `"pad_multiple"`, `"flops"` for
/// `SKRULL_STATUS_UNSUPPORTED_OPTION`). Static and NUL-terminated; NULL when there is none.
///
/// # Safety
/// None: any values are accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_error_field_name(status: u32, field: u32) -> *const c_char {
    guard(|| {
        let name = if field == 0 {
            default_field(status)
        } else {
            field_name(status, field)
        };
        name.map_or(core::ptr::null(), |n| {
            FIELD_NAMES
                .iter()
                .find(|c| c.to_bytes() == n.as_bytes())
                .map_or(core::ptr::null(), |c| c.as_ptr())
        })
    })
}

/// Every field name [`skrull_error_field_name`] returns, NUL-terminated.
const FIELD_NAMES: &[&CStr] = &[
    c"dp",
    c"cp",
    c"bucket_tokens",
    c"pad_multiple",
    c"flops",
    c"hidden",
    c"kv_hidden",
    c"ffn",
    c"layers",
    c"vocab",
    c"dp_rank",
    c"micro_batch",
    c"cp_rank",
    c"window_steps",
    c"max_rows_per_step",
    c"flags",
    c"forgetting",
    c"ridge",
    c"outlier",
    c"chunk_size",
    c"chunk_keep",
    c"chunk_state_permille",
    c"attention_tile",
    c"peak_flops",
    c"gemm_efficiency",
    c"hbm_bandwidth",
    c"weight_bytes",
    c"weight_passes",
    c"attention_seqlen",
    c"attention_fwd_flops",
    c"attention_bwd_flops",
    c"attention_bwd_ratio",
    c"kv_element_bytes",
    c"comm_passes",
    c"ring_step_latency_s",
    c"inter_node_ring_step_latency_s",
    c"intra_node_bandwidth",
    c"inter_node_bandwidth",
    c"gpus_per_node",
    c"overlap",
    c"kernels_per_layer",
    c"kernel_launch_s",
    c"micro_batch_extra_s",
    c"iteration_fixed_s",
    c"sharded_sequence_s",
    c"local_sequence_s",
    c"trust",
    c"max_error",
    c"holdout",
    c"max_delay",
    c"batch_capacity",
];

/// Writes the sentence a binding shows for a call that returned `status`: what was given,
/// what is accepted and what to do (for example `sequence 3 has 70000 tokens, too many for
/// bucket_tokens=4096: ...`), without the status name. The details are read from `info` when
/// it is not NULL and `info->status == status` (what a failed call wrote), and the
/// configuration's `bucket_tokens`, `flops`, `policy` and `cp` from `config` when it is not
/// NULL; a detail that is unknown prints as `None`. For `SKRULL_STATUS_LENGTH_OUT_OF_RANGE`, a
/// binding that checks lengths as signed integers may store the caller's negative length in
/// `info->value` (as the `int64_t` bit pattern) to have it named.
///
/// Like `snprintf`: writes at most `capacity - 1` bytes and a NUL into `buffer` (nothing when
/// `buffer` is NULL or `capacity` is 0) and returns the sentence's full length in bytes
/// without the NUL, so a return value at or above `capacity` means it was cut. Statuses with
/// no sentence of their own (`SKRULL_STATUS_OK`, an unknown number) give
/// `skrull_status_str()`'s text. The sentence is ASCII.
///
/// # Safety
/// `info`, unless NULL, points to a readable `skrull_error_info`; `config`, unless NULL, to a
/// `skrull_config` whose `struct_size` bytes are readable (one this library would refuse is
/// read as far as it can be, or ignored); `buffer`, unless NULL, to `capacity` writable bytes
/// that overlap neither.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn skrull_error_describe(
    status: u32,
    info: *const skrull_error_info,
    config: *const skrull_config,
    buffer: *mut c_char,
    capacity: usize,
) -> usize {
    guard(|| {
        let details = if info.is_null() || !info.is_aligned() {
            None
        } else {
            // SAFETY: non-null, aligned (checked), readable (function contract).
            Some(unsafe { info.read() })
        };
        let config = skrull_config::preset(crate::config::SKRULL_PRESET_QWEN2_5_0_5B)
            // SAFETY: forwarded caller contract (lenient: never reads past struct_size).
            .and_then(|default| unsafe { read_lenient(config, &CONFIG_SIZES, default) });
        let out: &mut [u8] = if buffer.is_null() || capacity == 0 {
            &mut []
        } else {
            // SAFETY: `capacity` writable bytes at `buffer` (function contract).
            unsafe { core::slice::from_raw_parts_mut(buffer.cast::<u8>(), capacity) }
        };
        let mut text = Text { out, len: 0 };
        let d = Details::read(status, details.as_ref());
        let ctx = Context::of(config.as_ref());
        // Writing to `Text` never fails.
        let _ = sentence(&mut text, status, &d, &ctx);
        text.finish()
    })
}

/// A `snprintf`-like sink: keeps what fits (leaving room for the NUL), counts everything.
struct Text<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.out.len().saturating_sub(1).saturating_sub(self.len);
        let keep = s.len().min(room);
        if keep > 0 {
            self.out[self.len..self.len + keep].copy_from_slice(&s.as_bytes()[..keep]);
        }
        self.len += s.len();
        Ok(())
    }
}

impl Text<'_> {
    /// Writes the NUL and returns the full length.
    fn finish(self) -> usize {
        if let Some(last) = self.out.len().checked_sub(1) {
            self.out[self.len.min(last)] = 0;
        }
        self.len
    }
}

/// One detail: a number, or unknown (`None`).
#[derive(Clone, Copy)]
enum Num {
    Unknown,
    Unsigned(u64),
    Signed(i64),
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Unknown => f.write_str("None"),
            Num::Unsigned(v) => write!(f, "{v}"),
            Num::Signed(v) => write!(f, "{v}"),
        }
    }
}

impl Num {
    fn value(self) -> Option<u64> {
        match self {
            Num::Unsigned(v) => Some(v),
            _ => None,
        }
    }
}

/// The details a status's sentence reads.
struct Details {
    index: Num,
    value: Num,
    limit: Num,
    field: Option<&'static str>,
}

impl Details {
    /// The details of `info` for `status` (none when `info` is about another status).
    fn read(status: u32, info: Option<&skrull_error_info>) -> Details {
        let mut d = Details {
            index: Num::Unknown,
            value: Num::Unknown,
            limit: Num::Unknown,
            field: default_field(status),
        };
        let Some(info) = info.filter(|i| i.status == status) else {
            return d;
        };
        if info.index != -1 {
            d.index = Num::Signed(info.index);
        }
        let (value, limit) = value_limit(status);
        if value {
            d.value = if status == skrull_status::LengthOutOfRange as u32 && info.value >> 63 == 1 {
                Num::Signed(info.value as i64)
            } else {
                Num::Unsigned(info.value)
            };
        }
        if limit {
            d.limit = Num::Unsigned(info.limit);
        }
        if info.field != 0 {
            d.field = field_name(status, info.field).or(d.field);
        }
        d
    }
}

/// Whether a status's details carry a `value` and a `limit` (`docs/c_api.md`, "Error details").
fn value_limit(status: u32) -> (bool, bool) {
    use skrull_status as S;
    match skrull_status::from_u32(status) {
        Some(S::InvalidModel | S::EmptySequence) => (true, false),
        Some(
            S::InvalidDp
            | S::InvalidCp
            | S::InvalidBucket
            | S::InvalidPadMultiple
            | S::TooManySequences
            | S::LengthOutOfRange
            | S::SequenceTooLong
            | S::MicroBatchLimit
            | S::MicroBatchCount
            | S::NoSuchGpu
            | S::LayoutOverflow
            | S::MeasurementMismatch
            | S::RefitStepTooLarge
            | S::InvalidChunking
            | S::ChunkOverBudget
            | S::NoChunkSize
            | S::InvalidWindowParams
            | S::WindowBatchTooLarge,
        ) => (true, true),
        _ => (false, false),
    }
}

/// The setting a status is about when its details name no field.
fn default_field(status: u32) -> Option<&'static str> {
    use skrull_status as S;
    match skrull_status::from_u32(status)? {
        S::InvalidDp => Some("dp"),
        S::InvalidCp => Some("cp"),
        S::InvalidBucket => Some("bucket_tokens"),
        S::InvalidPadMultiple => Some("pad_multiple"),
        S::UnsupportedOption => Some("flops"),
        _ => None,
    }
}

/// The name of `skrull_error_info.field` for a status (`docs/c_api.md`).
pub(crate) fn field_name(status: u32, number: u32) -> Option<&'static str> {
    use skrull_status as S;
    let pick = |names: &[&'static str]| names.get((number as usize).checked_sub(1)?).copied();
    match skrull_status::from_u32(status)? {
        S::InvalidModel => pick(&["hidden", "kv_hidden", "ffn", "layers", "vocab"]),
        S::UnsupportedOption => pick(&["flops"]),
        S::NoSuchGpu => pick(&["dp_rank", "micro_batch", "cp_rank"]),
        S::InvalidRefitParams => pick(&crate::refit::REFIT_PARAM_NAMES),
        S::InvalidChunking => pick(&["chunk_size", "chunk_keep", "chunk_state_permille"]),
        S::InvalidWindowParams => pick(&["max_delay", "batch_capacity"]),
        S::InvalidCostModel => CostField::ALL
            .get((number as usize).checked_sub(1)?)
            .map(|f| c_field_name(*f)),
        _ => None,
    }
}

/// A cost-model field's `skrull_cost_model` name (the core's names with `.` for the
/// attention table's arrays become `_`).
fn c_field_name(f: CostField) -> &'static str {
    match f.name() {
        "attention.seqlen" => "attention_seqlen",
        "attention.fwd_flops" => "attention_fwd_flops",
        "attention.bwd_flops" => "attention_bwd_flops",
        name => name,
    }
}

/// What a sentence reads of the configuration.
struct Context {
    bucket: Option<u32>,
    flops: Option<&'static str>,
    /// The GPUs `chunkflow` (or another policy) chunks a sequence on by default.
    chunk_group: Option<u32>,
}

impl Context {
    fn of(c: Option<&skrull_config>) -> Context {
        let Some(c) = c else {
            return Context {
                bucket: None,
                flops: None,
                chunk_group: None,
            };
        };
        let chunkflow = c.policy == SKRULL_POLICY_CHUNKFLOW;
        let mut core = Config::new(
            1,
            c.cp,
            c.bucket_tokens,
            skrull_core::ModelShape::QWEN2_5_0_5B,
        );
        core.policy = if chunkflow {
            Policy::ChunkFlow
        } else {
            Policy::Skrull
        };
        Context {
            bucket: Some(c.bucket_tokens),
            flops: FlopsFormula::ALL.get(c.flops as usize).map(|f| f.name()),
            chunk_group: Some(core.chunk_group()),
        }
    }

    /// `bucket_tokens=4096`, or `bucket_tokens` when unknown.
    fn bucket(&self) -> Bucket {
        Bucket(self.bucket)
    }
}

/// Displays `bucket_tokens=C` (or `bucket_tokens`).
struct Bucket(Option<u32>);

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(b) => write!(f, "bucket_tokens={b}"),
            None => f.write_str("bucket_tokens"),
        }
    }
}

/// Writes the sentence of `status` (see [`skrull_error_describe`]).
fn sentence(w: &mut Text<'_>, status: u32, d: &Details, ctx: &Context) -> fmt::Result {
    use skrull_status as S;
    let (i, v, lim) = (d.index, d.value, d.limit);
    let bucket = ctx.bucket();
    let Some(s) = skrull_status::from_u32(status) else {
        return w.write_str("unknown status");
    };
    match s {
        S::SequenceTooLong => write!(
            w,
            "sequence {i} has {v} tokens, too many for {bucket}: its share of each GPU (padding \
             included) needs a BucketSize of {lim}; raise bucket_tokens to at least {lim}, plan \
             with a larger cp, truncate the sequence, or run it chunked (policy='chunkflow' \
             with a chunk_size)"
        ),
        S::LengthOutOfRange => match v {
            Num::Signed(neg) if neg < 0 => write!(
                w,
                "sequence {i} has a negative length ({neg}): a length is a token count from 1 \
                 to {lim}"
            ),
            _ => write!(
                w,
                "sequence {i} has {v} tokens, more than the {lim} tokens (2^31 - 1) one \
                 sequence may have"
            ),
        },
        S::EmptySequence => write!(
            w,
            "sequence {i} has 0 tokens: every sequence needs at least 1 token; drop empty \
             samples before planning"
        ),
        S::TooManySequences => write!(
            w,
            "the batch has {v} sequences, more than the {lim} one plan may hold: split it into \
             smaller global batches"
        ),
        S::MicroBatchLimit => match i {
            Num::Unknown => write!(
                w,
                "micro_batches={v} is more than max_micro_batches={lim}: raise \
                 max_micro_batches (0 = no limit) or lower micro_batches"
            ),
            _ => write!(
                w,
                "DP rank {i} needs {v} micro-batches, more than max_micro_batches={lim}: raise \
                 max_micro_batches (0 = no limit) or bucket_tokens, or plan fewer tokens per \
                 global batch"
            ),
        },
        S::MicroBatchCount => write!(
            w,
            "DP rank {i} needs {v} micro-batches, more than the fixed count micro_batches={lim}: \
             micro_batches={v} or more fits this batch (or raise bucket_tokens, or plan fewer \
             tokens per global batch)"
        ),
        S::InvalidChunking => match d.field {
            Some("chunk_size") => w.write_str(
                "policy='chunkflow' needs chunking on: give chunk_size (the most tokens of one \
                 chunk), or leave it unset for the default ChunkSize",
            ),
            Some("chunk_keep") => write!(
                w,
                "chunk_keep={v} is out of range: chunk_keep (chunks whose activations are kept) \
                 must be an integer from 1 to {lim}"
            ),
            _ => write!(
                w,
                "chunk_state_permille={v} is out of range: it must be an integer from 0 to \
                 {lim} (thousandths of a token per token of K/V state)"
            ),
        },
        S::ChunkOverBudget => write!(
            w,
            "sequence {i} has {v} tokens: run chunked it holds {lim} tokens on a GPU, more than \
             {bucket}; lower chunk_size or chunk_keep, or raise bucket_tokens"
        ),
        S::NoChunkSize => {
            let group = ctx
                .chunk_group
                .map_or(Num::Unknown, |g| Num::Unsigned(g.into()));
            write!(
                w,
                "no chunk size fits: a {v}-token sequence chunked on {group} GPU(s) holds at \
                 least {lim} tokens per GPU (its K/V state with one-token chunks), more than \
                 {bucket}; give chunk_size, lower chunk_state_permille or chunk_keep, or raise \
                 bucket_tokens"
            )
        }
        S::NoSuchGpu => {
            let last = match lim.value() {
                Some(l) => Num::Signed(l as i64 - 1),
                None => Num::Signed(-1),
            };
            write!(
                w,
                "DP rank {i} runs {lim} micro-batches (0 to {last}); micro-batch {v} was asked \
                 for"
            )
        }
        S::PlanInvalid => w.write_str(
            "the plan does not match its configuration and lengths (its arrays were changed, or \
             it was made by another scheduler)",
        ),
        S::LayoutOverflow => write!(
            w,
            "this GPU's layout needs offsets up to {v}, more than an int32 holds ({lim}): lower \
             bucket_tokens or plan fewer tokens per micro-batch"
        ),
        S::MeasurementMismatch => write!(
            w,
            "times holds {v} values where the plan needs {lim} ([micro_batch][dp][cp]): pass one \
             time per micro-batch and GPU of the plan the times were measured on"
        ),
        S::RefitStepTooLarge => write!(
            w,
            "this step has {v} (micro-batch, GPU) times, more than the {lim} the refit window \
             was sized for"
        ),
        S::InvalidRefitParams => write!(
            w,
            "refit setting {} is out of range: window from 1 to {} steps, forgetting in (0, 1], \
             ridge >= 0, outlier > 0, trust >= 1, max_error > 0, holdout 0 or 2 to 1024",
            d.field.unwrap_or("a field"),
            crate::refit::SKRULL_REFIT_MAX_WINDOW
        ),
        S::InvalidWindowParams => write!(
            w,
            "{}={v} is out of range: max_delay from 0 to {}, batch_capacity from 1 to 65536 (at \
             most {lim})",
            d.field.unwrap_or("a window setting"),
            crate::window::SKRULL_WINDOW_MAX_DELAY
        ),
        S::WindowBatchTooLarge => write!(
            w,
            "the batch has {v} sequences, more than the window's batch_capacity={lim}: make the \
             window with a larger batch_capacity"
        ),
        S::WindowFull => w.write_str(
            "the window already holds max_delay + 1 batches: take a step before pushing another",
        ),
        S::WindowEmpty => w.write_str("the window holds no batch: push one before taking a step"),
        S::InvalidDeferred => write!(
            w,
            "deferred sample {i} does not fit the window: requeue only into a fresh window (no \
             batch pushed), samples from earlier steps whose deadline has not passed, in \
             position order, before first_position"
        ),
        S::WindowStateInvalid => w.write_str(
            "the window state was not made by this binding (or is too small): a bug in skrull \
             or its binding; please report it",
        ),
        S::RefitStateInvalid => w.write_str(
            "the refit state was not made by this binding's refit (or is too small): a bug in \
             skrull or its binding; please report it",
        ),
        S::DacpFailed => write!(w, "the placement of CP rank {i} could not be completed"),
        S::InvalidCostModel => write!(
            w,
            "cost model: {} is out of range (docs/cost_model.md lists each field's valid \
             values); fix it, or start again from the h100 preset",
            d.field.unwrap_or("a field")
        ),
        S::UnsupportedOption => {
            match ctx.flops {
                Some(name) => write!(w, "flops='{name}'")?,
                None => w.write_str("flops")?,
            }
            w.write_str(
                " does not apply to policy='balanced', which plans on time from its cost model: \
                 leave flops='paper' (the default) or choose another policy",
            )
        }
        S::InvalidModel => {
            match d.field {
                Some(name) => write!(w, "model.{name}={v}")?,
                None => w.write_str("the model shape")?,
            }
            w.write_str(
                " is out of range: hidden, kv_hidden, ffn and layers must be at least 1 and \
                 within the library's limits, and kv_hidden at most hidden",
            )
        }
        S::InvalidDp | S::InvalidCp | S::InvalidBucket | S::InvalidPadMultiple => {
            let arg = d.field.unwrap_or("a setting");
            let (what, lo) = match s {
                S::InvalidDp => ("the data-parallel size", 1),
                S::InvalidCp => ("the context-parallel size", 1),
                S::InvalidBucket => (
                    "BucketSize: the most tokens one GPU holds in one micro-batch",
                    1,
                ),
                _ => ("0 or 1 for none", 0),
            };
            write!(
                w,
                "{arg}={v} is out of range: {arg} ({what}) must be an integer from {lo} to {lim}"
            )
        }
        S::InvalidEnum => w.write_str(
            "an option has an unknown value (policy, victim, flops, shard_padding, a preset, \
             model.swiglu, a True/False flag or cost_model.overlap)",
        ),
        S::NullArg
        | S::BadStructSize
        | S::WorkspaceTooSmall
        | S::OutputTooSmall
        | S::InvalidArg
        | S::Internal
        | S::Panic => write!(
            w,
            "internal error in skrull or its binding ({}); please report it with the lengths \
             and settings that caused it",
            message(s)
        ),
        S::Ok => w.write_str(message(s)),
    }
}

/// A status's short text as `&str`.
fn message(s: skrull_status) -> &'static str {
    s.message().to_str().unwrap_or("")
}

/// The sentence for `status` as [`skrull_error_describe`] writes it, into `out` (tests and
/// Rust callers).
pub fn describe_into<'a>(
    status: u32,
    info: Option<&skrull_error_info>,
    config: Option<&skrull_config>,
    out: &'a mut [u8],
) -> &'a str {
    let len = {
        let mut text = Text {
            out: &mut *out,
            len: 0,
        };
        let d = Details::read(status, info);
        let _ = sentence(&mut text, status, &d, &Context::of(config));
        text.finish()
    };
    let n = len.min(out.len().saturating_sub(1));
    core::str::from_utf8(&out[..n]).unwrap_or("")
}

/// The C string of a status's name (for the tests of the header's spelling).
pub fn status_name(status: u32) -> Option<&'static CStr> {
    skrull_status::from_u32(status).map(skrull_status::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(status: skrull_status, index: i64, value: u64, limit: u64) -> skrull_error_info {
        skrull_error_info {
            status: status as u32,
            field: 0,
            index,
            value,
            limit,
        }
    }

    #[test]
    fn status_str_and_name_of_known_and_unknown_numbers() {
        // SAFETY: the functions return pointers to static NUL-terminated strings.
        let text = |p: *const c_char| unsafe { CStr::from_ptr(p) };
        // SAFETY: any value is accepted.
        assert_eq!(text(unsafe { skrull_status_str(77) }), c"unknown status");
        // SAFETY: as above.
        assert_eq!(text(unsafe { skrull_status_str(0) }), c"ok");
        // SAFETY: as above.
        let name = unsafe { skrull_status_name(17) };
        assert_eq!(text(name), c"SEQUENCE_TOO_LONG");
        // SAFETY: as above.
        assert!(unsafe { skrull_status_name(77) }.is_null());
    }

    #[test]
    fn a_sentence_names_the_details_and_the_configuration() {
        let mut c = skrull_config::preset(0).unwrap();
        c.bucket_tokens = 4096;
        let i = info(skrull_status::SequenceTooLong, 3, 70_000, 8750);
        let mut buf = [0u8; 512];
        let s = describe_into(17, Some(&i), Some(&c), &mut buf);
        assert!(
            s.starts_with("sequence 3 has 70000 tokens, too many for bucket_tokens=4096: "),
            "{s}"
        );
        assert!(s.contains("at least 8750"), "{s}");
        // Details about another status, and no configuration: unknown values print as None.
        let s = describe_into(10, Some(&i), None, &mut buf);
        assert_eq!(
            s,
            "dp=None is out of range: dp (the data-parallel size) must be an integer from 1 to \
             None"
        );
        // A negative length a binding stored as its bit pattern.
        let neg = info(
            skrull_status::LengthOutOfRange,
            0,
            (-5i64) as u64,
            2_147_483_647,
        );
        let s = describe_into(16, Some(&neg), None, &mut buf);
        assert!(s.contains("negative length (-5)"), "{s}");
    }

    /// The C call behaves like snprintf: the full length is returned, the text is cut to the
    /// capacity with a NUL, and a NULL buffer only measures.
    #[test]
    fn describe_cuts_like_snprintf() {
        let i = info(skrull_status::NoChunkSize, -1, 1 << 20, 67_110);
        let mut full = [0u8; 512];
        let whole = describe_into(26, Some(&i), None, &mut full).len();
        assert!(whole > 20);
        // SAFETY: NULL buffer with capacity 0; `i` is a live struct.
        let n =
            unsafe { skrull_error_describe(26, &i, core::ptr::null(), core::ptr::null_mut(), 0) };
        assert_eq!(n, whole);
        let mut small = [0x55u8; 11];
        // SAFETY: `small` is 11 writable bytes.
        let n = unsafe {
            skrull_error_describe(26, &i, core::ptr::null(), small.as_mut_ptr().cast(), 11)
        };
        assert_eq!(n, whole);
        assert_eq!(&small[..10], &full[..10]);
        assert_eq!(small[10], 0);
        // An unknown status gives the library's text.
        assert_eq!(describe_into(77, None, None, &mut full), "unknown status");
    }

    /// Every name the field lookup can produce has a C string, so none comes back NULL.
    #[test]
    fn every_field_name_has_a_c_string() {
        for s in skrull_status::all() {
            for field in 0..=CostField::ALL.len() as u32 + 1 {
                let name = if field == 0 {
                    default_field(*s as u32)
                } else {
                    field_name(*s as u32, field)
                };
                // SAFETY: any values are accepted.
                let c = unsafe { skrull_error_field_name(*s as u32, field) };
                match name {
                    Some(n) => {
                        assert!(!c.is_null(), "{n} has no C string");
                        // SAFETY: non-null pointers are static NUL-terminated strings.
                        assert_eq!(unsafe { CStr::from_ptr(c) }.to_str(), Ok(n));
                    }
                    None => assert!(c.is_null()),
                }
            }
        }
        // SAFETY: as above.
        let details = unsafe { skrull_error_details(skrull_status::InvalidModel as u32) };
        assert_eq!(details, SKRULL_DETAIL_VALUE);
    }

    #[test]
    fn every_status_has_a_sentence() {
        let mut buf = [0u8; 512];
        for s in skrull_status::all() {
            let text = describe_into(*s as u32, None, None, &mut buf);
            assert!(!text.is_empty() && text.is_ascii(), "{s:?}");
        }
    }
}
