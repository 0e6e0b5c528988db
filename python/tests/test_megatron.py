"""``skrull.megatron.SkrullPackingScheduler`` keeps the contract Megatron's packing ``run()``
relies on, without importing Megatron: every id placed once (one micro-batch of one DP rank),
``dp * cp`` lists per row, an id on one CP rank, on all, or on an aligned sub-group, no empty
list, the token budget per GPU, and a row count that is a multiple of the virtual-pipeline
group. With a stand-in ``DpBalancedScheduler`` module it subclasses it."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest

import skrull
import skrull.megatron as sm


def _check_contract(groups, pairs, dp, cp, budget, vpp, lengths_padded, allow_empty=False):
    assert groups and len(groups) % (vpp or 1) == 0
    where = {}
    for m, row in enumerate(groups):
        assert len(row) == dp * cp
        for g, ids in enumerate(row):
            assert ids or allow_empty, f"empty list at micro-batch {m}, GPU {g}"
            for i in ids:
                where.setdefault(i, set()).add((m, g))
    assert sorted(where) == sorted(i for i, _ in pairs)  # every id, none invented
    load = {}
    for i, gpus in where.items():
        rows = {m for m, _ in gpus}
        dps = {g // cp for _, g in gpus}
        assert len(rows) == 1 and len(dps) == 1, f"id {i} in two micro-batches or DP ranks"
        ranks = sorted(g % cp for _, g in gpus)
        size, first = len(ranks), ranks[0]
        assert ranks == list(range(first, first + size))
        assert size in (1, cp) or (cp % size == 0 and first % size == 0 and size & (size - 1)
                                   == 0), f"id {i} on CP ranks {ranks}"
        per_gpu = lengths_padded[i] // size if size > 1 else dict(pairs)[i]
        for m, g in gpus:
            load[(m, g)] = load.get((m, g), 0) + per_gpu
    assert max(load.values()) <= budget


def _padded(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@pytest.mark.parametrize("dp,cp,vpp,policy", [(2, 2, None, "packed"), (2, 2, 4, "packed"),
                                              (1, 4, 3, "packed"), (4, 1, 2, "balanced"),
                                              (2, 4, None, "deepspeed")])
def test_groups_keep_the_contract_of_megatron_run(dp, cp, vpp, policy):
    budget = 128
    rng = np.random.default_rng(dp * 10 + cp)
    sched = sm.SkrullPackingScheduler(budget, cp, dp, vpp, policy=policy, max_num_seqs=64)
    assert sched.extra == {"max_num_seqs": 64}
    assert "tokens" in sched.get_required_sample_keys()
    for batch in range(4):
        lengths = rng.integers(4, budget * cp + 1, 40).tolist()
        ids = [1000 + 3 * k for k in range(len(lengths))]  # ids, not positions
        pairs = list(zip(ids, lengths))
        groups = sched.get_groups_and_subsamples(pairs)
        padded = {i: _padded(n, 2 * cp) for i, n in pairs}
        _check_contract(groups, pairs, dp, cp, budget, vpp, padded)
        plan = sched.last_plan
        assert plan is not None and len(groups) == plan.num_micro_batches
        if policy in ("packed", "deepspeed") and cp > 1:
            assert (plan.cp_rank == skrull.SHARDED).all()  # what Megatron's fixed CP needs


def test_local_placements_under_cp_are_refused_unless_allowed():
    # balanced at CP 4 places short sequences whole on single CP ranks: Megatron's fixed-CP
    # path would zigzag them over ranks that lack them, or meet an empty list.
    def lengths(seed):
        return list(enumerate(np.random.default_rng(seed).integers(4, 513, 40).tolist()))
    with pytest.raises(ValueError, match="allow_local=True"):
        sm.SkrullPackingScheduler(128, 4, 1, None, policy="balanced").get_groups_and_subsamples(
            lengths(0))
    allowed = sm.SkrullPackingScheduler(128, 4, 1, None, policy="balanced", allow_local=True)
    with pytest.raises(ValueError, match="without a sequence"):
        allowed.get_groups_and_subsamples(lengths(2))
    pairs = lengths(0)
    groups = allowed.get_groups_and_subsamples(pairs)
    _check_contract(groups, pairs, 1, 4, 128, None, {i: _padded(n, 8) for i, n in pairs})
    assert (allowed.last_plan.cp_size == 1).any()  # local ids, each on its one CP rank


def test_row_count_rounds_up_to_the_virtual_pipeline_group():
    lengths = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33]  # 2 per micro-batch
    plain = sm.SkrullPackingScheduler(64, 1, 1, None, policy="packed")
    rounded = sm.SkrullPackingScheduler(64, 1, 1, 5, policy="packed")
    pairs = list(enumerate(lengths))
    n = len(plain.get_groups_and_subsamples(pairs))
    got = rounded.get_groups_and_subsamples(pairs)
    assert n % 5 and len(got) == -(-n // 5) * 5
    _check_contract(got, pairs, 1, 1, 64, 5, dict(pairs))


def test_run_needs_megatron_and_says_so():
    if sm._Base is not object:
        pytest.skip("Megatron is installed")
    with pytest.raises(NotImplementedError, match="Megatron-LM main"):
        sm.SkrullPackingScheduler(64, 1, 1).run()


def test_subclasses_dp_balanced_scheduler_when_megatron_is_importable(monkeypatch):
    calls = []

    class DpBalancedScheduler:  # the interface on Megatron-LM main
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                     microbatch_group_size_per_vp_stage):
            calls.append((max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                          microbatch_group_size_per_vp_stage))

        def get_required_sample_keys(self):
            return ["stand-in"]

        def run(self, *args):
            return "ran"

    module = types.ModuleType("megatron.core.datasets.data_schedule")
    module.DpBalancedScheduler = DpBalancedScheduler
    for name in ("megatron", "megatron.core", "megatron.core.datasets"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    try:
        patched = importlib.reload(sm)
        sched = patched.SkrullPackingScheduler(96, 2, 2, None, max_num_seqs=8)
        assert isinstance(sched, DpBalancedScheduler) and calls == [(96, 2, 2, None)]
        assert sched.get_required_sample_keys() == ["stand-in"] and sched.run() == "ran"
        _check_contract(sched.get_groups_and_subsamples([(i, 50) for i in range(12)]),
                        [(i, 50) for i in range(12)], 2, 2, 96, None,
                        {i: 52 for i in range(12)})
    finally:
        monkeypatch.undo()
        importlib.reload(sm)
