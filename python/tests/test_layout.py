"""Per-GPU layouts through the binding (docs/layout.md)."""

from __future__ import annotations

import numpy as np
import pytest

import skrull


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


@pytest.mark.parametrize("policy", list(skrull.POLICIES))
@pytest.mark.parametrize("padding", ["none", "zigzag"])
def test_all_gpus_together_hold_every_token_once(policy, padding):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 120, 40)
    lengths[:3] = [1, 3, 7]  # shorter than 2N: empty zigzag chunks
    dp, cp = 3, 4
    plan = skrull.Scheduler(dp, cp, 64, policy=policy, shard_padding=padding).plan(lengths)
    count = [np.zeros(n, int) for n in lengths]
    weight = 0.0
    for d in range(dp):
        for r in range(cp):
            layouts = plan.rank_layouts(d, r)
            assert len(layouts) == plan.num_micro_batches
            for m, lay in enumerate(layouts):
                assert (lay.dp_rank, lay.micro_batch, lay.cp_rank) == (d, m, r)
                assert lay.tokens == lay.local_tokens + lay.sharded_tokens == len(lay.positions)
                assert lay.is_padding_micro_batch == (m >= plan.micro_batches_per_dp[d])
                if not lay.is_padding_micro_batch:
                    assert lay.charged_tokens == plan.rank_tokens[lay.micro_batch_global, r]
                    assert lay.tokens <= lay.charged_tokens <= 64
                # Spans tile the buffer in order, and are the position-id ranges.
                sizes = lay.spans["len"] + lay.spans["pad"]
                assert (lay.spans["offset"] == np.concatenate([[0], np.cumsum(sizes)[:-1]])).all()
                for s in lay.spans:
                    seg = lay.positions[s["offset"]:s["offset"] + s["len"] + s["pad"]]
                    assert seg.tolist() == list(range(s["start"], s["start"] + len(seg)))
                    count[s["seq"]][s["start"]:s["start"] + s["len"]] += 1
                local = lay.spans[lay.spans["chunk"] < 0]
                assert lay.local_cu_seqlens.tolist() == [0] + np.cumsum(local["len"]).tolist()
                assert (lay.token_seq[lay.is_real] >= 0).all()
                assert (lay.token_seq[~lay.is_real] == -1).all()
                assert lay.is_real.sum() == lay.loss_tokens
                weight += lay.loss_weights.sum()
    assert all((c == 1).all() for c in count)
    assert weight == pytest.approx(1.0, rel=1e-12)


def test_a_dp_rank_without_sequences_gets_only_empty_micro_batches():
    plan = skrull.Scheduler(dp=3, cp=2, bucket_tokens=16).plan([5])
    empty = [d for d in range(3) if plan.micro_batches_per_dp[d] == 0]
    assert len(empty) == 2
    for d in empty:
        (lay,) = plan.rank_layouts(d, 1)
        assert lay.is_padding_micro_batch and lay.tokens == 0 and lay.global_tokens == 5
        assert lay.local_cu_seqlens.tolist() == [0] == lay.rank_cu_seqlens.tolist()
        with pytest.raises(skrull.LayoutError, match="NO_SUCH_GPU"):
            plan.layout(d, 0, 1)
