"""skrull.torch.attention: the memory-linear kernels against the dense oracle, the schedule
built from the plan alone, and the bad inputs it refuses (``docs/attention.md``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp

import skrull
from skrull.torch.attention import (BACKEND_ENV, BACKENDS, CpAttention, attention_schedule,
                                    local_schedule, pick_backend)
from skrull.torch.attention._schedule import _Builder

import _attention_worker as worker


def _qkv(rows, keys, heads, kv, dim=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, heads, dim, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(keys, kv, dim, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(keys, kv, dim, generator=g, dtype=dtype).requires_grad_()
    return q, k, v


def _run(backend, q, k, v, scale=None):
    (out, lse), = BACKENDS[backend]([(q, k, v)], scale, 0.0)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    return out.detach(), lse, grads


# ---- kernels ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,prefix", [(1, 0), (1, 6), (7, 0), (7, 9), (16, 48), (5, 1)])
@pytest.mark.parametrize("heads,kv", [(2, 2), (4, 2), (4, 1)])
def test_merge_kernel_equals_the_dense_oracle_forward_and_backward(rows, prefix, heads, kv):
    q, k, v = _qkv(rows, prefix + rows, heads, kv, seed=rows * 100 + prefix)
    got, got_lse, got_grads = _run("merge", q, k, v, scale=0.3)
    want, want_lse, want_grads = _run("dense", q, k, v, scale=0.3)
    assert torch.allclose(got, want, rtol=0, atol=1e-13)
    assert torch.allclose(got_lse.reshape(want_lse.shape), want_lse, rtol=0, atol=1e-12)
    for a, b in zip(got_grads, want_grads):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=1e-12)


def test_zigzag_chunks_over_their_prefixes_equal_causal_sdpa_of_the_whole_sequence():
    n, heads, kv = 24, 4, 2
    q, k, v = _qkv(n, n, heads, kv, seed=3)
    chunks = [(0, 6), (18, 24), (6, 12), (12, 18)]   # CP 2 zigzag: ranks' two chunks each
    pairs = [(q[a:b], k[:b], v[:b]) for a, b in chunks]
    outs = [o for o, _ in BACKENDS["merge"](pairs, None, 0.0)]
    got = torch.cat([outs[i] for i in (0, 2, 3, 1)])
    qb, kb, vb = (x.transpose(0, 1)[None] for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, is_causal=True,
                                                            enable_gqa=True)[0].transpose(0, 1)
    assert torch.allclose(got, want, rtol=0, atol=1e-14)
    gq, = torch.autograd.grad(got.square().sum(), q)
    wq, = torch.autograd.grad(want.square().sum(), q)
    assert torch.allclose(gq, wq, rtol=0, atol=1e-13)


def test_float32_merge_is_close_to_the_oracle():
    q, k, v = _qkv(33, 97, 4, 2, seed=5, dtype=torch.float32)
    got, _, got_grads = _run("merge", q, k, v)
    want, _, want_grads = _run("dense", q, k, v)
    assert torch.allclose(got, want, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(got_grads, want_grads))


def test_pick_backend_by_device_with_one_override(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert pick_backend(torch.device("cpu"), torch.float32) == "merge"
    assert pick_backend(torch.device("cpu"), torch.float64, "dense") == "dense"
    monkeypatch.setenv(BACKEND_ENV, "dense")
    assert pick_backend(torch.device("cpu"), torch.float32) == "dense"
    with pytest.raises(ValueError, match="nope"):
        pick_backend(torch.device("cpu"), torch.float32, "nope")


def test_merge_refuses_dropout_instead_of_ignoring_it():
    q, k, v = _qkv(4, 4, 2, 2)
    with pytest.raises(NotImplementedError, match="dropout"):
        BACKENDS["merge"]([(q, k, v)], None, 0.1)


def test_local_slots_attend_within_themselves_padding_rows_get_zeros():
    plan = skrull.Scheduler(1, 1, 64, pad_multiple=4, pad_local=True).plan([5, 1, 3])
    s = attention_schedule(plan, 0, 0, 0)
    assert [(a.start, a.stop, a.real) for a in s.local] == [(0, 8, 5), (8, 12, 1), (12, 16, 3)]
    q, k, v = _qkv(s.tokens, s.tokens, 2, 1, seed=9)
    out = CpAttention(s, backend="merge")(q, k, v)
    ref = CpAttention(s, backend="dense")(q, k, v)
    assert torch.allclose(out, ref, rtol=0, atol=1e-13)
    for a in s.local:
        assert not out[a.start + a.real:a.stop].any()     # padding rows: zeros
        alone = BACKENDS["dense"]([(q[a.start:a.start + a.real], k[a.start:a.start + a.real],
                                    v[a.start:a.start + a.real])], None, 0.0)[0][0]
        assert torch.allclose(out[a.start:a.start + a.real], alone, rtol=0, atol=1e-13)


@pytest.mark.parametrize("heads,kv", [(2, 2), (4, 1)])
def test_packed_merge_batches_short_pairs_and_runs_long_ones_alone_like_the_oracle(heads, kv):
    # Pairs of 1 to 300 keys, with and without a prefix, from the buffer and from two
    # sources: some batched (<= BATCH_KEYS keys, several size classes), some one by one.
    from skrull.torch.attention._merge import BATCH_KEYS, PairPlan
    g = torch.Generator().manual_seed(11)
    tokens, rows_a, rows_b = 40 + 3 + 200 + 7, 90, 320
    q = torch.randn(tokens + 5, heads, 8, generator=g, dtype=torch.float64).requires_grad_()
    k, v = (torch.randn(tokens + 5, kv, 8, generator=g, dtype=torch.float64).requires_grad_()
            for _ in range(2))
    srcs = [torch.randn(n, 2 * kv, 8, generator=g, dtype=torch.float64).requires_grad_()
            for n in (rows_a, rows_b)]
    specs = [(0, 40, -1, 0, 40), (40, 3, 0, 10, 30), (43, 200, 1, 0, 300), (243, 7, 0, 0, 7),
             (250, 1, 1, 300, 301)]   # rows 251..255 belong to no pair: zeros
    plan = PairPlan(specs, tokens + 5, [rows_a, rows_b])
    assert len(plan.long) == 1 and {kmax for kmax, _, _ in plan.batches} == {16, 32, 64}
    assert all(sp[4] - sp[3] <= BATCH_KEYS for sp in specs if sp not in plan.long)
    w = torch.linspace(-1, 1, q.numel(), dtype=q.dtype).reshape(q.shape)
    got = plan(0.4, q, k, v, tuple(srcs))
    got_grads = torch.autograd.grad((got * w).sum(), (q, k, v, *srcs))

    def oracle():
        out = torch.zeros_like(q)
        for row, rows, src, k0, k1 in specs:
            ks, vs = (k, v) if src < 0 else (srcs[src][:, :kv], srcs[src][:, kv:])
            (o, _), = BACKENDS["dense"]([(q[row:row + rows], ks[k0:k1], vs[k0:k1])], 0.4, 0.0)
            out = out.index_add(0, torch.arange(row, row + rows), o)
        return out
    want = oracle()
    want_grads = torch.autograd.grad((want * w).sum(), (q, k, v, *srcs))
    assert torch.allclose(got, want, rtol=0, atol=1e-13)
    assert not got[251:].any()
    for a, b in zip(got_grads, want_grads):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)


def test_the_backend_is_picked_once_not_on_every_call(monkeypatch):
    import skrull.torch.attention._attend as attend
    picks = []
    real = attend.pick_backend
    monkeypatch.setattr(attend, "pick_backend", lambda *a: picks.append(a) or real(*a))
    attention = CpAttention(local_schedule(((0, 3),), 3))
    q, k, v = _qkv(3, 3, 2, 1)
    for _ in range(3):   # one call per layer
        attention(q, k, v)
    assert len(picks) == 1


# ---- the schedule, from the plan alone ---------------------------------------------------------

@pytest.mark.parametrize("padding", ["none", "zigzag"])
@pytest.mark.parametrize("policy", ["skrull", "balanced", "deepspeed", "packed"])
def test_schedule_tiles_every_sequence_once_and_peers_agree(policy, padding):
    lengths = [3, 70, 1, 18, 9, 33, 2, 50]
    plan = skrull.Scheduler(2, 4, 32, policy=policy, shard_padding=padding,
                            lockstep=True).plan(lengths)
    for dp in range(2):
        for mb in range(plan.num_micro_batches):
            per_rank = [attention_schedule(plan, dp, mb, c) for c in range(4)]
            assert len({s.fingerprint for s in per_rank}) == 1
            rings = {}
            for c, s in enumerate(per_rank):
                assert s.tokens == plan.layout(dp, mb, c).tokens
                for r in s.rings:
                    rings.setdefault((r.first, r.size), []).append(r)
                    for seq in r.sequences:     # every position exactly once
                        assert sorted(seq.keys.tolist()) == sorted(set(seq.keys.tolist()))
                        assert len(seq.keys) == lengths[seq.seq]
            for (first, size), members in rings.items():
                assert len(members) == size
                assert len({m.member_rows for m in members}) == 1
                assert len({tuple(x.seq for x in m.sequences) for m in members}) == 1
                seq, pos = members[0].gathered_metadata()
                for m in members[1:]:
                    s2, p2 = m.gathered_metadata()
                    assert np.array_equal(seq, s2) and np.array_equal(pos, p2)


def test_fingerprint_names_the_plan_and_the_micro_batch():
    a = skrull.Scheduler(1, 2, 32, policy="deepspeed").plan([40, 24])
    b = skrull.Scheduler(1, 2, 32, policy="deepspeed").plan([40, 25])
    assert attention_schedule(a, 0, 0, 0).fingerprint != attention_schedule(b, 0, 0, 0).fingerprint
    assert attention_schedule(a, 0, 0, 0).fingerprint != attention_schedule(a, 0, 1, 0).fingerprint
    assert attention_schedule(a, 0, 0, 0).fingerprint == attention_schedule(a, 0, 0, 1).fingerprint


def _with_spans(lay, edit):
    """A copy of ``lay`` whose spans went through ``edit`` (a layout a buggy front end made)."""
    import copy
    spans = lay.spans.copy()
    edit(spans)
    other = copy.copy(lay)
    other.spans = spans
    return other


def _shift_last(spans):
    i = int(np.argmax(spans["start"] + spans["len"]))
    spans["start"][i] += 3


def test_schedule_refuses_a_chunk_that_crosses_its_sequence_end(monkeypatch):
    plan = skrull.Scheduler(1, 2, 32, policy="deepspeed", shard_padding="zigzag").plan([40])
    real = _Builder.layout

    def crossed(self, cp_rank):
        lay = real(self, cp_rank)
        if cp_rank == 0:   # the span that ends the sequence now runs 3 past position 40
            return _with_spans(lay, _shift_last)
        return lay
    monkeypatch.setattr(_Builder, "layout", crossed)
    with pytest.raises(ValueError, match="past the sequence's end"):
        attention_schedule(plan, 0, 0, 0)


def test_schedule_refuses_positions_held_twice(monkeypatch):
    plan = skrull.Scheduler(1, 2, 32, policy="deepspeed").plan([40])
    real = _Builder.layout

    def doubled(self, cp_rank):
        lay = real(self, cp_rank)
        if cp_rank == 1:
            return _with_spans(lay, lambda s: s["start"].__setitem__(slice(None), 0))
        return lay
    monkeypatch.setattr(_Builder, "layout", doubled)
    with pytest.raises(ValueError, match="held twice"):
        attention_schedule(plan, 0, 0, 0)


def test_attention_refuses_a_buffer_of_another_size():
    s = local_schedule(((0, 3), (3, 5)), 5)
    q, k, v = _qkv(6, 6, 2, 1)
    with pytest.raises(ValueError, match="schedule of 5 rows"):
        CpAttention(s)(q, k, v)
    with pytest.raises(ValueError, match="belong to no sequence"):
        CpAttention(local_schedule(((0, 3), (4, 5)), 5))


def test_collate_refuses_a_sequence_missing_from_the_batch():
    from skrull.hf import collate_gpu_buffer
    plan = skrull.Scheduler(1, 2, 32, policy="deepspeed").plan([40, 8])
    with pytest.raises(ValueError, match="sequence 1 of the plan is missing"):
        collate_gpu_buffer(plan.layout(0, 0, 0) if 1 in plan.layout(0, 0, 0).spans["seq"]
                           else plan.layout(0, 1, 0), {0: {"input_ids": list(range(40))}},
                           plan=plan)


# ---- across processes (gloo) ------------------------------------------------------------------

def _spawn(check, tmp_path):
    rendezvous = "file://" + str(tmp_path / "rendezvous")
    tmp.start_processes(worker.run, args=(check, rendezvous, str(tmp_path)), nprocs=2,
                        start_method="fork")
    with open(os.path.join(tmp_path, check + ".json")) as f:
        return json.load(f)


def test_kv_from_a_different_plan_is_refused_on_every_rank(tmp_path):
    got = _spawn("different_plan", tmp_path)
    assert all("K/V from a different plan" in r["error"] for r in got), got


def test_a_process_group_that_does_not_match_the_ring_is_refused(tmp_path):
    got = _spawn("wrong_group", tmp_path)
    for r in got:
        size, missing = r["errors"]
        assert "its process group has 1 ranks, the plan's ring 2" in size
        assert "no process group given" in missing


def test_gpu_without_queries_joins_the_backward(tmp_path):
    got = _spawn("idle_rank", tmp_path)
    assert [r["rows"] for r in got] == [1, 0]
    assert got[1]["grads"] == [0, 0, 0] and got[0]["grads"] == [1, 1, 1]


def test_the_exchange_backward_hands_each_rank_its_rows_without_an_all_reduce(tmp_path):
    # Regression: the backward all-reduced the whole exchanged K/V gradient; each rank needs
    # its own rows' only (a reduce-scatter, on gloo an all-to-all and a sum).
    got = _spawn("no_all_reduce", tmp_path)
    for r in got:
        assert r["all_reduce_calls"] == 0 and r["max_err"] < 1e-13, got


def test_a_32k_token_sequence_at_cp2_runs_in_memory_linear_in_its_rows(tmp_path):
    # A dense rows x sequence mask alone would be 16K x 32K = 512 MiB per rank (bool), its
    # float scores 2 GiB per head; the merge path holds the exchanged K/V and per-block state.
    got = _spawn("long_sequence", tmp_path)
    assert [r["rows"] for r in got] == [16384, 16384]
    assert max(r["peak_growth_mb"] for r in got) < 128, got
