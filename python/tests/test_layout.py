"""Per-GPU layouts through the binding (docs/layout.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import skrull

#: The policies whose plans the Python Layout lays out: not chunkflow, whose chunked
#: sequences need chunk passes the Python Layout does not expose yet (NotImplementedError,
#: tested in test_plan.py).
LAYOUT_POLICIES = [p for p in skrull.POLICIES if p != "chunkflow"]


def _spans(lay: skrull.Layout) -> list[tuple[int, int, int]]:
    return [(s["start"], s["len"], s["pad"]) for s in lay.spans]


def test_zigzag_example_of_the_layout_guide():
    plan = skrull.Scheduler(dp=1, cp=4, bucket_tokens=4, shard_padding="zigzag").plan([10])
    got = [_spans(plan.layout(0, 0, r)) for r in range(4)]
    assert got == [[(0, 2, 0), (14, 0, 2)], [(2, 2, 0), (12, 0, 2)], [(4, 2, 0), (10, 0, 2)],
                   [(6, 2, 0), (8, 2, 0)]]
    lay = plan.layout(0, 0, 0)
    assert lay.sharded_cu_seqlens.tolist() == [0, 10]
    assert lay.sharded_cu_seqlens_padded.tolist() == [0, 16]
    assert lay.rank_cu_seqlens.tolist() == [0, 4]
    assert lay.positions.tolist() == [0, 1, 14, 15]
    assert lay.token_seq.tolist() == [0, 0, -1, -1] and lay.pad_tokens == 2
    assert lay.loss_weights.tolist() == [0.1, 0.1, 0.0, 0.0]


def test_unpadded_example_of_the_layout_guide():
    plan = skrull.Scheduler(dp=1, cp=4, bucket_tokens=3).plan([10])
    assert [plan.layout(0, 0, r).positions.tolist() for r in range(4)] == [
        [0, 1, 9], [2, 3, 8], [4, 7], [5, 6]]
    assert [plan.layout(0, 0, r).rank_cu_seqlens.tolist() for r in range(4)] == [
        [0, 3], [0, 3], [0, 2], [0, 2]]


def _padded(length: int, cp: int, m: int, zigzag: bool, sharded: bool, pad_local: bool) -> int:
    """docs/layout.md, "Padding: the exact rule"."""
    m = max(m, 1)
    if not sharded:
        return m * -(-length // m) if pad_local else length
    if cp == 1:
        return m * -(-length // m)
    if zigzag or m > 1:
        unit = math.lcm(2 * cp, m)
        return unit * -(-length // unit)
    return length


def _check_gpu(plan: skrull.Plan, lay: skrull.Layout, d: int, m: int, r: int) -> None:
    """Invariants of one GPU's layout that do not depend on the other GPUs."""
    assert (lay.dp_rank, lay.micro_batch, lay.cp_rank) == (d, m, r)
    assert lay.tokens == lay.local_tokens + lay.sharded_tokens == len(lay.positions)
    assert len(lay.gather_index) == lay.tokens
    assert lay.tokens <= lay.charged_tokens <= plan.config.bucket_tokens or lay.tokens == 0
    if not lay.is_empty_micro_batch:
        assert lay.charged_tokens == plan.rank_tokens[lay.micro_batch_global, r]
    # Spans tile the buffer in order, and are the position-id ranges.
    sizes = lay.spans["len"] + lay.spans["pad"]
    assert (lay.spans["offset"] == np.concatenate([[0], np.cumsum(sizes)[:-1]])).all()
    for s in lay.spans:
        seg = lay.positions[s["offset"]:s["offset"] + s["len"] + s["pad"]]
        assert seg.tolist() == list(range(s["start"], s["start"] + len(seg)))
    local = lay.spans[lay.spans["chunk"] < 0]
    assert lay.local_cu_seqlens.tolist() == [0] + np.cumsum(local["len"]).tolist()
    assert lay.local_cu_seqlens_padded.tolist() == \
        [0] + np.cumsum(local["len"] + local["pad"]).tolist()
    assert lay.local_cu_seqlens_padded[-1] == lay.local_tokens
    assert (lay.token_seq[lay.is_real] >= 0).all()
    assert (lay.token_seq[~lay.is_real] == -1).all()
    assert lay.is_real.sum() == lay.loss_tokens == lay.tokens - lay.pad_tokens
    assert ((lay.gather_index >= 0) == lay.is_real).all()  # -1 exactly on padding


@pytest.mark.parametrize("policy", LAYOUT_POLICIES)
@pytest.mark.parametrize("padding", ["none", "zigzag"])
@pytest.mark.parametrize("lockstep", [False, True])
def test_all_gpus_together_hold_every_token_once(policy, padding, lockstep):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 120, 40)
    lengths[:3] = [1, 3, 7]  # shorter than 2N: empty zigzag chunks
    dp, cp = 3, 4
    plan = skrull.Scheduler(dp, cp, 64, policy=policy, shard_padding=padding,
                            lockstep=lockstep).plan(lengths)
    if lockstep:
        assert len(set(plan.micro_batches_per_dp.tolist())) == 1
    count = [np.zeros(n, int) for n in lengths]
    weight = 0.0
    for d in range(dp):
        own = (plan.micro_batch_table["dp_rank"] == d).sum()
        for r in range(cp):
            layouts = plan.rank_layouts(d, r)
            assert len(layouts) == plan.micro_batches_per_dp[d]
            for m, lay in enumerate(layouts):
                _check_gpu(plan, lay, d, m, r)
                assert lay.is_empty_micro_batch == (m >= own)
                for s in lay.spans:
                    count[s["seq"]][s["start"]:s["start"] + s["len"]] += 1
                weight += lay.loss_weights.sum()
    assert all((c == 1).all() for c in count)
    assert weight == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("dp,cp", [(1, 1), (2, 2), (3, 4), (2, 8)])
@pytest.mark.parametrize("pad_multiple,pad_local", [(0, False), (16, False), (16, True),
                                                    (6, True), (1, True)])
@pytest.mark.parametrize("policy", ["skrull", "packed", "balanced"])
def test_the_gather_index_covers_each_micro_batch_once(dp, cp, pad_multiple, pad_local, policy):
    rng = np.random.default_rng(dp * 100 + cp)
    lengths = rng.integers(1, 90, 30)
    lengths[:2] = [1, 5]
    plan = skrull.Scheduler(dp, cp, 96, policy=policy, shard_padding="zigzag",
                            pad_multiple=pad_multiple, pad_local=pad_local,
                            lockstep=True).plan(lengths)
    total = 0
    for d in range(dp):
        seqs = plan.dp_sequences(d)
        offsets = plan.dp_stream_offsets(d)
        assert offsets[-1] == lengths[seqs].sum()
        start_of = dict(zip(seqs.tolist(), offsets[:-1].tolist()))
        seen = np.zeros(offsets[-1], int)
        cursor = 0  # micro-batches take consecutive ranges of the stream, in order
        for m in range(plan.micro_batches_per_dp[d]):
            members = plan.members_of(d, m)
            stop = cursor + int(lengths[members].sum())
            got = []
            for r in range(cp):
                lay = plan.layout(d, m, r)
                _check_gpu(plan, lay, d, m, r)
                real = lay.is_real
                want = np.array([start_of[s] for s in lay.token_seq[real]], np.int64) + \
                    lay.positions[real]
                assert (lay.gather_index[real] == want).all()
                got.append(lay.gather_index[real])
            got = np.concatenate(got)
            assert ((got >= cursor) & (got < stop)).all()
            np.add.at(seen, got, 1)
            cursor = stop
        assert cursor == offsets[-1] and (seen == 1).all()  # every stream token exactly once
        total += cursor
    assert total == lengths.sum()


@pytest.mark.parametrize("cp", [1, 2, 4])
@pytest.mark.parametrize("pad_multiple", [0, 3, 8, 16])
@pytest.mark.parametrize("pad_local", [False, True])
@pytest.mark.parametrize("padding", ["none", "zigzag"])
def test_pad_multiple_spans_follow_the_padding_rule(cp, pad_multiple, pad_local, padding):
    rng = np.random.default_rng(cp + pad_multiple)
    lengths = rng.integers(1, 70 if cp == 1 else 150, 24)  # > 80 tokens: must be sharded
    lengths[:3] = [1, 2, 3]
    plan = skrull.Scheduler(2, cp, 80, policy="skrull", shard_padding=padding,
                            pad_multiple=pad_multiple, pad_local=pad_local).plan(lengths)
    padded = np.zeros(len(lengths), int)
    for d in range(2):
        for r in range(cp):
            for m, lay in enumerate(plan.rank_layouts(d, r)):
                _check_gpu(plan, lay, d, m, r)
                for s in lay.spans:
                    padded[s["seq"]] += s["len"] + s["pad"]
                    assert s["pad"] == 0 or s["start"] + s["len"] == lengths[s["seq"]] or \
                        s["len"] == 0  # padding only after the sequence's last real token
    for i, n in enumerate(lengths.tolist()):
        sharded = plan.cp_rank[i] < 0
        want = _padded(n, cp, pad_multiple, padding == "zigzag", sharded, pad_local)
        assert padded[i] == want, (i, n, sharded)
        if not sharded:
            assert plan.tokens_per_gpu[i] == want  # the budget charges the padding
        elif cp == 1 or padding == "zigzag" or pad_multiple > 1:
            assert plan.tokens_per_gpu[i] == want // cp  # every rank carries P / N
        else:
            assert plan.tokens_per_gpu[i] == -(-n // cp)
    if cp > 1:
        assert 0 < plan.summary.sharded < len(lengths)  # both kinds were checked


def test_pad_local_pads_local_sequences_and_offsets_follow():
    plan = skrull.Scheduler(1, 2, 64, policy="skrull", pad_multiple=8, pad_local=True).plan(
        [3, 13, 9])
    assert (plan.cp_rank >= 0).all()  # all local
    by_rank = {r: plan.layout(0, 0, r) for r in range(2)}
    for lay in by_rank.values():
        seqs = lay.spans["seq"].tolist()
        lens = [int(plan.lengths[s]) for s in seqs]
        assert lay.local_cu_seqlens.tolist() == [0] + np.cumsum(lens).tolist()
        assert lay.local_cu_seqlens_padded.tolist() == \
            [0] + np.cumsum([-(-n // 8) * 8 for n in lens]).tolist()
        assert lay.local_max_seqlen == max(lens, default=0)
    assert sorted(plan.tokens_per_gpu.tolist()) == [8, 16, 16]


def test_lockstep_empty_micro_batches_have_valid_empty_layouts():
    plan = skrull.Scheduler(dp=3, cp=2, bucket_tokens=16, policy="deepspeed",
                            lockstep=True).plan([5, 6, 7, 8])
    assert plan.micro_batches_per_dp.tolist() == [2, 2, 2]
    own = [int((plan.micro_batch_table["dp_rank"] == d).sum()) for d in range(3)]
    assert sorted(own) == [1, 1, 2] and plan.summary.micro_batches == 4
    for d in range(3):
        for m in range(own[d], 2):
            assert plan.members_of(d, m).size == 0
            for r in range(2):
                lay = plan.layout(d, m, r)
                assert lay.micro_batch_global == skrull.NO_MICRO_BATCH
                assert lay.is_empty_micro_batch and lay.tokens == lay.charged_tokens == 0
                assert len(lay.spans) == len(lay.positions) == len(lay.gather_index) == 0
                for a in (lay.local_cu_seqlens, lay.local_cu_seqlens_padded,
                          lay.sharded_cu_seqlens, lay.sharded_cu_seqlens_padded,
                          lay.rank_cu_seqlens):
                    assert a.tolist() == [0]
                assert lay.global_tokens == 26 and lay.micro_batch_tokens == 0
        with pytest.raises(skrull.LayoutError) as err:
            plan.layout(d, 2, 0)
        assert (err.value.index, err.value.value, err.value.limit) == (d, 2, 2)


@pytest.mark.parametrize("lockstep", [False, True])
def test_a_dp_rank_without_sequences(lockstep):
    plan = skrull.Scheduler(dp=3, cp=2, bucket_tokens=16, lockstep=lockstep).plan([5])
    empty = [d for d in range(3) if (plan.micro_batch_table["dp_rank"] == d).sum() == 0]
    assert len(empty) == 2
    for d in empty:
        assert plan.dp_sequences(d).size == 0 and plan.dp_stream_offsets(d).tolist() == [0]
        if lockstep:  # it runs the other ranks' count, every one empty
            (lay,) = plan.rank_layouts(d, 1)
            assert lay.is_empty_micro_batch and lay.tokens == 0 and lay.global_tokens == 5
            assert lay.local_cu_seqlens.tolist() == [0] == lay.rank_cu_seqlens.tolist()
        else:  # it runs none
            assert plan.micro_batches_per_dp[d] == 0 and plan.rank_layouts(d, 1) == []
            with pytest.raises(skrull.LayoutError, match="NO_SUCH_GPU"):
                plan.layout(d, 0, 1)


@pytest.mark.parametrize("padding,pad_multiple", [("none", 0), ("zigzag", 0), ("none", 16)])
@pytest.mark.parametrize("lockstep", [False, True])
def test_subgroup_rings_tile_each_sequence_over_its_group(padding, pad_multiple, lockstep):
    # CP 8 over 2-GPU nodes: balanced keeps many rings inside a node (sub-groups of 2 and 4).
    m = skrull.CostModel("h100", gpus_per_node=2)
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 4000, 48)
    lengths[:4] = [3000, 2500, 7, 1]
    dp, cp = 2, 8
    plan = skrull.Scheduler(dp, cp, 1024, cost_model=m, shard_padding=padding,
                            pad_multiple=pad_multiple, lockstep=lockstep).plan(lengths)
    sub = (plan.cp_size > 1) & (plan.cp_size < cp)
    assert sub.sum() > 0 and plan.subgroup_sharded == sub.sum()
    assert set(plan.cp_size[sub].tolist()) == {2, 4}
    count = [np.zeros(n, int) for n in lengths]
    holders: dict[int, set[int]] = {}
    rings_seen = set()
    for d in range(dp):
        for r in range(cp):
            for mb, lay in enumerate(plan.rank_layouts(d, r)):
                _check_gpu(plan, lay, d, mb, r)
                rings = lay.ring_views()
                assert sum(g.seqs for g in rings) == lay.sharded_seqs
                assert [g.size for g in rings] == sorted((g.size for g in rings), reverse=True)
                assert len({(g.first, g.size) for g in rings}) == len(rings) <= skrull.MAX_RINGS
                at = lay.local_tokens
                for g in rings:
                    assert g.first <= r < g.first + g.size and g.first % g.size == 0
                    assert g.start == at and g.stop >= g.start
                    at = g.stop
                    assert g.cu_seqlens[0] == g.rank_cu_seqlens[0] == 0
                    assert g.rank_cu_seqlens[-1] == g.stop - g.start
                    assert len(g.spans) == 2 * g.seqs
                    seqs = g.spans["seq"][::2]
                    assert (plan.cp_first[seqs] == g.first).all()
                    assert (plan.cp_size[seqs] == g.size).all()
                    assert g.cu_seqlens.tolist() == [0] + np.cumsum(lengths[seqs]).tolist()
                    k = r - g.first  # the zigzag chunks of this rank within its group
                    assert (g.spans["chunk"][::2] == k).all()
                    assert (g.spans["chunk"][1::2] == 2 * g.size - 1 - k).all()
                    unit = 2 * g.size if padding == "zigzag" else 1
                    unit = math.lcm(unit, pad_multiple) if pad_multiple else unit
                    assert (np.diff(g.cu_seqlens_padded) % unit == 0).all()
                    rings_seen.add(g.size)
                assert at == lay.tokens
                for s in lay.spans:
                    count[s["seq"]][s["start"]:s["start"] + s["len"]] += 1
                    holders.setdefault(int(s["seq"]), set()).add(r)
    assert all((c == 1).all() for c in count)  # every token exactly once, over all GPUs
    for i in np.flatnonzero(plan.cp_size > 1):
        first, size = int(plan.cp_first[i]), int(plan.cp_size[i])
        assert holders[int(i)] == set(range(first, first + size))
    assert {2, 4} <= rings_seen
    # Megatron's sample_id_groups list a sub-group's sequence on its group's ranks only.
    where: dict[int, set[int]] = {}
    for row in plan.to_megatron_groups():
        for gpu, members in enumerate(row):
            for s in members:
                where.setdefault(s, set()).add(gpu)
    for i in range(len(lengths)):
        d, first, size = int(plan.dp_rank[i]), int(plan.cp_first[i]), int(plan.cp_size[i])
        assert where[i] == {d * cp + k for k in range(first, first + size)}


def test_without_subgroups_a_plan_shards_over_the_whole_group_only():
    m = skrull.CostModel("h100", gpus_per_node=2)
    lengths = np.random.default_rng(3).integers(1, 4000, 48)
    plan = skrull.Scheduler(2, 8, 1024, cost_model=m, subgroups=False).plan(lengths)
    assert plan.subgroup_sharded == 0 and set(plan.cp_size.tolist()) <= {1, 8}
    assert (plan.cp_first[plan.cp_size == 1] == plan.cp_rank[plan.cp_size == 1]).all()
    for d in range(2):
        for r in range(8):
            for lay in plan.rank_layouts(d, r):
                assert len(lay.rings) <= 1
                assert all((g.first, g.size) == (0, 8) for g in lay.ring_views())


def test_subgroups_is_a_flag():
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(2, 8, 1024, subgroups=2)
    assert err.value.status == "INVALID_ENUM"
    assert skrull.Scheduler(2, 8, 1024, subgroups=0).config.subgroups is False
