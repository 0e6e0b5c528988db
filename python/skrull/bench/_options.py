"""The bench's command line, its lengths and the checks that refuse bad input before any
process starts."""

from __future__ import annotations

import argparse
import os
import subprocess
from typing import Any, Sequence

#: Policies the bench runs by default (``--policies``).
DEFAULT_POLICIES = ("balanced", "skrull", "packed", "deepspeed")
#: ``--engine`` values: ``SkrullTrainer`` (DDP) or DeepSpeed's own engine.
ENGINES = ("trainer", "deepspeed")
#: Datasets of ``--dataset`` (drawn by ``skrull lengths``, the simulator's samplers).
DATASETS = ("lmsys", "chatqa2", "wikipedia")
#: Built-in model shapes of ``--model`` (transformers config fields).
MODELS: dict[str, dict[str, Any]] = {
    "tiny": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 256},
    "qwen2.5-0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936},
}


class BenchError(Exception):
    """Bad input to the bench: the message says what and how to fix it."""


def parser() -> argparse.ArgumentParser:
    """The ``python -m skrull.bench`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m skrull.bench",
        description="Train a model for a few steps per policy on the same global batches "
                    "(SkrullTrainer over dp x cp processes) and set the cost model's "
                    "predicted step time beside the measured one.")
    p.add_argument("--dp", type=int, default=1, help="data-parallel ranks (default 1)")
    p.add_argument("--cp", type=int, default=2, help="context-parallel ranks (default 2)")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help="comma-separated (default: balanced,skrull,packed,deepspeed)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--lengths", help="a file with one sequence length per line")
    src.add_argument("--dataset", choices=None, default=None,
                     help="lmsys, chatqa2 or wikipedia (default lmsys), scaled by --max-len")
    p.add_argument("--max-len", type=int, default=2048,
                   help="--dataset lengths are scaled so that 128K becomes this (default 2048)")
    p.add_argument("--sequences", type=int, default=0,
                   help="--dataset: lengths to draw (default: batch x (warmup + steps))")
    p.add_argument("--batch", type=int, default=16, help="sequences per global batch (16)")
    p.add_argument("--bucket", type=int, default=0,
                   help="tokens per GPU and micro-batch (default: --max-len / cp, at least "
                        "the longest length / cp)")
    p.add_argument("--chunk-size", type=int, default=0,
                   help="ChunkSize: chunking on for every policy that chunks (balanced, "
                        "chunkflow); default 0: off, chunkflow takes its default")
    p.add_argument("--chunk-keep", type=int, default=1,
                   help="K: chunks that keep their activations (default 1)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--steps", type=int, default=3, help="timed steps (default 3)")
    p.add_argument("--model", default="tiny",
                   help="tiny (default), qwen2.5-0.5b, or a transformers config.json (or "
                        "its folder); weights are random, nothing is downloaded")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float64"], default=None,
                   help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda when available")
    p.add_argument("--calibrate", choices=["none", "profile", "online", "profile+online"],
                   default="none",
                   help="none: the preset cost model; profile: run python -m skrull.profile "
                        "for this model and device first; online: refit from the micro-batch "
                        "and step times of a calibration run of balanced before the policies "
                        "(--calibration-steps; from the preset); profile+online: both, the "
                        "refit starting from the profile")
    p.add_argument("--cost-model",
                   help="plan and predict with this cost model (a file --save-cost-model wrote, "
                        "or skrull calibrate's); only with --calibrate none")
    p.add_argument("--save-cost-model",
                   help="write the cost model the run planned and predicted with (after "
                        "calibration) here, for --cost-model")
    p.add_argument("--calibration-steps", type=int, default=8,
                   help="--calibrate online: steps of the calibration run (a run of balanced "
                        "on batches of its own, before the policies; its first step is not "
                        "observed) (default 8)")
    p.add_argument("--max-spread", type=float, default=0.15,
                   help="a policy whose timed steps' measured / predicted times spread "
                        "more than this share of their median ((max - min) / median: the "
                        "steps differ in content, the ratio takes that out) is run again, "
                        "once (default 0.15); still above it, it is marked noisy")
    p.add_argument("--outlier-delay", type=int, default=0, metavar="W",
                   help="also run every policy with SkrullBatchSampler(outlier_delay=W) "
                        "(docs/outlier_delay.md), beside W = 0; use --warmup + --steps = the "
                        "batches of one epoch so both train the same samples (default 0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--chart", help="write an SVG of measured against predicted per policy")
    p.add_argument("--work-dir",
                   help="keep every policy's plans, measured micro-batch times, cost model "
                        "and rank logs here (default: a temporary folder, removed)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_options(p)
    return p


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parsed and checked options (``BenchError`` on bad input that needs no lengths)."""
    opts = parser().parse_args(argv)
    import skrull
    opts.policies = [p.strip() for p in opts.policies.split(",") if p.strip()]
    runnable = list(skrull.POLICIES)
    for p in opts.policies:
        if p not in runnable:
            raise BenchError(f"--policies: unknown policy '{p}' (one of "
                             f"{', '.join(runnable)})")
    if not opts.policies:
        raise BenchError("--policies: name at least one policy")
    if opts.dataset is not None and opts.dataset not in DATASETS:
        raise BenchError(f"--dataset: unknown dataset '{opts.dataset}' (one of "
                         f"{', '.join(DATASETS)})")
    if opts.chunk_size < 0 or opts.chunk_keep < 1:
        raise BenchError("--chunk-size: 0 (off) or more; --chunk-keep: 1 or more")
    for name in ("dp", "cp", "batch", "steps", "max_len"):
        if getattr(opts, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')}: {getattr(opts, name)} is below 1")
    if not 0 <= opts.outlier_delay <= 64:
        raise BenchError(f"--outlier-delay: {opts.outlier_delay} is not in 0..64")
    if opts.warmup < 1:
        raise BenchError("--warmup: at least 1 (the first step's time includes start-up, and "
                         "each timed step is measured from the end of the one before)")
    if opts.cost_model is not None and opts.calibrate != "none":
        raise BenchError("--cost-model: only with --calibrate none (a calibration would "
                         "replace the model given)")
    if opts.cost_model is not None and not os.path.isfile(opts.cost_model):
        raise BenchError(f"--cost-model: no such file {opts.cost_model!r}")
    if not opts.max_spread > 0:
        raise BenchError(f"--max-spread: {opts.max_spread} is not above 0")
    if opts.calibration_steps < 2:
        raise BenchError(f"--calibration-steps: {opts.calibration_steps} is below 2 (the "
                         "refit needs steps to fit)")
    import torch
    if opts.device is None:
        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    if opts.device == "cuda":
        gpus = torch.cuda.device_count()
        if gpus < opts.dp * opts.cp:
            raise BenchError(f"--dp {opts.dp} x --cp {opts.cp} needs {opts.dp * opts.cp} GPUs; "
                             f"this machine has {gpus}")
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
        if opts.dp * opts.cp > cores:
            raise BenchError(f"--dp {opts.dp} x --cp {opts.cp} needs {opts.dp * opts.cp} CPU "
                             f"cores (one process each, one thread); this machine has {cores}")
    if opts.dtype is None:
        opts.dtype = "bfloat16" if opts.device == "cuda" else "float32"
    check_engine_options(opts)
    opts.model_config = model_config(opts.model)
    return opts


def chunking(opts: argparse.Namespace, policy: str) -> dict[str, Any]:
    """The Scheduler's chunking arguments of ``policy`` in this run: ``--chunk-size`` and
    ``--chunk-keep`` when a size is given, chunkflow's own default size otherwise."""
    if opts.chunk_size:
        return {"chunk_size": opts.chunk_size, "chunk_keep": opts.chunk_keep}
    return {"chunk_keep": opts.chunk_keep} if policy == "chunkflow" else {}


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """``--engine`` and ``--zero``."""
    p.add_argument("--engine", choices=ENGINES, default="trainer",
                   help="trainer (default): SkrullTrainer, DDP; deepspeed: DeepSpeed's own "
                        "engine through skrull.deepspeed (the paper's engine)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=None,
                   help="ZeRO stage of --engine deepspeed (default 2, the paper's)")


def check_engine_options(opts: argparse.Namespace) -> None:
    """Refuses ``--zero`` without ``--engine deepspeed`` and a DeepSpeed that cannot be
    imported; fills the default stage."""
    if opts.engine != "deepspeed":
        if opts.zero is not None:
            raise BenchError("--zero: only with --engine deepspeed")
        return
    if opts.zero is None:
        opts.zero = 2
    import importlib.util
    if importlib.util.find_spec("deepspeed") is None:
        raise BenchError("--engine deepspeed: DeepSpeed is not installed (on a machine "
                         "without a GPU: DS_BUILD_OPS=0 pip install --no-build-isolation "
                         "deepspeed; docs/deepspeed.md)")


def model_config(name: str) -> dict[str, Any]:
    """The transformers config fields of ``--model``: a built-in name, a config.json, or a
    folder holding one."""
    import json
    if name in MODELS:
        return dict(MODELS[name])
    path = os.path.join(name, "config.json") if os.path.isdir(name) else name
    if not os.path.isfile(path):
        raise BenchError(f"--model: '{name}' is neither a built-in model "
                         f"({', '.join(MODELS)}) nor a config.json or a folder holding one")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise BenchError(f"--model: {path} is not a readable JSON config ({e})") from None
    need = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "vocab_size")
    missing = [k for k in need if k not in cfg]
    if missing:
        raise BenchError(f"--model: {path} lacks {', '.join(missing)}")
    cfg.setdefault("model_type", "llama")
    return dict(cfg)


def read_lengths_file(path: str) -> list[int]:
    """One positive integer per non-empty line; ``BenchError`` naming the first bad line."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BenchError(f"--lengths: cannot read {path} ({e.strerror})") from None
    out = []
    for i, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        try:
            n = int(text)
        except ValueError:
            raise BenchError(f"--lengths: {path} line {i}: '{text}' is not an integer") \
                from None
        if n < 1:
            raise BenchError(f"--lengths: {path} line {i}: {n} is not a positive length")
        out.append(n)
    if not out:
        raise BenchError(f"--lengths: {path} holds no lengths")
    return out


def draw_lengths(opts: argparse.Namespace, cli: str) -> list[int]:
    """``--dataset`` lengths through ``skrull lengths`` (the simulator's samplers)."""
    count = opts.sequences or opts.batch * (opts.warmup + opts.steps)
    args = [cli, "lengths", "--dataset", opts.dataset or "lmsys", "--count", str(count),
            "--seed", str(20250526 + opts.seed), "--max-len", str(opts.max_len)]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise BenchError(f"skrull lengths: {run.stderr.strip()}")
    return [int(x) for x in run.stdout.split()]


def lengths_and_bucket(opts: argparse.Namespace, cli: str) -> tuple[list[int], int]:
    """The lengths and the BucketSize, checked: every length must fit ``bucket x cp``."""
    lengths = read_lengths_file(opts.lengths) if opts.lengths else draw_lengths(opts, cli)
    if len(lengths) < opts.batch:
        raise BenchError(f"{len(lengths)} lengths, fewer than --batch {opts.batch}")
    bucket = opts.bucket or max(-(-max(lengths) // opts.cp) + 2 * opts.cp,
                                -(-opts.max_len // opts.cp))
    longest = max(lengths)
    if longest > bucket * opts.cp:
        raise BenchError(f"a length of {longest} tokens does not fit --bucket {bucket} x --cp "
                         f"{opts.cp} = {bucket * opts.cp} tokens (raise --bucket or drop it)")
    return lengths, bucket


def check_fits(opts: argparse.Namespace, bucket: int) -> None:
    """Refuses a model whose weights, gradients and activations at ``bucket`` tokens cannot
    fit one process's memory (a rough bound, so that the bench fails before training)."""
    c = opts.model_config
    h, f, layers, vocab = (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"],
                           c["vocab_size"])
    params = vocab * h * 2 + layers * (4 * h * h + 3 * h * f)
    width = {"float32": 4, "bfloat16": 2, "float64": 8}[opts.dtype]
    need = params * width * 3 + bucket * (layers * 16 * h + 2 * vocab) * width
    if opts.device == "cuda":
        import torch
        free = min(torch.cuda.mem_get_info(i)[0] for i in range(opts.dp * opts.cp))
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") // (opts.dp * opts.cp)
    if need > free:
        raise BenchError(f"--model {opts.model}: about {need / 2**30:.1f} GiB per process "
                         f"(weights, gradients, activations at BucketSize {bucket}) against "
                         f"{free / 2**30:.1f} GiB free; pick a smaller model or --bucket")
