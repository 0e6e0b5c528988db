"""Offline profiling: measure this machine and derive BucketSize and the cost model from it.

``python -m skrull.profile --model qwen2.5-0.5b --device cuda`` builds one decoder layer and
the LM head of the model in torch and measures, with a progress bar on stderr:

- forward + backward time of the layer and of the head at several token counts (``layer``
  and ``head`` rows; ``layers x layer + head`` is one whole-model step);
- causal attention forward + backward over packed sequences of several lengths (varlen
  FlashAttention on CUDA when ``flash_attn`` is importable, else PyTorch's SDPA per
  sequence) (``attention`` rows);
- peak memory of one GPU against the tokens it holds, with and without activation
  checkpointing (``memory`` rows): measured by the CUDA allocator on CUDA, estimated from the
  tensors autograd saves on CPU, plus the model states;
- all-gathers inside a node and across nodes when launched on several processes (under
  ``torchrun``, or ``--procs N`` spawned here) (``collective`` rows).

It writes the samples CSV (``--out``), runs ``skrull calibrate`` on it (the one fit, in Rust),
writes the fitted cost-model file and prints the fit and the BucketSize that fits the memory
limit. ``--quick`` measures a reduced grid. ``docs/profiling.md`` describes the whole
workflow, the CSV format and the caveats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional, Sequence

from ._shape import PRESETS, ProfileShape, from_hf_config

__all__ = ["PRESETS", "ProfileShape", "from_hf_config", "main", "parse_bytes", "find_cli"]

#: Assumed memory of one device when profiling on CPU without ``--memory-limit``: an 80 GiB
#: H100, the paper's GPU.
CPU_DEFAULT_MEMORY = 80 << 30
#: Default fraction of the memory limit kept free (allocator fragmentation, CUDA and NCCL
#: workspaces, what the estimate misses).
DEFAULT_MARGIN = 0.10

_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """A byte count, as ``skrull calibrate`` reads it.

    Parameters
    ----------
    text : str
        A whole number, or a number with a binary suffix ``K``, ``M``, ``G``, ``T``
        (``80G``, ``80GiB`` and ``80GB`` are all 80 x 2^30).

    Returns
    -------
    int
        The bytes.

    Raises
    ------
    argparse.ArgumentTypeError
        Not a byte count.

    Example
    -------
    >>> from skrull.profile import parse_bytes
    >>> parse_bytes("80GiB") == 80 * 2**30
    True
    """
    s = text.strip()
    for tail in ("iB", "B"):
        if s.endswith(tail):
            s = s[:-len(tail)]
            break
    mult = 1
    if s and s[-1].upper() in _SUFFIX:
        mult, s = _SUFFIX[s[-1].upper()], s[:-1]
    try:
        value = float(s) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count")
    return int(value)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(parse_bytes(v)) for v in text.split(",") if v.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': give positive whole numbers")
    return values


def find_cli(explicit: Optional[str] = None) -> Optional[str]:
    """The ``skrull`` command.

    Parameters
    ----------
    explicit : str, optional
        A path given by the caller (``--skrull``); used first.

    Returns
    -------
    str or None
        ``explicit``, else ``$SKRULL_CLI``, else the one ``pip install`` put next to this
        Python (the environment's ``bin/``, also when it is not on ``PATH``), else ``skrull``
        on ``PATH``, else the source tree's ``target/release/skrull``; ``None`` when none
        exists.

    Example
    -------
    >>> from skrull.profile import find_cli
    >>> find_cli("/nonexistent/skrull") is None or True
    True
    """
    tree = Path(__file__).resolve().parents[3] / "target" / "release" / "skrull"
    beside = [str(Path(d) / "skrull") for d in
              dict.fromkeys([sysconfig.get_path("scripts"), str(Path(sys.executable).parent)])]
    for c in (explicit, os.environ.get("SKRULL_CLI"), *beside, shutil.which("skrull"),
              str(tree)):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m skrull.profile",
        usage="python -m skrull.profile (--model PRESET | --hf-config FILE | --hidden N --ffn N "
              "--layers N --heads N --vocab N) [options]",
        description="Measure this machine for skrull: layer, LM-head and attention times, "
                    "collectives and memory against tokens; write the samples CSV, fit the "
                    "cost model with `skrull calibrate` (the `skrull` command pip installs "
                    "with this package) and report the BucketSize. Required: the model, as "
                    "--model (a preset), --hf-config (a Hugging Face config.json or model "
                    "directory) or all of --hidden --ffn --layers --heads --vocab. Everything "
                    "else has a default (--device: cuda when available, else cpu).",
        epilog="Example: python -m skrull.profile --model qwen2.5-0.5b --device cpu --quick")
    m = p.add_argument_group("model (required: a preset, a Hugging Face config.json, or the "
                             "fields)")
    m.add_argument("--model", choices=sorted(PRESETS), help="a preset shape")
    m.add_argument("--hf-config", metavar="FILE", help="a Hugging Face config.json (or the "
                   "model directory holding it)")
    for flag in ("hidden", "ffn", "layers", "heads", "kv-heads", "vocab", "head-dim"):
        m.add_argument(f"--{flag}", type=int, help="override or give this field")
    m.add_argument("--no-qkv-bias", action="store_true", help="Q, K, V without biases")
    m.add_argument("--tie-embeddings", action="store_true",
                   help="the LM head shares the embedding (one matrix in the model states)")
    r = p.add_argument_group("what to measure")
    r.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    r.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                   help="default: bfloat16 on CUDA, float32 on CPU")
    r.add_argument("--quick", action="store_true",
                   help="a reduced grid and fewer repetitions (smoke runs and tests)")
    r.add_argument("--tokens", type=_int_list, help="token counts of the layer, head and "
                   "memory samples (comma-separated)")
    r.add_argument("--attention-lengths", type=_int_list, help="sequence lengths of the "
                   "attention samples")
    r.add_argument("--pack-tokens", type=int, help="tokens per packed attention sample "
                   "(default: the longest attention length)")
    r.add_argument("--attention", choices=("auto", "flash", "sdpa"), default="auto",
                   help="varlen kernel: flash_attn's on CUDA when importable (auto), or SDPA "
                        "per sequence")
    r.add_argument("--checkpoint", action="store_true",
                   help="time the layer with activation checkpointing (recompute included)")
    r.add_argument("--warmup", type=int, help="untimed repetitions per sample")
    r.add_argument("--repeats", type=int, help="timed repetitions per sample (the fastest "
                   "counts)")
    r.add_argument("--threads", type=int, help="torch CPU threads")
    r.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs")
    d = p.add_argument_group("collectives (without torchrun)")
    d.add_argument("--procs", type=int, default=1,
                   help="spawn this many processes for the collectives (gloo on CPU)")
    d.add_argument("--nodes", type=int, default=1,
                   help="split the spawned processes into this many nodes of consecutive ranks")
    d.add_argument("--collective-sizes", type=_int_list,
                   help="all-gather result sizes in bytes (suffixes K, M, G)")
    b = p.add_argument_group("memory and BucketSize")
    b.add_argument("--memory-limit", type=parse_bytes, help="memory of one GPU for training "
                   "(default: the CUDA device's free memory; on CPU 80 GiB, assumed)")
    b.add_argument("--memory-margin", type=float, default=DEFAULT_MARGIN,
                   help="fraction of the limit kept free (default 0.1)")
    b.add_argument("--zero-stage", type=int, choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage of the model states (default 0: every GPU holds all)")
    b.add_argument("--zero-shards", type=int, default=1, help="GPUs ZeRO shards over")
    b.add_argument("--static-bytes", type=parse_bytes,
                   help="model-state bytes per GPU, instead of the ZeRO count")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="skrull_profile.csv", help="the samples CSV")
    o.add_argument("--model-out", help="the fitted cost-model file (default: --out with .json)")
    o.add_argument("--skrull", metavar="PATH", help="the skrull command (default: "
                   "$SKRULL_CLI, PATH, then the source tree's target/release/skrull)")
    o.add_argument("--base-gpu", choices=("h100", "h200"), default="h100",
                   help="preset whose coefficients stay where nothing was measured")
    o.add_argument("--no-calibrate", action="store_true", help="only write the CSV")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _shape(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ProfileShape:
    fields = {k: getattr(args, k.replace("-", "_")) for k in
              ("hidden", "ffn", "layers", "heads", "kv-heads", "vocab", "head-dim")}
    fields = {k.replace("-", "_"): v for k, v in fields.items() if v is not None}
    if args.no_qkv_bias:
        fields["qkv_bias"] = False
    if args.tie_embeddings:
        fields["tie_embeddings"] = True
    if args.model and args.hf_config:
        parser.error("give --model or --hf-config, not both")
    if args.hf_config:
        try:
            return from_hf_config(args.hf_config, fields)
        except (OSError, ValueError) as exc:
            parser.error(f"--hf-config {args.hf_config}: {exc}")
    if args.model:
        base = PRESETS[args.model]
        if not fields:
            return base
        return ProfileShape(**{**asdict(base), **fields, "name": "custom"})
    missing = [f for f in ("hidden", "ffn", "layers", "heads", "vocab") if f not in fields]
    if missing:
        parser.error("the model is required: give --model (one of "
                     f"{', '.join(sorted(PRESETS))}), --hf-config FILE, or all of --hidden "
                     f"--ffn --layers --heads --vocab (missing: "
                     f"{', '.join('--' + m for m in missing)})")
    fields.setdefault("kv_heads", fields["heads"])
    return ProfileShape(**fields)


#: Grids: (layer/head/memory tokens, attention lengths, collective sizes, warmup, repeats).
#: Sequence counts and tokens of the ``local`` rows (the attention kernel's cost per call).
LOCAL_COUNTS = (1, 8, 64)
LOCAL_TOKENS = 16

_GRIDS = {
    ("cuda", False): ([512, 1024, 2048, 4096, 8192, 16384], [512, 1024, 2048, 4096, 8192, 16384],
                      [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20], 2, 5),
    ("cuda", True): ([1024, 2048, 4096], [1024, 2048, 4096], [1 << 20, 8 << 20, 64 << 20], 1, 3),
    ("cpu", False): ([256, 512, 1024, 2048, 4096], [256, 512, 1024, 2048, 4096],
                     [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20], 1, 5),
    ("cpu", True): ([128, 256, 512], [128, 256, 512], [64 << 10, 1 << 20, 8 << 20], 1, 5),
}


class _Rows:
    """The CSV being built: data rows and comment lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counts: dict[str, int] = {}

    def comment(self, text: str) -> None:
        self.lines.extend(f"# {line}" for line in text.splitlines())

    def row(self, kind: str, size: int, value: float | int, *extra: object) -> None:
        v = f"{value:.6e}" if isinstance(value, float) else str(value)
        self.lines.append(",".join([kind, str(size), v, *map(str, extra)]))
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _oom_types() -> tuple[type[BaseException], ...]:
    import torch
    return (torch.cuda.OutOfMemoryError,) if hasattr(torch.cuda, "OutOfMemoryError") else ()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the profiler (``python -m skrull.profile``).

    Parameters
    ----------
    argv : sequence of str, optional
        The command-line arguments (default: ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        The exit status: 0 when the samples (and, with a ``skrull`` command, the fitted cost
        model and BucketSize) were written.

    Raises
    ------
    SystemExit
        For bad arguments (status 2, with the usage) or an impossible run (no CUDA device,
        flash_attn missing).

    Example
    -------
    >>> from skrull.profile import main
    >>> main(["--model", "qwen2.5-0.5b", "--device", "cpu", "--quick",
    ...       "--out", "/tmp/profile.csv"])  # doctest: +SKIP
    0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    shape = _shape(args, parser)  # before importing torch: a missing model fails at once
    import torch

    from ._dist import Launch, measure, measure_sharded, spawn
    from ._measure import (Bench, Progress, Workload, cpu_memory, cuda_memory, device_memory,
                           micro_batch_memory, model_states)
    from ._model import flash_varlen, sdpa_varlen

    t_start = time.perf_counter()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    tokens, att_lengths, coll_sizes, warmup, repeats = _GRIDS[(device.type, args.quick)]
    tokens = sorted(set(args.tokens or tokens))
    att_lengths = sorted(set(args.attention_lengths or att_lengths))
    coll_sizes = sorted(set(args.collective_sizes or coll_sizes))
    bench = Bench(args.warmup if args.warmup is not None else warmup,
                  max(args.repeats if args.repeats is not None else repeats, 1))
    pack = args.pack_tokens or max(att_lengths)
    show = not args.quiet
    rows = _Rows()
    notes: list[str] = []

    # Collectives first: every process of a torchrun launch takes part, then only rank 0
    # goes on to the single-GPU measurements.
    launch = Launch.from_env()
    collectives = []
    sharded = []
    heads = (shape.heads, shape.kv_heads, shape.head_dim)
    if launch is not None:
        import torch.distributed as dist
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        try:
            from ._dist import steps
            bar = Progress(steps(launch, coll_sizes), enabled=show and launch.rank == 0)
            collectives = measure(launch, device, coll_sizes, bench.warmup, bench.repeats, bar)
            sharded = measure_sharded(launch, device, heads, bench.warmup, bench.repeats, bar)
            bar.close()
        finally:
            dist.destroy_process_group()
        if launch.rank != 0:
            return 0
        where = f"torchrun: {launch.world} processes, {launch.local_world} per node"
    elif args.procs > 1:
        if args.procs % args.nodes:
            raise SystemExit(f"--procs {args.procs} is not a multiple of --nodes {args.nodes}")
        collectives, sharded = spawn(args.procs, args.nodes, device, coll_sizes,
                                     bench.warmup, bench.repeats, show, heads)
        where = f"{args.procs} spawned processes on this machine"
        if args.nodes > 1:
            where += (f" as {args.nodes} nodes (the inter-node rows cross no real node "
                      "boundary)")
    else:
        where = "one process: no collectives measured"

    # Memory limit, read before this process allocates anything on the device.
    mem = device_memory(device)
    if args.memory_limit is not None:
        limit, limit_src = args.memory_limit, "--memory-limit"
    elif mem is not None:
        limit, limit_src = mem[0], f"free memory of {torch.cuda.get_device_name(device)}"
    else:
        limit, limit_src = CPU_DEFAULT_MEMORY, "assumed 80 GiB device (CPU run)"
    if not 0 <= args.memory_margin < 1:
        raise SystemExit("--memory-margin must be in [0, 1)")
    usable = int(limit * (1 - args.memory_margin))

    if args.attention == "flash" or (args.attention == "auto" and device.type == "cuda"):
        attention = flash_varlen()
        if attention is None and args.attention == "flash":
            raise SystemExit("--attention flash: flash_attn is not importable")
        if attention is not None and dtype == torch.float32:
            raise SystemExit("flash_attn needs --dtype bfloat16 or float16")
    else:
        attention = None
    kernel = "flash_attn varlen" if attention is not None else "SDPA per sequence"
    attention = attention or sdpa_varlen

    if args.static_bytes is not None:
        static, static_how = args.static_bytes, "--static-bytes"
    else:
        static, static_how = model_states(shape, dtype, args.zero_stage, args.zero_shards)

    if shape.heads * shape.head_dim != shape.hidden:
        notes.append(f"{shape.heads} heads x {shape.head_dim} != hidden {shape.hidden}: the "
                     "cost model counts attention FLOPs with hidden")
    w = Workload(shape, attention, device, dtype, args.seed)
    att_plan = [(n, max(pack // n, 1)) for n in att_lengths]
    total = (len(tokens) * (2 if shape.vocab else 1) + len(att_plan) + len(tokens)
             + len(LOCAL_COUNTS))
    bar = Progress(total, enabled=show)
    skipped: set[str] = set()

    def timed(kind: str, size: int, make: Callable[[], Callable[[], None]]) -> Optional[float]:
        if kind in skipped:
            return None
        try:
            return bench.time(make(), device)
        except _oom_types():
            skipped.add(kind)
            notes.append(f"{kind} at {size} tokens and beyond: out of memory, skipped")
            torch.cuda.empty_cache()
            return None

    # Timings in order of size, each size's layer, head and attention back to back, so
    # that a change in the machine's load hits them alike.
    order = sorted([(n, 0) for n in tokens] + [(n, 1) for n, _ in att_plan])
    for n, kind in order:
        if kind == 1:
            count = max(pack // n, 1)
            t = timed("attention", n * count, lambda: w.attention_step(n, count))
            if t is not None:
                rows.row("attention", n, t, count)
            bar.step(f"attention fwd+bwd, {count} x {n} tokens packed")
            continue
        t_layer = timed("layer", n, lambda: w.layer_step(n, args.checkpoint))
        bar.step(f"layer fwd+bwd, {n} tokens")
        t_head = None
        if shape.vocab:
            t_head = timed("head", n, lambda: w.head_step(n))
            bar.step(f"LM head fwd+bwd, {n} tokens")
        if t_layer is not None and (t_head is not None or not shape.vocab):
            rows.row("layer", n, t_layer)
            if t_head is not None:
                rows.row("head", n, t_head)
    # The attention kernel's cost per call: one layer's attention of LOCAL_COUNTS short
    # sequences, each whole (0 slope for a varlen kernel that takes them in one call).
    for count in LOCAL_COUNTS:
        t = timed("local", count * LOCAL_TOKENS,
                  lambda: w.attention_step(LOCAL_TOKENS, count))
        if t is not None:
            rows.row("local", count, t, LOCAL_TOKENS)
        bar.step(f"attention fwd+bwd, {count} x {LOCAL_TOKENS} tokens (cost per call)")
    measure_memory = cuda_memory if device.type == "cuda" else cpu_memory
    for n in tokens:
        if "memory" not in skipped:
            try:
                parts = measure_memory(w, n)
            except _oom_types():
                skipped.add("memory")
                notes.append(f"memory at {n} tokens and beyond: out of memory, skipped")
                torch.cuda.empty_cache()
            else:
                for mode, recompute in (("plain", False), ("checkpoint", True)):
                    rows.row("memory", n, micro_batch_memory(shape, static, parts, recompute),
                             mode)
                rows.comment(", ".join(f"{k} {v.retained}+{v.transient}"
                                       for k, v in parts.items())
                             + f" bytes retained+transient at {n} tokens")
        bar.step(f"memory, {n} tokens")
    bar.close()
    for c in collectives:
        rows.row("collective", c.bytes, c.seconds, c.group, c.scope)
    for r in sharded:
        rows.row("sharded", r.count, r.seconds, r.tokens, r.group)
    # The training loop outside the micro-batches: the optimizer's update and zeroing the
    # gradients, over the layer's parameters, the head's and both (calibrate extrapolates
    # the line to the model's parameters).
    for part in ("layer", "head", "both") if shape.vocab else ("layer",):
        n_params, step = w.optimizer_step(part)
        rows.row("step", n_params, bench.time(step, device))

    elapsed = time.perf_counter() - t_start
    hardware = (torch.cuda.get_device_name(device) if device.type == "cuda"
                else platform.processor() or platform.machine())
    header = [
        f"skrull profile: {shape.describe()}",
        f"device {device} ({hardware}), "
        f"torch {torch.__version__}, {str(dtype).replace('torch.', '')}, "
        f"{torch.get_num_threads()} CPU threads, attention {kernel}, "
        f"{'checkpointed ' if args.checkpoint else ''}layer timings, "
        f"{bench.warmup} warm-up + fastest of {bench.repeats}, {elapsed:.1f} s",
        f"collectives: {where}",
        f"model states: {static} bytes ({static_how}); memory rows = model states + layers x "
        "retained(layer) + retained(head) + max transient; "
        + ("measured by the CUDA allocator" if device.type == "cuda" else
           "retained = saved-tensor bytes, transient estimated (CPU)"),
        "rows: kind,size,value[,extra] (docs/profiling.md)",
    ] + notes
    csv = _Rows()
    for line in header:
        csv.comment(line)
    csv.lines.append("kind,size,value,extra")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(csv.text() + rows.text(), encoding="utf-8")
    counts = ", ".join(f"{v} {k}" for k, v in rows.counts.items())
    print(f"skrull profile: {shape.describe()}")
    print(f"  measured on {device} ({str(dtype).replace('torch.', '')}, attention {kernel}) "
          f"in {elapsed:.1f} s; {where}")
    print(f"  samples: {out} ({counts})")
    for note in notes:
        print(f"  note: {note}")

    model_out = Path(args.model_out or out.with_suffix(".json"))
    cmd = ["calibrate", "--samples", str(out), "--model", shape.model_arg(), "--gpu",
           args.base_gpu, "--memory-limit", str(usable)]
    if launch is not None and device.type == "cuda":
        cmd += ["--gpus-per-node", str(launch.local_world)]
    cli = None if args.no_calibrate else find_cli(args.skrull)
    if cli is None:
        why = ("--no-calibrate" if args.no_calibrate else
               "no skrull command found: `pip install ./python` installs it next to this "
               "Python; else pass --skrull PATH or set SKRULL_CLI")
        print(f"  calibrate next ({why}):\n    skrull {' '.join(cmd)} > {model_out}")
        print(f"  then in Python: {_python_line(model_out, args.base_gpu, shape)}")
        return 0
    run = subprocess.run([cli, *cmd], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"skrull calibrate failed: {run.stderr.strip()}", file=sys.stderr)
        return 1
    model_out.write_text(run.stdout, encoding="utf-8")
    fitted = json.loads(run.stdout)
    from .. import CostModel, ModelShape
    CostModel.from_json(model_out, gpu=args.base_gpu, model=ModelShape(**shape.model_fields()))
    print(f"  cost model: {model_out} (skrull calibrate; the library accepts it)")
    for part in fitted["_comment"].split("; ")[1:]:
        print(f"    {part}")
    if not collectives:
        print(f"    collectives: not measured, the {args.base_gpu} preset's ring parameters "
              "stay")
    buckets = fitted.get("_memory", {})
    plain = (buckets.get("plain") or {}).get("bucket_tokens")
    ckpt = (buckets.get("checkpoint") or {}).get("bucket_tokens")
    print(f"  memory limit: {usable / 2**30:.2f} GiB ({limit_src}, {limit / 2**30:.2f} GiB, "
          f"less a {args.memory_margin:.0%} margin)")
    print(f"  BucketSize: {plain} tokens per GPU; {ckpt} with activation checkpointing")
    bucket = ckpt if args.checkpoint else plain
    if bucket:
        print(f"  plan with it: skrull plan --model {shape.model_arg()} --bucket {bucket} "
              f"--cost-model {model_out}")
        print(f"  in Python:    {_python_line(model_out, args.base_gpu, shape, bucket)}")
    else:
        print("  no token fits the memory limit: raise it, shard the model states "
              "(--zero-stage, --zero-shards) or checkpoint activations")
    return 0


def _python_line(model_out: Path, gpu: str, shape: ProfileShape,
                 bucket: Optional[int] = None) -> str:
    """The Python that plans with the fitted model (what ``skrull plan --cost-model`` does)."""
    name = shape.model_arg()
    model = repr(name) if name in PRESETS else f"skrull.ModelShape(**{shape.model_fields()!r})"
    load = (f"cost = skrull.CostModel.from_json({str(model_out)!r}, gpu={gpu!r}, "
            f"model={model})")
    if bucket is None:
        return load
    return (f"{load}; skrull.Scheduler(dp, cp, {bucket}, model={model}, "
            "cost_model=cost)")
