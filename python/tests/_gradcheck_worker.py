"""One process of the multi-process gradient check (see test_gradcheck.py).

Each rank plans every batch itself (lockstep on), checks that all ranks got the same plan
digest, builds its micro-batches through the gather index (``collate``), trains one step of
``TinyTransformer`` on them (float64, gloo), sums gradients over DP x CP, and compares logits and
gradients with an unpacked single-process reference.

Runs per layout: every policy x shard padding x batch without a pad multiple (40), plus every
policy x shard padding x pad variant on one batch each (40): pad multiples ``M = 2 cp tp``
(tp = 2) and a second one (16, or 24 where 2 cp tp is 16), each without and with
``pad_local``; the batch rotates so that every batch meets every variant. On CP 4 and more,
``balanced`` also plans with sub-groups where they pay off (``subgroup_cost_model``: ``cp / 2``
GPUs per node, so the CP ring crosses nodes, on a GPU 100x slower, so that tokens cost about
what they cost at real sizes): every batch, two wider ones (``wide_batches``, up to 64 tokens)
and the wide ones with pad multiple 16, both shard paddings (20 runs). Attention runs ring by
ring over each ring's own process group (``skrull.torch.cp_ring_groups``).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

import skrull
import skrull.torch as st

BUCKET = 16
VOCAB = 29
# Every policy but `chunkflow`, which `chunk_runs` checks with chunking settings of its own.
POLICIES = [p for p in skrull.POLICIES if p != "chunkflow"]
PADDINGS = ["none", "zigzag"]


def pad_variants(cp: int) -> list[tuple[int, bool]]:
    """(pad_multiple, pad_local) beyond the unpadded runs: Megatron's 2 cp tp with tp = 2, and
    16 (24 where that is 16 too), each without and with pad_local."""
    megatron = 2 * cp * 2
    other = 16 if megatron != 16 else 24
    return [(megatron, False), (megatron, True), (other, False), (other, True)]


def runs(cp: int) -> list[tuple[int, str, str, int, bool, bool]]:
    """Every run of one layout: (batch index into ``all_batches``, policy, shard padding, pad
    multiple, pad_local, whether ``balanced`` plans with ``subgroup_cost_model``)."""
    n = len(batches())
    out = [(k, p, pad, 1, False, False) for k in range(n) for p in POLICIES for pad in PADDINGS]
    for i, p in enumerate(POLICIES):
        for j, pad in enumerate(PADDINGS):
            for v, (m, local) in enumerate(pad_variants(cp)):
                out.append(((i + j + v) % n, p, pad, m, local, False))
    if cp >= 4:
        wide = range(n, n + len(wide_batches()))
        for pad in PADDINGS:
            out += [(k, "balanced", pad, 1, False, True) for k in range(n + len(wide))]
            out += [(k, "balanced", pad, 16, local, True) for k in wide for local in (False, True)]
    return out


def batches() -> dict[str, list[int]]:
    """Lengths <= 32 (fits CP 2 x BucketSize 16); several shorter than 2N."""
    rng = np.random.default_rng(1)
    return {"mixed": [1, 3, 5, 30, 12, 7, 2, 20, 9, 16, 4, 25], "one-short": [3],
            "long-short": [31, 2], "random": rng.integers(1, 33, 16).tolist()}


def wide_batches() -> dict[str, list[int]]:
    """Lengths <= 64 (CP 4 x BucketSize 16) for the sub-group runs: micro-batches that mix a
    sequence sharded over all 4 CP ranks with ones over sub-groups of 2."""
    rng = np.random.default_rng(25)  # mixes them on DP 1 and 2, with and without zigzag
    return {"wide-mixed": [17, 7, 20, 27, 53, 29, 6, 22, 39, 53, 47, 64, 13],
            "wide-random": [54] + rng.integers(1, 65, 13).tolist()}


def all_batches(cp: int) -> list[list[int]]:
    """``batches()``, then, on CP 4 and more, ``wide_batches()``."""
    return list(batches().values()) + (list(wide_batches().values()) if cp >= 4 else [])


def subgroup_cost_model(cp: int) -> skrull.CostModel:
    """The H100 preset with ``cp / 2`` GPUs per node and every rate 100x lower."""
    m = skrull.CostModel("h100", "qwen2.5-0.5b")
    m.gpus_per_node = cp // 2
    for rate in ("peak_flops", "hbm_bandwidth", "intra_node_bandwidth", "inter_node_bandwidth"):
        setattr(m, rate, getattr(m, rate) / 100)
    return m


def chunk_cost_model(bandwidth: float) -> skrull.CostModel:
    """The 0.5B H100 preset 100x slower on the GPU, with links of ``bandwidth`` bytes/s: slow
    enough that ``balanced`` chunks sequences on one GPU beside local and sharded ones."""
    m = skrull.CostModel("h100", "qwen2.5-0.5b")
    for rate in ("peak_flops", "hbm_bandwidth"):
        setattr(m, rate, getattr(m, rate) / 100)
    m.intra_node_bandwidth = m.inter_node_bandwidth = bandwidth
    return m


#: Batches ``balanced`` plans chunked beside local and sharded sequences at DP 2 x CP 2,
#: BucketSize 16, ChunkSize 8 (found by search): (lengths, link bandwidth).
BALANCED_CHUNKED = [([9, 8, 3, 21, 1, 6, 19, 15, 7, 17, 32, 32, 4], 2e5),
                    ([26, 19, 8, 29, 2, 17, 20], 5e3)]


def chunk_runs(cp: int) -> list[tuple[list[int], dict]]:
    """The chunked runs of one layout: (lengths, Scheduler keywords). ``chunkflow`` over the
    whole group (one GPU at CP 1) with chunks of 1, 3, 4 and 8 tokens (last chunks shorter),
    K = 1 (most chunks recomputed) and K = 64 (none), both shard paddings; at CP 2,
    ``balanced`` chunking on one GPU beside local and sharded sequences."""
    bucket = 16 if cp > 1 else 32
    longest = bucket * cp
    mixed = [n for n in [1, 3, 5, 30, 12, 7, 2, 20, 9, 16, 4, 25] if n <= longest]
    out: list[tuple[list[int], dict]] = []
    # K = 64 keeps every chunk: a larger budget holds them.
    for size, keep, lengths, more in [(1, 1, [5, 2, 1], 0), (4, 1, mixed, 0),
                                      (4, 64, mixed, 8), (3, 2, [11, 2, longest], 0),
                                      (8, 1, [longest, 9, 17, 3], 0)]:
        for padding in PADDINGS:
            out.append((lengths, dict(bucket_tokens=bucket + more, policy="chunkflow",
                                      chunk_size=size, chunk_keep=keep,
                                      shard_padding=padding)))
    if cp == 2:
        for lengths, bandwidth in BALANCED_CHUNKED:
            for keep in (1, 2):
                out.append((lengths, dict(bucket_tokens=16, policy="balanced", chunk_size=8,
                                          chunk_keep=keep, shard_padding="zigzag",
                                          cost_model=chunk_cost_model(bandwidth))))
    return out


def _samples(lengths: list[int], seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, VOCAB, (n,), generator=g),
             "labels": torch.randint(0, VOCAB, (n,), generator=g)} for n in lengths]


def _model() -> st.TinyTransformer:
    torch.manual_seed(1234)
    return st.TinyTransformer(vocab=VOCAB, hidden=16, heads=2, ffn=32, layers=2)


def _reference(model: st.TinyTransformer, samples: list[dict]) -> tuple[torch.Tensor, list]:
    """Padded logits [seq, pos, vocab] and parameter gradients, every sequence unpacked."""
    total = sum(len(s["input_ids"]) for s in samples)
    model.zero_grad()
    logits = []
    for s in samples:
        out = model.forward_sequence(s["input_ids"])
        loss = torch.nn.functional.cross_entropy(out, s["labels"], reduction="sum") / total
        loss.backward()
        logits.append(out.detach())
    padded = torch.zeros(len(samples), max(len(x) for x in logits), VOCAB)
    for i, x in enumerate(logits):
        padded[i, :len(x)] = x
    return padded, [p.grad.clone() for p in model.parameters()]


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-300)) \
        if want.numel() else 0.0


def _one_run(sched: skrull.Scheduler, lengths: list[int], samples: list, ref: tuple,
             dp_rank: int, cp_rank: int, rings: dict, features: dict) -> dict[str, float]:
    plan = sched.plan(lengths)
    rank0 = dp_rank == 0 and cp_rank == 0
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, plan.digest())
    assert len(set(digests)) == 1, digests
    assert len(set(plan.micro_batches_per_dp.tolist())) == 1  # lockstep
    model = _model()
    mbs = st.collate(plan, samples, dp_rank, cp_rank, weight_dtype=torch.float64)
    assert len(mbs) == plan.num_micro_batches == plan.micro_batches_per_dp[dp_rank]
    ref_logits, ref_grads = ref
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    coverage = torch.zeros(int(offsets[-1]), dtype=torch.float64)
    logits_err, loss = 0.0, torch.zeros((), dtype=torch.float64)
    for mb in mbs:
        assert torch.equal(mb.loss_weights, torch.from_numpy(mb.layout.loss_weights))
        if plan.summary.chunked:
            # Chunk passes: the logits of every pass (all kept), then the loss as ChunkFlow's
            # schedule trains it (the first count - K passes recomputed in the backward). Every
            # GPU of the plan does both, so that ring peers run the same exchanges.
            with torch.no_grad():
                logits = model.forward_packed(mb, ring_groups=rings)
            step_loss = model.loss_packed(mb, ring_groups=rings)
            _chunk_features(plan, mb, features)
        else:
            logits = model.forward_packed(mb, ring_groups=rings)
            step_loss = st.packed_loss(logits, mb)
        step_loss.backward()
        loss += step_loss.detach()
        real = mb.seq_ids >= 0
        seq, pos = mb.seq_ids[real], mb.position_ids[real]
        # The one-gather inputs hold the right tokens (the logits check depends on it too).
        assert all(int(mb.input_ids[t]) == int(samples[s]["input_ids"][p]) for t, s, p in zip(
            torch.nonzero(real).flatten().tolist(), seq.tolist(), pos.tolist()))
        logits_err = max(logits_err, _rel(logits.detach()[real], ref_logits[seq, pos]))
        coverage.index_add_(0, torch.from_numpy(offsets[seq.numpy()]) + pos,
                            torch.ones(len(seq), dtype=torch.float64))
        lay = mb.layout
        two_n = 2 * sched.config.cp
        short = [s for s in lay.spans if s["chunk"] >= 0 and lengths[s["seq"]] < two_n]
        features["sharded_shorter_than_2N"] += bool(short)
        features["local_and_sharded_together"] += bool(lay.local_seqs and lay.sharded_seqs)
        features["zero_token_gpu_in_real_micro_batch"] += (lay.tokens == 0
                                                           and not lay.is_empty_micro_batch)
        features["empty_lockstep_micro_batches"] += lay.is_empty_micro_batch
        local = lay.spans[lay.spans["chunk"] < 0]
        sharded = lay.spans[lay.spans["chunk"] >= 0]
        if sched.config.pad_multiple > 1:
            features["padded_local_sequences"] += int((local["pad"] > 0).sum())
            features["sharded_padding_under_pad_multiple"] += int(sharded["pad"].sum())
        features["gathered_tokens"] += int(real.sum())
        sub = [r for r in mb.rings if r.size < sched.config.cp]
        features["subgroup_rings"] += len(sub)
        features["whole_and_subgroup_rings_together"] += bool(sub and len(mb.rings) > len(sub))
    features["dp_rank_without_sequences"] += int(plan.dp_sequences(dp_rank).size == 0)
    features["subgroup_sharded_sequences"] += plan.subgroup_sharded if rank0 else 0
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    dist.all_reduce(coverage)
    dist.all_reduce(loss)
    assert torch.equal(coverage, torch.ones_like(coverage)), "every token exactly once"
    grads = flat.split([p.numel() for p in model.parameters()])
    grad_err = max(_rel(g, r.flatten()) for g, r in zip(grads, ref_grads))
    errs = torch.tensor([logits_err, grad_err], dtype=torch.float64)
    dist.all_reduce(errs, op=dist.ReduceOp.MAX)
    return {"logits": float(errs[0]), "grads": float(errs[1]), "loss": float(loss)}


def _chunk_features(plan: skrull.Plan, mb: st.MicroBatch, features: dict) -> None:
    """What the chunked runs must meet (counted on the CP rank that runs each pass)."""
    c = plan.config
    for p in mb.layout.chunk_passes:
        if p["index"] != 0 or mb.layout.cp_rank != p["first"]:
            continue
        seq = int(p["seq"])
        n = int(p["count"])
        features["chunk_one_gpu" if p["size"] == 1 else "chunk_group"] += 1
        features["chunks_recomputed"] += n > c.chunk_keep
        features["chunks_all_kept"] += n <= c.chunk_keep
        features["chunks_of_one_token"] += c.chunk_size == 1
        features["last_chunk_shorter"] += plan.lengths[seq] % c.chunk_size != 0
        lay = mb.layout
        features["chunked_beside_local_and_sharded"] += bool(
            plan.layout(lay.dp_rank, lay.micro_batch, 0).local_seqs
            + plan.layout(lay.dp_rank, lay.micro_batch, plan.config.cp - 1).local_seqs
            and (plan.kind[(plan.dp_rank == lay.dp_rank)
                           & (plan.micro_batch == lay.micro_batch)] == "sharded").any())


CHUNK_FEATURES = ["chunk_one_gpu", "chunk_group", "chunks_recomputed", "chunks_all_kept",
                  "chunks_of_one_token", "last_chunk_shorter",
                  "chunked_beside_local_and_sharded"]

FEATURES = ["sharded_shorter_than_2N", "local_and_sharded_together",
            "zero_token_gpu_in_real_micro_batch", "empty_lockstep_micro_batches",
            "dp_rank_without_sequences", "padded_local_sequences",
            "sharded_padding_under_pad_multiple", "gathered_tokens", "subgroup_sharded_sequences",
            "subgroup_rings", "whole_and_subgroup_rings_together"]


def run_chunked(rank: int, dp: int, cp: int, rendezvous: str, out_dir: str) -> None:
    """Entry point of one rank for the chunked runs (``chunk_runs``)."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=dp * cp)
    rings = st.cp_ring_groups(dp, cp) if cp > 1 else {}
    dp_rank, cp_rank = divmod(rank, cp)
    features = dict.fromkeys(FEATURES + CHUNK_FEATURES, 0)
    worst = {"logits": 0.0, "grads": 0.0, "loss": 0.0}
    todo = chunk_runs(cp)
    for k, (lengths, kwargs) in enumerate(todo):
        samples = _samples(lengths, seed=100 + k)
        ref_model = _model()
        ref = _reference(ref_model, samples)
        with torch.no_grad():
            ref_loss = float(sum(torch.nn.functional.cross_entropy(
                ref_model.forward_sequence(s["input_ids"]), s["labels"], reduction="sum")
                for s in samples) / sum(lengths))
        sched = skrull.Scheduler(dp, cp, lockstep=True, **kwargs)
        got = _one_run(sched, lengths, samples, ref, dp_rank, cp_rank, rings, features)
        got["loss"] = abs(got["loss"] - ref_loss) / ref_loss
        for key in worst:
            worst[key] = max(worst[key], got[key])
    totals = torch.tensor(list(features.values()), dtype=torch.int64)
    dist.all_reduce(totals)
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"runs": len(todo), "max_rel_err": worst,
                       "features": dict(zip(features, totals.tolist())),
                       "seconds": time.perf_counter() - t0}, f)
    dist.destroy_process_group()


def run(rank: int, dp: int, cp: int, rendezvous: str, out_dir: str) -> None:
    """Entry point of one rank (``torch.multiprocessing.start_processes``)."""
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=dp * cp)
    rings = st.cp_ring_groups(dp, cp)
    dp_rank, cp_rank = divmod(rank, cp)
    features = dict.fromkeys(FEATURES, 0)
    worst = {kind: {"logits": 0.0, "grads": 0.0, "loss": 0.0} for kind in ("unpadded", "padded")}
    references = {}
    for k, lengths in enumerate(all_batches(cp)):
        samples = _samples(lengths, seed=k)
        ref_model = _model()
        ref = _reference(ref_model, samples)
        with torch.no_grad():
            ref_loss = sum(torch.nn.functional.cross_entropy(
                ref_model.forward_sequence(s["input_ids"]), s["labels"], reduction="sum")
                for s in samples) / sum(lengths)
        references[k] = (lengths, samples, ref, float(ref_loss))
    todo = runs(cp)
    for k, policy, padding, multiple, pad_local, subgroups in todo:
        lengths, samples, ref, ref_loss = references[k]
        cost = subgroup_cost_model(cp) if subgroups else None
        sched = skrull.Scheduler(dp, cp, BUCKET, policy=policy, shard_padding=padding,
                                 pad_multiple=multiple, pad_local=pad_local, lockstep=True,
                                 cost_model=cost)
        got = _one_run(sched, lengths, samples, ref, dp_rank, cp_rank, rings, features)
        got["loss"] = abs(got["loss"] - ref_loss) / ref_loss
        kind = worst["padded" if multiple > 1 else "unpadded"]
        for key in kind:
            kind[key] = max(kind[key], got[key])
    totals = torch.tensor(list(features.values()), dtype=torch.int64)
    dist.all_reduce(totals)
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"runs": len(todo), "max_rel_err": worst,
                       "features": dict(zip(features, totals.tolist())),
                       "seconds": time.perf_counter() - t0}, f)
    dist.destroy_process_group()
