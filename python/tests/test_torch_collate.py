"""skrull.torch in one process: collate, SkrullLoader, the reference model on empty buffers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import skrull  # noqa: E402
import skrull.torch as st  # noqa: E402


def _tokens(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 50, (int(n),), generator=g) for n in lengths]


@pytest.mark.parametrize("kwargs", [dict(shard_padding="zigzag"),
                                    dict(pad_multiple=16, pad_local=True),
                                    dict(pad_multiple=12, shard_padding="zigzag")])
def test_collate_gathers_every_token_with_shifted_labels_and_weights(kwargs):
    lengths = [1, 3, 5, 30, 12, 7, 2, 20]
    samples = _tokens(lengths)
    dp, cp = 2, 4
    plan = skrull.Scheduler(dp, cp, 16, policy="skrull", lockstep=True, **kwargs).plan(lengths)
    assert plan.summary.sharded and plan.summary.sharded < len(lengths)
    seen = [torch.zeros(n, dtype=torch.long) for n in lengths]
    weight, padding = 0.0, 0
    for d in range(dp):
        for r in range(cp):
            mbs = st.collate(plan, samples, d, r, sample_ids=[100 + i for i in range(8)])
            assert len(mbs) == plan.num_micro_batches
            for mb in mbs:
                real = mb.seq_ids >= 0
                assert torch.equal(real, torch.from_numpy(mb.layout.gather_index >= 0))
                for t in torch.nonzero(real).flatten().tolist():
                    s, p = int(mb.seq_ids[t]), int(mb.position_ids[t])
                    assert mb.input_ids[t] == samples[s][p]
                    want = samples[s][p + 1] if p + 1 < lengths[s] else -100
                    assert mb.labels[t] == want and mb.sample_ids[t] == 100 + s
                    seen[s][p] += 1
                assert (mb.labels[~real] == -100).all() and (mb.input_ids[~real] == 0).all()
                assert (mb.sample_ids[~real] == -1).all()
                padding += int((~real).sum())
                assert mb.local_cu_seqlens_padded[-1] == mb.local_tokens
                assert mb.rank_cu_seqlens[-1] == mb.num_tokens - mb.local_tokens
                weight += float(mb.loss_weights.double().sum())
    assert all((x == 1).all() for x in seen)
    assert padding > 0
    assert weight == pytest.approx(1.0)  # normalised by the labelled tokens: sum(len) - n


def test_collate_loads_only_the_sequences_this_gpu_holds():
    lengths = [4, 5, 6, 7, 40]
    plan = skrull.Scheduler(1, 4, 16, policy="skrull").plan(lengths)
    for r in range(4):
        loaded = []
        data = _tokens(lengths)
        st.collate(plan, lambda i: loaded.append(i) or data[i], 0, r)
        held = {int(s) for lay in plan.rank_layouts(0, r) for s in lay.spans["seq"]}
        assert sorted(loaded) == sorted(held) and len(loaded) < len(lengths)


def test_collate_runs_the_lockstep_empty_micro_batches():
    plan = skrull.Scheduler(3, 2, 16, policy="deepspeed", lockstep=True).plan([5, 6, 7, 8])
    own = [int((plan.micro_batch_table["dp_rank"] == d).sum()) for d in range(3)]
    assert min(own) < max(own) and plan.micro_batches_per_dp.tolist() == [max(own)] * 3
    for d in range(3):
        mbs = st.collate(plan, _tokens([5, 6, 7, 8]), d, 1)
        assert len(mbs) == max(own)
        assert [mb.is_empty for mb in mbs] == [m >= own[d] for m in range(max(own))]
        assert all(mb.num_tokens == 0 and mb.local_cu_seqlens.tolist() == [0]
                   for mb in mbs if mb.is_empty)


def test_collate_and_the_loader_refuse_plans_without_lockstep():
    # Without lockstep DP ranks may run different micro-batch counts, which deadlocks a
    # trainer whose micro-batch loop is global; the library evens them, not Python.
    sched = skrull.Scheduler(2, 2, 16, policy="deepspeed")
    plan = sched.plan([5, 6, 7])
    with pytest.raises(ValueError, match="lockstep=True"):
        st.collate(plan, _tokens([5, 6, 7]), 0, 0)
    with pytest.raises(ValueError, match="lockstep=True"):
        st.SkrullLoader(_tokens([5, 6, 7]), [5, 6, 7], sched, 0, 0, 3)
    # DP 1 needs no lockstep.
    one = skrull.Scheduler(1, 2, 16).plan([5, 6, 7])
    assert len(st.collate(one, _tokens([5, 6, 7]), 0, 1)) == one.num_micro_batches


def test_collate_rejects_a_sample_whose_length_disagrees_with_the_plan():
    plan = skrull.Scheduler(1, 2, 16).plan([5, 6])
    with pytest.raises(ValueError, match="sample 1 has 7 tokens"):
        st.collate(plan, _tokens([5, 7]), 0, 0)


def test_dict_samples_keep_their_labels_and_label_tokens_override():
    samples = [{"input_ids": torch.arange(4), "labels": torch.tensor([-100, 1, 2, 3])}]
    plan = skrull.Scheduler(1, 1, 16).plan([4])
    (mb,) = st.collate(plan, samples, 0, 0, label_tokens=3, weight_dtype=torch.float64)
    assert mb.labels.tolist() == [-100, 1, 2, 3]
    assert mb.loss_weights.tolist() == [0.0, 1 / 3, 1 / 3, 1 / 3]


def test_empty_micro_batch_runs_through_the_reference_model():
    # Regression: .view(len, heads, -1) cannot infer a dimension for 0 tokens.
    plan = skrull.Scheduler(2, 1, 16, lockstep=True).plan([5])
    empty = next(d for d in range(2) if plan.dp_sequences(d).size == 0)
    (mb,) = st.collate(plan, _tokens([5]), empty, 0)
    assert mb.is_empty and mb.num_tokens == 0
    model = st.TinyTransformer(vocab=50)
    loss = st.packed_loss(model.forward_packed(mb), mb)
    loss.backward()
    assert loss.item() == 0.0 and model.head.weight.grad.abs().sum() == 0


def test_loader_plans_each_global_batch_once_and_in_the_same_order_everywhere():
    lengths = np.random.default_rng(0).integers(1, 40, 23)
    data = _tokens(lengths)
    sched = skrull.Scheduler(2, 2, 32, lockstep=True)
    a = st.SkrullLoader(data, lengths, sched, 0, 1, 8, shuffle=True, seed=3)
    b = st.SkrullLoader(data, lengths, skrull.Scheduler(2, 2, 32, lockstep=True), 1, 0, 8,
                        shuffle=True, seed=3)
    assert len(a) == 3
    steps_a, steps_b = list(a), list(b)
    assert [s.plan.digest() for s in steps_a] == [s.plan.digest() for s in steps_b]
    assert sorted(np.concatenate([s.indices for s in steps_a]).tolist()) == list(range(23))
    a.set_epoch(1)
    assert [s.indices.tolist() for s in a] != [s.indices.tolist() for s in steps_a]
    for step in steps_a:
        for mb in step.micro_batches:
            real = mb.sample_ids >= 0
            for t in torch.nonzero(real).flatten().tolist()[:5]:
                assert mb.input_ids[t] == data[int(mb.sample_ids[t])][int(mb.position_ids[t])]
    assert len(st.SkrullLoader(data, lengths, sched, 0, 0, 8, drop_last=True)) == 2


def test_micro_batch_to_moves_every_tensor():
    plan = skrull.Scheduler(1, 1, 16).plan([3])
    (mb,) = st.collate(plan, _tokens([3]), 0, 0)
    moved = mb.to("meta")
    assert moved.input_ids.device.type == "meta" and moved.local_cu_seqlens.device.type == "meta"
    assert moved.local_tokens == mb.local_tokens and moved.layout is mb.layout
