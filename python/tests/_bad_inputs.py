"""Bad inputs and the errors they raise: the cases of ``test_bad_input.py`` and the table in
docs/python.md ("Every bad input, and its error"), which this file also writes.

Run ``python python/tests/_bad_inputs.py --write docs/python.md`` after changing a message;
``test_bad_input.py`` fails while the table and the messages differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

import skrull

BEGIN, END = "<!-- bad-inputs:begin -->", "<!-- bad-inputs:end -->"

# (input as written in the table, class, status, text the message must contain)
CASES: list[tuple[str, type, str, tuple[str, ...]]] = [
    # ---- lengths: S() is Scheduler(dp=2, cp=4, bucket_tokens=64, policy="skrull")
    ("S().plan(None)", skrull.ArgumentError, "INVALID_ARG", ("lengths must be", "got None")),
    ("S().plan({'a': 1})", skrull.ArgumentError, "INVALID_ARG", ("(dict)",)),
    ("S().plan('100')", skrull.ArgumentError, "INVALID_ARG", ("(str)",)),
    ("S().plan(b'ab')", skrull.ArgumentError, "INVALID_ARG", ("(bytes)",)),
    ("S().plan({1, 2})", skrull.ArgumentError, "INVALID_ARG", ("(set)",)),
    ("S().plan(5)", skrull.ArgumentError, "INVALID_ARG", ("for one sequence pass [5]",)),
    ("S().plan(5.0)", skrull.ArgumentError, "INVALID_ARG", ("(float)",)),
    ("S().plan([100, True])", skrull.ArgumentError, "INVALID_ARG",
     ("lengths[1] is True (bool)", "a bool is not a count")),
    ("S().plan(np.array([True, False]))", skrull.ArgumentError, "INVALID_ARG",
     ("lengths[0] is True (bool)",)),
    ("S().plan([100, 1.5])", skrull.ArgumentError, "INVALID_ARG", ("lengths[1] is 1.5 (float)",)),
    ("S().plan([100, 2.0])", skrull.ArgumentError, "INVALID_ARG", ("use 2",)),
    ("S().plan(np.array([1.0, 2.0]))", skrull.ArgumentError, "INVALID_ARG",
     ("lengths[0] is 1.0 (float)", "np.int64")),
    ("S().plan(['7'])", skrull.ArgumentError, "INVALID_ARG", ("lengths[0] is '7' (str)",)),
    ("S().plan([100, None])", skrull.ArgumentError, "INVALID_ARG",
     ("lengths[1] is None (NoneType)",)),
    ("S().plan([[1, 2], [3]])", skrull.ArgumentError, "INVALID_ARG",
     ("lengths[0] is [1, 2] (list)", "one-dimensional")),
    ("S().plan(np.ones((2, 2), int))", skrull.ArgumentError, "INVALID_ARG",
     ("one-dimensional", "shape (2, 2)")),
    ("S().plan([{'len': 3}])", skrull.ArgumentError, "INVALID_ARG", ("(dict)",)),
    ("S().plan([100, -5])", skrull.BatchError, "LENGTH_OUT_OF_RANGE",
     ("sequence 1 has a negative length (-5)",)),
    ("S().plan(np.array([100, -5]))", skrull.BatchError, "LENGTH_OUT_OF_RANGE",
     ("negative length (-5)",)),
    ("S().plan([100, 0])", skrull.BatchError, "EMPTY_SEQUENCE",
     ("sequence 1 has 0 tokens", "drop empty samples")),
    ("S().plan([2**31])", skrull.BatchError, "LENGTH_OUT_OF_RANGE",
     ("sequence 0 has 2147483648 tokens", "2147483647")),
    ("S().plan([5, 2**32 + 5])", skrull.BatchError, "LENGTH_OUT_OF_RANGE",
     ("sequence 1 has 4294967301 tokens",)),
    ("S().plan([5, 1000])", skrull.BatchError, "SEQUENCE_TOO_LONG",
     ("sequence 1 has 1000 tokens", "bucket_tokens=64", "BucketSize of 250")),
    ("S(policy='chunkflow', chunk_size=64, chunk_keep=4, chunk_state_permille=1000)"
     ".plan([10, 250])", skrull.BatchError, "CHUNK_OVER_BUDGET",
     ("sequence 1 has 250 tokens", "holds 126 tokens", "bucket_tokens=64")),
    ("S().plan(np.ones(65537, int))", skrull.BatchError, "TOO_MANY_SEQUENCES",
     ("65537 sequences", "65536")),
    ("S(max_micro_batches=1).plan([64] * 20)", skrull.BatchError, "MICRO_BATCH_LIMIT",
     ("DP rank 0 needs 3 micro-batches", "max_micro_batches=1")),
    ("S(micro_batches=2).plan([64] * 20)", skrull.BatchError, "MICRO_BATCH_COUNT",
     ("needs 3 micro-batches", "micro_batches=3 or more")),
    # ---- constructor arguments
    ("skrull.Scheduler()", skrull.ArgumentError, "INVALID_ARG",
     ("needs dp, cp, bucket_tokens", "model='qwen2.5-0.5b'")),
    ("skrull.Scheduler(dp=4)", skrull.ArgumentError, "INVALID_ARG", ("needs cp, bucket_tokens",)),
    ("skrull.Scheduler(cp=8, bucket_tokens=4096, model=skrull.ModelShape(64, 64, 256, 2))",
     skrull.ArgumentError, "INVALID_ARG", ("needs dp",)),
    ("S(dp=0)", skrull.ConfigError, "INVALID_DP", ("dp=0 is out of range", "from 1 to 65536")),
    ("S(dp=-1)", skrull.ConfigError, "INVALID_DP", ("dp=-1 is out of range",)),
    ("S(dp=65537)", skrull.ConfigError, "INVALID_DP", ("dp=65537",)),
    ("S(dp=2**32 + 2)", skrull.ConfigError, "INVALID_DP", ("dp=4294967298",)),
    ("S(dp=2.0)", skrull.ArgumentError, "INVALID_ARG", ("dp must be an integer", "pass dp=2")),
    ("S(dp='4')", skrull.ArgumentError, "INVALID_ARG", ("dp must be an integer", "(str)")),
    ("S(dp=True)", skrull.ArgumentError, "INVALID_ARG", ("a bool is not a count",)),
    ("S(cp=0)", skrull.ConfigError, "INVALID_CP", ("cp=0 is out of range", "from 1 to 256")),
    ("S(cp=257)", skrull.ConfigError, "INVALID_CP", ("cp=257",)),
    ("S(cp=1.5)", skrull.ArgumentError, "INVALID_ARG", ("cp must be an integer",)),
    ("S(bucket_tokens=0)", skrull.ConfigError, "INVALID_BUCKET",
     ("bucket_tokens=0 is out of range", "2147483647")),
    ("S(bucket_tokens=2**31)", skrull.ConfigError, "INVALID_BUCKET", ("bucket_tokens=2147483648",)),
    ("S(bucket_tokens=26.5)", skrull.ArgumentError, "INVALID_ARG", ("bucket_tokens must be",)),
    ("S(policy='fastest')", skrull.ConfigError, "INVALID_ENUM",
     ("policy='fastest' is not a known policy", "'balanced'")),
    ("S(policy=7)", skrull.ConfigError, "INVALID_ENUM", ("policy=7", "0 to 5")),
    ("S(policy=None)", skrull.ArgumentError, "INVALID_ARG", ("policy must be one of",)),
    ("S(victim='middle')", skrull.ConfigError, "INVALID_ENUM", ("victim='middle'", "'longest'")),
    ("S(flops=7)", skrull.ConfigError, "INVALID_ENUM", ("flops=7",)),
    ("S(shard_padding='ring')", skrull.ConfigError, "INVALID_ENUM",
     ("shard_padding='ring'", "'zigzag'")),
    ("S(policy='balanced', flops='megatron')", skrull.ConfigError, "UNSUPPORTED_OPTION",
     ("flops='megatron' does not apply to policy='balanced'",)),
    ("S(max_micro_batches=-1)", skrull.ConfigError, "INVALID_ARG",
     ("max_micro_batches=-1 is out of range", "0 for no limit")),
    ("S(max_micro_batches=1.5)", skrull.ArgumentError, "INVALID_ARG", ("max_micro_batches must",)),
    ("S(micro_batches=-1)", skrull.ConfigError, "INVALID_ARG", ("micro_batches=-1",)),
    ("S(micro_batches=3, max_micro_batches=2)", skrull.BatchError, "MICRO_BATCH_LIMIT",
     ("micro_batches=3 is more than max_micro_batches=2",)),
    ("S(policy='chunkflow', chunk_size=0)", skrull.ConfigError, "INVALID_CHUNKING",
     ("policy='chunkflow' needs chunking on", "chunk_size")),
    ("S(chunk_size=32, chunk_keep=0)", skrull.ConfigError, "INVALID_CHUNKING",
     ("chunk_keep=0 is out of range", "from 1 to 64")),
    ("S(chunk_state_permille=1001)", skrull.ConfigError, "INVALID_CHUNKING",
     ("chunk_state_permille=1001", "from 0 to 1000")),
    ("S(pad_multiple=-1)", skrull.ConfigError, "INVALID_PAD_MULTIPLE",
     ("pad_multiple=-1 is out of range", "from 0 to 65536")),
    ("S(pad_multiple=65537)", skrull.ConfigError, "INVALID_PAD_MULTIPLE", ("pad_multiple=65537",)),
    ("S(pad_multiple=2**32 + 16)", skrull.ConfigError, "INVALID_PAD_MULTIPLE",
     ("pad_multiple=4294967312",)),
    ("S(pad_multiple=2.0)", skrull.ArgumentError, "INVALID_ARG", ("pass pad_multiple=2",)),
    ("S(lockstep=2)", skrull.ConfigError, "INVALID_ENUM", ("lockstep=2", "True or False")),
    ("S(lockstep='yes')", skrull.ArgumentError, "INVALID_ARG", ("lockstep must be True or False",)),
    ("S(pad_local=None)", skrull.ArgumentError, "INVALID_ARG", ("pad_local must be",)),
    ("S(subgroups=-1)", skrull.ConfigError, "INVALID_ENUM", ("subgroups=-1",)),
    ("S(fill_empty=2)", skrull.ConfigError, "INVALID_ENUM", ("fill_empty=2",)),
    ("S(model='llama-70b')", skrull.ConfigError, "INVALID_ENUM",
     ("model='llama-70b' is not a preset", "'qwen2.5-7b'", "Hugging Face")),
    ("S(model={'hidden': 64, 'width': 3})", skrull.ArgumentError, "INVALID_ARG",
     ("unknown key 'width'",)),
    ("S(model={'hidden': 64})", skrull.ArgumentError, "INVALID_ARG", ("missing 'kv_hidden'",)),
    ("S(model={'hidden': 64, 'kv_hidden': 64, 'ffn': 0, 'layers': 1})", skrull.ConfigError,
     "INVALID_MODEL", ("model.ffn=0 is out of range",)),
    ("S(model={'hidden': 64, 'kv_hidden': 128, 'ffn': 1, 'layers': 1})", skrull.ConfigError,
     "INVALID_MODEL", ("model.kv_hidden=128", "kv_hidden at most hidden")),
    ("S(model={'hidden': 64, 'kv_hidden': 64, 'ffn': 1, 'layers': 1, 'swiglu': 2})",
     skrull.ConfigError, "INVALID_ENUM", ("model.swiglu=2",)),
    ("S(model={'hidden': 64, 'kv_hidden': 64, 'ffn': 1, 'layers': -1})", skrull.ConfigError,
     "INVALID_MODEL", ("model.layers=-1",)),
    ("S(model={'hidden_size': 896})", skrull.ArgumentError, "INVALID_ARG",
     ("has no 'num_attention_heads'",)),
    ("S(model=3.5)", skrull.ArgumentError, "INVALID_ARG", ("model must be",)),
    ("S(cost_model='a100')", skrull.ConfigError, "INVALID_ENUM",
     ("cost_model='a100' is not a GPU preset", "CostModel.from_json")),
    ("S(cost_model=3)", skrull.ArgumentError, "INVALID_ARG", ("cost_model must be",)),
    ("S(cost_model=skrull.CostModel('h100', overlap=7))", skrull.ConfigError, "INVALID_ENUM",
     ("cost_model.overlap=7", "'all-attention'")),
    ("S(cost_model=skrull.CostModel('h100', gpus_per_node=0))", skrull.ConfigError,
     "INVALID_COST_MODEL", ("gpus_per_node is out of range",)),
    ("S(max_sequences=-1)", skrull.ConfigError, "INVALID_ARG", ("max_sequences=-1",)),
    ("S(max_sequences=2.5)", skrull.ArgumentError, "INVALID_ARG", ("max_sequences must",)),
    # ---- plan indices: plan is S(lockstep=True).plan([30, 20, 100, 10, 50]), DP 2 x CP 4
    ("plan.layout(2, 0, 0)", skrull.LayoutError, "NO_SUCH_GPU",
     ("dp_rank=2 is out of range", "2 DP ranks", "0 to 1")),
    ("plan.layout(-1, 0, 0)", skrull.LayoutError, "NO_SUCH_GPU", ("dp_rank=-1",)),
    ("plan.layout(2**32, 0, 0)", skrull.LayoutError, "NO_SUCH_GPU", ("dp_rank=4294967296",)),
    ("plan.layout(0, 0, 4)", skrull.LayoutError, "NO_SUCH_GPU",
     ("cp_rank=4 is out of range", "4 CP ranks", "0 to 3")),
    ("plan.layout(0, 0, -1)", skrull.LayoutError, "NO_SUCH_GPU", ("cp_rank=-1",)),
    ("plan.layout(0, 9, 0)", skrull.LayoutError, "NO_SUCH_GPU",
     ("micro_batch=9 is out of range", "DP rank 0 runs 1 micro-batch")),
    ("plan.layout(0.0, 0, 0)", skrull.ArgumentError, "INVALID_ARG",
     ("dp_rank must be an integer",)),
    ("plan.layout(True, 0, 0)", skrull.ArgumentError, "INVALID_ARG", ("a bool is not a count",)),
    ("plan.members_of(2, 0)", skrull.LayoutError, "NO_SUCH_GPU", ("dp_rank=2 is out of range",)),
    ("plan.members_of(0, 9)", skrull.LayoutError, "NO_SUCH_GPU", ("micro_batch=9",)),
    ("plan.members_of(0, -1)", skrull.LayoutError, "NO_SUCH_GPU", ("micro_batch=-1",)),
    ("plan.rank_layouts(0, 4)", skrull.LayoutError, "NO_SUCH_GPU", ("cp_rank=4",)),
    ("plan.dp_sequences(2)", skrull.LayoutError, "NO_SUCH_GPU", ("dp_rank=2",)),
    ("plan.to_megatron_groups([1, 2])", skrull.BatchError, "INVALID_ARG",
     ("sample_ids has 2 ids for 5 sequences",)),
    # ---- cost models and shapes
    ("skrull.CostModel('a100')", skrull.ConfigError, "INVALID_ENUM", ("gpu='a100'", "'h200'")),
    ("skrull.CostModel('h100', gpus_per_node=2**32 + 8)", skrull.ConfigError,
     "INVALID_COST_MODEL", ("gpus_per_node", "0 to 4294967295")),
    ("skrull.CostModel('h100', peak_flops='1e15')", skrull.ArgumentError, "INVALID_ARG",
     ("peak_flops must be a number",)),
    ("skrull.ModelShape.from_hf_config({'hidden_size': 1})", skrull.ArgumentError, "INVALID_ARG",
     ("has no 'num_attention_heads'",)),
    ("skrull.ModelShape.from_hf_config(42)", skrull.ArgumentError, "INVALID_ARG",
     ("config must be",)),
    # ---- measured times (Scheduler.observe) and refit settings
    ("S(lockstep=True).observe(plan, np.ones((plan.num_micro_batches + 1, 2, 4)))",
     skrull.MeasurementError, "MEASUREMENT_MISMATCH",
     ("times has shape", "[micro_batch][dp][cp]")),
    ("S(lockstep=True).observe(plan, {(2, 0): [0.1]})", skrull.MeasurementError,
     "MEASUREMENT_MISMATCH", ("names no GPU of the plan",)),
    ("S(lockstep=True).observe(plan, {(0, 0): [0.1] * 9})", skrull.MeasurementError,
     "MEASUREMENT_MISMATCH", ("has 9 times, DP rank 0 runs",)),
    ("S(lockstep=True).observe(plan, 'fast')", skrull.ArgumentError, "INVALID_ARG",
     ("times must be", "(str)")),
    ("S(lockstep=True).observe(plan, [[['a'] * 4] * 2])", skrull.ArgumentError, "INVALID_ARG",
     ("must hold numbers",)),
    ("S(lockstep=True).observe(plan.to_dict(), [])", skrull.ArgumentError, "INVALID_ARG",
     ("plan must be a skrull.Plan",)),
    ("S(bucket_tokens=128).observe(plan, [])", skrull.LayoutError, "PLAN_INVALID",
     ("made for another configuration",)),
    ("S(refit={'window': 0})", skrull.ConfigError, "INVALID_REFIT_PARAMS",
     ("window=0 is out of range", "1 to 64")),
    ("skrull.RefitSettings(forgetting=1.5)", skrull.ConfigError, "INVALID_REFIT_PARAMS",
     ("forgetting=1.5", "(0, 1]")),
    ("S(refit={'ridge': '0'})", skrull.ArgumentError, "INVALID_ARG", ("ridge must be a number",)),
]

#: Words of the C ABI that no message may use.
C_WORDS = ("uint32_t", "int32_t", "pointer", "struct", "skrull_", "_reserved", "misaligned")


def namespace() -> dict[str, Any]:
    """What the inputs of ``CASES`` are evaluated in."""
    def S(**kw: Any) -> skrull.Scheduler:  # noqa: N802 (short, as in the table)
        return skrull.Scheduler(**{**dict(dp=2, cp=4, bucket_tokens=64, policy="skrull"),
                                   **kw})
    plan = S(lockstep=True).plan([30, 20, 100, 10, 50])
    return {"skrull": skrull, "np": np, "S": S, "plan": plan}


def raised(expr: str, ns: dict[str, Any]) -> BaseException:
    """The exception ``expr`` raises (AssertionError when it raises none)."""
    run: Callable[[], Any] = eval(f"lambda: {expr}", ns)  # noqa: S307 (our own table)
    try:
        run()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"{expr} raised nothing")


def table() -> str:
    """The markdown table of every case: input, exception, message."""
    ns = namespace()
    rows = ["| input | exception | message |", "|---|---|---|"]
    for expr, _, _, _ in CASES:
        e = raised(expr, ns)
        text = str(e).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{expr}` | `{type(e).__name__}` | {text} |")
    return "\n".join(rows) + "\n"


def splice(doc: str, new_table: str) -> str:
    """``doc`` with the text between the markers replaced by ``new_table``."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"markers {BEGIN} ... {END} not found")
    return pattern.sub(lambda _: f"{BEGIN}\n{new_table}{END}", doc)


def current(doc: str) -> str:
    """The table between the markers of ``doc``."""
    start, stop = doc.index(BEGIN) + len(BEGIN) + 1, doc.index(END)
    return doc[start:stop]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        path.write_text(splice(path.read_text(encoding="utf-8"), table()), encoding="utf-8")
    else:
        sys.stdout.write(table())
