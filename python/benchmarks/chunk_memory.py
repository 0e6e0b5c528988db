"""Peak memory and time per token of one long sequence trained chunked (ChunkFlow's schedule),
beside the same sequence whole and sharded, against the budget rule of docs/chunking.md.

    python python/benchmarks/chunk_memory.py [--model tiny|0.5b-layers] [--lengths 8192 32768]
        [--chunks 2048 4096 8192] [--keeps 1 2 4] [--cp 2] [--format table|json]

Every configuration runs in fresh CPU processes (one thread each; gloo for the two-rank
ones): one training step (forward, backward) of a random transformers model with
``attn_implementation="skrull"`` on one sequence of S tokens, as ``SkrullTrainer`` runs it
(``collate_gpu_buffer``, then ``MicroBatchPasses``: the passes' forwards in order over a
per-layer K/V state, the first ``count - K`` recomputed in the one backward):

- ``whole``: S tokens on one process (policy ``skrull``, CP 1);
- ``sharded``: zigzag-sharded over ``--cp`` ranks (policy ``deepspeed``);
- ``chunked C/K``: ``chunkflow`` with ChunkSize C and K kept chunks on one process;
- ``chunked C/K, CP g``: the same over a group of ``--cp`` ranks (its zigzag pieces).

Peak memory is the growth of the process's peak resident set (``ru_maxrss``) across the timed
step, after a warm-up step at 512 tokens (weights, their gradients and the optimizer-free
model are allocated before it and not counted). For a multi-rank run it is the largest rank's.
The processes run with ``MALLOC_MMAP_THRESHOLD_=65536``: glibc otherwise raises its mmap
threshold after the first large free and keeps later blocks in its heap, so the resident set
would count memory the step already freed (measured: 232 MB against 182 MB for 32K tokens
chunked at 4K, K 1, tiny model).
Time per token is the step's wall time over S.

The rule (docs/chunking.md) charges a chunked sequence, per GPU of a group of g, in tokens:
``max(share(last K chunks), share(one chunk) if n > K) + state(S) / g`` with
``state(S) = S x state_permille / 1000``, and one token costs ``a`` bytes where
``Mem(S) = a S + b`` (fitted here from the whole runs at the two shortest lengths). Each row
sets the rule's bytes (at the default ``state_permille`` 64 and at the value the model's shape
gives, ``1000 x 4 x kv_hidden x layers x element bytes / a``) beside the measured peak, and
the measured state per token: what the chunked peak holds beyond the whole run of its kept
chunks (``min(K C, S)`` tokens, over g on a group) and one weight-gradient-sized buffer (the
passes' weight gradients are summed in the one graph before they reach ``.grad``), per token
of S on this rank; and the peak over that whole run plus K, V, dK, dV of S
(``peak / (kept whole + state)``, the weight term not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

#: transformers config fields: the bench's ``tiny`` Llama, and the Qwen2.5-0.5B layer shape
#: (hidden 896, 14 heads, 2 KV heads, FFN 4864) with 2 layers and a 4K vocabulary, so that
#: 8K tokens fit a CPU.
MODELS: dict[str, dict[str, Any]] = {
    "tiny": {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 256},
    "0.5b-layers": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                    "num_hidden_layers": 2, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "vocab_size": 4096},
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def weights_mb(name: str) -> float:
    """The model's parameters in MB (float32): the size of one weight-gradient buffer."""
    return sum(p.numel() for p in _model(name, 512).parameters()) * 4 / 2**20


def _model(name: str, longest: int) -> torch.nn.Module:
    import transformers
    import skrull.hf  # noqa: F401  (registers the "skrull" attention)
    fields = dict(MODELS[name])
    kind = fields.pop("model_type")
    config = transformers.AutoConfig.for_model(kind, **fields)
    config.use_cache = False
    config.max_position_embeddings = longest + 1
    config._attn_implementation = "skrull"
    torch.manual_seed(0)
    model: torch.nn.Module = transformers.AutoModelForCausalLM.from_config(config)
    return model


def _plan(kind: str, length: int, chunk: int, keep: int, cp: int) -> Any:
    import skrull
    if kind == "whole":
        return skrull.Scheduler(1, 1, length, policy="skrull").plan([length])
    if kind == "sharded":
        return skrull.Scheduler(1, cp, -(-length // cp) + 2 * cp, policy="deepspeed",
                                shard_padding="zigzag").plan([length])
    return skrull.Scheduler(1, cp, 2 * length, policy="chunkflow", chunk_size=chunk,
                            chunk_keep=keep, shard_padding="zigzag").plan([length])


def _step(model: torch.nn.Module, plan: Any, rank: int, rings: Any, vocab: int) -> None:
    """One forward and backward of the plan's one micro-batch on this rank, as
    ``SkrullTrainer`` runs it."""
    from skrull.hf import PassAttention, collate_gpu_buffer
    from skrull.torch.attention import MicroBatchPasses
    n = int(plan.lengths[0])
    ids = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    batch = collate_gpu_buffer(plan.layout(0, 0, rank), {0: {"input_ids": ids}}, plan=plan)
    schedule = batch["skrull_layout"].schedule
    passes = MicroBatchPasses(schedule, rings)

    def run(start: int, stop: int, attention: Any, layered: bool) -> torch.Tensor:
        part = {k: batch[k][:, start:stop] for k in ("input_ids", "position_ids",
                                                      "shift_labels")}
        if stop == start:
            part = {k: torch.zeros((1, 1), dtype=torch.long) for k in part}
            part["shift_labels"] -= 100
        out = model(input_ids=part["input_ids"], position_ids=part["position_ids"],
                    shift_labels=part["shift_labels"], labels=part["shift_labels"],
                    num_items_in_batch=n - 1, use_cache=False,
                    skrull_attention=PassAttention(attention, stop - start, layered=layered))
        loss: torch.Tensor = out.loss
        return loss
    loss = passes.loss(lambda att: run(0, schedule.tokens, att, False),
                       lambda p, att: run(p.offset, p.offset + p.tokens, att, True))
    loss.backward()


def _rank(rank: int, world: int, cfg: dict[str, Any], rendezvous: str, out: str) -> None:
    torch.set_num_threads(1)
    rings = None
    if world > 1:
        dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
        from skrull.torch import cp_ring_groups
        rings = cp_ring_groups(1, world)
    model = _model(cfg["model"], cfg["length"])
    vocab = MODELS[cfg["model"]]["vocab_size"]
    warm = _plan(cfg["kind"], 512, min(cfg["chunk"], 256), cfg["keep"], world)
    _step(model, warm, rank, rings, vocab)
    model.zero_grad(set_to_none=False)
    plan = _plan(cfg["kind"], cfg["length"], cfg["chunk"], cfg["keep"], world)
    before = _peak_mb()
    t0 = time.perf_counter()
    _step(model, plan, rank, rings, vocab)
    seconds = time.perf_counter() - t0
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"seconds": seconds, "peak_mb": _peak_mb() - before}, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    """One configuration in fresh processes: the largest rank's peak growth and time."""
    world = cfg["cp"] if cfg["kind"] == "sharded" or cfg.get("group") else 1
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(world, cfg, "file://" + os.path.join(out, "rdv"), out),
                           nprocs=world, start_method="spawn")
        ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(world)]
    return dict(cfg, world=world, peak_mb=max(r["peak_mb"] for r in ranks),
                seconds=max(r["seconds"] for r in ranks))


def rule_tokens(length: int, chunk: int, keep: int, g: int, permille: float) -> float:
    """docs/chunking.md's chunked peak per GPU in tokens (zigzag shares of ``ceil(t / g)``)."""
    sizes = [min(chunk, length - i) for i in range(0, length, chunk)]
    def share(t: int) -> int:
        return -(-t // g)
    kept = sum(share(t) for t in sizes[-keep:])
    full = share(chunk) if len(sizes) > keep else 0
    return max(kept, full) + length * permille / 1000 / g


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--chunks", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--keeps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cp", type=int, default=2)
    parser.add_argument("--group", type=int, nargs="*", default=[4096],
                        help="ChunkSizes also run over a group of --cp ranks (K = 1)")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")   # inherited by every process
    shape = MODELS[args.model]
    kv_hidden = shape["num_key_value_heads"] * shape["hidden_size"] // shape["num_attention_heads"]
    state_bytes = 4 * kv_hidden * shape["num_hidden_layers"] * 4   # K, V, dK, dV in float32
    base = dict(model=args.model, cp=args.cp, chunk=0, keep=1)
    whole_sizes = sorted({*args.lengths, *(min(c * k, n) for c in args.chunks
                                              for k in args.keeps for n in args.lengths)})
    rows = [measure(dict(base, kind="whole", length=n)) for n in whole_sizes]
    by_len = {r["length"]: r for r in rows}
    (s1, m1), (s2, m2) = [(n, by_len[n]["peak_mb"]) for n in whole_sizes[:2]]
    a = (m2 - m1) / (s2 - s1) * 2**20                    # bytes per token
    b = m1 * 2**20 - a * s1
    permille = 1000 * state_bytes / a
    weights = weights_mb(args.model)
    for n in args.lengths:
        rows.append(measure(dict(base, kind="sharded", length=n)))
        for c in args.chunks:
            if c >= n:
                continue
            for k in args.keeps:
                rows.append(measure(dict(base, kind="chunked", length=n, chunk=c, keep=k)))
            if c in args.group:
                rows.append(measure(dict(base, kind="chunked", length=n, chunk=c, keep=1,
                                         group=True)))
    for r in rows:
        g = r["world"]
        r["us_per_token"] = 1e6 * r["seconds"] / r["length"]
        if r["kind"] != "chunked":
            continue
        c, k = r["chunk"], r["keep"]
        r["rule_mb"] = (a * rule_tokens(r["length"], c, k, g, 64) + b) / 2**20
        r["rule_shape_mb"] = (a * rule_tokens(r["length"], c, k, g, permille) + b) / 2**20
        ref = by_len.get(min(k * c, r["length"]))
        if ref is not None:
            r["state_bytes_per_token"] = (r["peak_mb"] - ref["peak_mb"] / g
                                          - weights) * 2**20 / (r["length"] / g)
            r["state_permille_measured"] = 1000 * r["state_bytes_per_token"] / a
        if ref is not None:
            target = ref["peak_mb"] / g + r["length"] * state_bytes / g / 2**20
            r["over_chunk_plus_state"] = r["peak_mb"] / target
    summary = {"model": args.model, "a_bytes_per_token": a, "b_bytes": b, "weights_mb": weights,
               "state_bytes_per_token_shape": state_bytes, "state_permille_shape": permille}
    if args.format == "json":
        json.dump({"summary": summary, "rows": rows}, sys.stdout, indent=1)
        print()
        return
    print(f"model {args.model} ({shape}), float32, one thread per process; Mem(S) = a S + b "
          f"from the whole runs: a = {a / 1024:.1f} KiB/token, b = {b / 2**20:.0f} MiB; "
          f"K, V, dK, dV = {state_bytes} B/token, state_permille of this shape "
          f"{permille:.0f} (default 64); weights {weights:.0f} MB")
    print("| S | run | ranks | peak / rank | rule (64) | rule (shape) | state B/token "
          "(permille) | peak / (kept whole + state) | us / token |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        name = r["kind"] if r["kind"] != "chunked" else (
            f"chunked {r['chunk'] // 1024}K, K {r['keep']}")
        rule = (f"{r['rule_mb']:.0f} MB | {r['rule_shape_mb']:.0f} MB"
                if "rule_mb" in r else " | ")
        state = (f"{r['state_bytes_per_token']:.0f} ({r['state_permille_measured']:.0f})"
                 if "state_bytes_per_token" in r else "")
        over = f"{r['over_chunk_plus_state']:.2f}" if "over_chunk_plus_state" in r else ""
        print(f"| {r['length']:,} | {name} | {r['world']} | {r['peak_mb']:.0f} MB | {rule} | "
              f"{state} | {over} | {r['us_per_token']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
