"""Chunking through the Python package: ``chunk_size``/``chunk_keep``/``chunk_state_permille``
and ``policy="chunkflow"``, chunked placements in the plan (``chunked``, ``kind``, the group),
pickling and JSON, the two chunking statuses, layouts with chunk passes, the executors that
run them (skrull.torch, skrull.hf) and Megatron's groups, which refuse them."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import skrull

LENGTHS = [100, 9000, 2048, 2049, 700, 300, 5000]


def _peak(length: int, size: int, keep: int, state: int, g: int) -> int:
    """A chunked sequence's tokens on each of ``g`` GPUs (no padding), from the rule in
    docs/chunking.md: the last ``keep`` chunks (or one full recomputed chunk) plus the
    K/V state's share."""
    def share(t: int) -> int:
        return -(-t // g)
    n = -(-length // size)
    k = min(max(keep, 1), n)
    kept = sum(share(min(size, length - i * size)) for i in range(n - k, n))
    live = max(kept, share(size)) if n > k else kept
    return live + -(-(-(-length * state // 1000)) // g)


def chunkflow(**kw) -> skrull.Scheduler:
    args = dict(dp=2, cp=4, bucket_tokens=4096, policy="chunkflow", chunk_size=2048)
    args.update(kw)
    return skrull.Scheduler(**args)


def test_chunkflow_chunks_every_long_sequence_over_the_whole_group():
    plan = chunkflow().plan(LENGTHS)
    long = np.array(LENGTHS) > 2048
    assert plan.chunked.tolist() == long.tolist()
    assert (plan.cp_rank[long] == skrull.CHUNKED).all() and skrull.CHUNKED == -2
    assert (plan.cp_rank[~long] == skrull.SHARDED).all()
    assert set(plan.kind.tolist()) == {"chunked", "sharded"}
    assert (plan.cp_first == 0).all() and (plan.cp_size == 4).all()
    # Chunked sequences are counted apart from sharded ones.
    assert plan.summary.chunked == int(long.sum()) == 3
    assert plan.summary.sharded == len(LENGTHS) - 3
    for i in np.flatnonzero(long):
        assert plan.tokens_per_gpu[i] == _peak(LENGTHS[i], 2048, 1, 64, 4)
    # 9000 tokens: 5 chunks, K = 1: one 2048-token chunk (512 a GPU) + ceil(576 / 4).
    assert plan.tokens_per_gpu[1] == 512 + 144
    # Each chunked sequence runs alone in its micro-batch.
    for i in np.flatnonzero(long):
        assert plan.members_of(plan.dp_rank[i], plan.micro_batch[i]).tolist() == [i]
    assert "3 chunked" in repr(plan)


def test_the_configuration_holds_the_chunking_fields():
    s = chunkflow(chunk_keep=3, chunk_state_permille=100)
    c = s.config
    assert (c.chunk_size, c.chunk_keep, c.chunk_state_permille, c.chunking) == \
        (2048, 3, 100, True)
    assert "chunk_size=2048, chunk_keep=3, chunk_state_permille=100" in repr(s)
    plan = s.plan(LENGTHS)
    for i in np.flatnonzero(plan.chunked):
        assert plan.tokens_per_gpu[i] == _peak(LENGTHS[i], 2048, 3, 100, 4)
    off = skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096)
    assert (off.config.chunk_size, off.config.chunking) == (0, False)
    assert off.plan(LENGTHS).summary.chunked == 0


def test_chunkflow_without_a_size_gets_the_clis_default():
    # The library's default (the CLI's too): the largest power of two within bucket_tokens and
    # below the longest sequence (4 x 4096) whose chunked peak on the 4 GPUs fits:
    # 4096 / 4 + ceil(16384 x 64 / 1000) / 4 = 1024 + 263 <= 4096.
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096, policy="chunkflow")
    assert s.config.chunk_size == 4096
    assert skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096, policy="balanced").config \
        .chunk_size == 0


def test_chunkflow_default_chunk_size_plans_at_dp2_cp16():
    """Regression: the default was sized for one GPU (where the K/V state of a 212,992-token
    sequence alone is over 13,312 tokens) while chunkflow chunks over the whole group, so
    ``Scheduler(dp=2, cp=16, bucket_tokens=13312, model="qwen2.5-7b", policy="chunkflow")``
    raised INVALID_CHUNKING."""
    for model, bucket in (("qwen2.5-7b", 13312), ("qwen2.5-0.5b", 26624)):
        s = skrull.Scheduler(dp=2, cp=16, bucket_tokens=bucket, model=model, policy="chunkflow")
        assert s.config.chunk_size == 8192 if bucket == 13312 else 16384
        plan = s.plan([100, 60_000, 5_000, 200_000])
        assert plan.kind[3] == "chunked"


def test_no_default_chunk_size_says_why_and_what_to_set():
    with pytest.raises(skrull.ConfigError) as e:
        skrull.Scheduler(dp=1, cp=1, bucket_tokens=1000, policy="chunkflow",
                         chunk_state_permille=1000)
    assert e.value.status == "NO_CHUNK_SIZE"
    text = str(e.value)
    assert "give chunk_size" in text and "bucket_tokens=1000" in text, text
    assert e.value.value == 1000 and e.value.limit is not None and e.value.limit > 1000


def test_chunkflow_trains_a_sequence_too_long_to_fit_sharded():
    """With chunking, chunkflow plans a sequence longer than the group can hold sharded when
    its chunked peak fits (balanced refuses it, naming chunkflow)."""
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=1000, policy="chunkflow", chunk_size=512)
    plan = s.plan([3000, 100, 200])
    assert plan.kind.tolist() == ["chunked", "sharded", "sharded"]
    b = skrull.Scheduler(dp=1, cp=2, bucket_tokens=1000, policy="balanced", chunk_size=512)
    with pytest.raises(skrull.BatchError) as e:
        b.plan([3000, 100, 200])
    assert e.value.status == "SEQUENCE_TOO_LONG" and "chunkflow" in str(e.value)


def test_chunked_plans_pickle_and_export_as_the_cli():
    plan = chunkflow().plan(LENGTHS)
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan and again.digest() == plan.digest()
    assert again.chunked.tolist() == plan.chunked.tolist()
    assert again.summary == plan.summary and again.config == plan.config
    d = json.loads(plan.to_json())
    assert d == plan.to_dict()
    assert (d["config"]["chunk_size"], d["config"]["chunk_keep"],
            d["config"]["chunk_state_permille"]) == (2048, 1, 64)
    assert d["config"]["policy"] == "chunkflow"
    assert d["summary"]["chunked"] == 3 and list(d["summary"])[4] == "chunked"
    chunked = [p for p in d["placements"] if p["cp"] == -2]
    assert [p["seq"] for p in chunked] == [1, 3, 6]
    assert all(p["kind"] == "chunked" and p["chunks"] == -(-p["len"] // 2048)
               for p in chunked)
    assert all("kind" not in p for p in d["placements"] if p["cp"] != -2)
    # The group is part of the digest: moving a chunked sequence's group changes it.
    groups = np.array(plan.cp_groups)
    groups[1]["size"] = 2
    moved = skrull.Plan(plan._scheduler, np.array(plan.lengths), np.array(plan.placements),
                        np.array(plan.micro_batch_table), np.array(plan._members_c),
                        np.array(plan.rank_tokens).reshape(-1),
                        np.array(plan.micro_batches_per_dp), plan._c_summary, groups)
    assert moved.digest() != plan.digest()


def test_json_without_chunking_has_no_chunking_keys():
    d = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64).plan([30, 100]).to_dict()
    assert not {"chunk_size", "chunk_keep", "chunk_state_permille"} & set(d["config"])
    assert "chunked" not in d["summary"]


def test_the_chunking_statuses_map_to_the_packages_exceptions():
    with pytest.raises(skrull.ConfigError) as e:
        skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096, policy="chunkflow", chunk_size=0)
    assert e.value.status == "INVALID_CHUNKING" and e.value.field_name == "chunk_size"
    assert "chunk_size" in str(e.value)
    for kw, name in [({"chunk_keep": 0}, "chunk_keep"), ({"chunk_keep": 65}, "chunk_keep"),
                     ({"chunk_state_permille": 1001}, "chunk_state_permille")]:
        with pytest.raises(skrull.ConfigError) as e:
            chunkflow(**kw)
        assert e.value.status == "INVALID_CHUNKING" and e.value.field_name == name
    # All 4 chunks of 4096 kept: 4000 a GPU + 1024 / 4 of state > 4096.
    s = chunkflow(chunk_size=4096, chunk_keep=4)
    with pytest.raises(skrull.BatchError) as e:
        s.plan([10, 16000])
    err = e.value
    assert err.status == "CHUNK_OVER_BUDGET"
    assert (err.index, err.value, err.limit) == (1, 16000, 4000 + 256)
    assert "chunk_size" in str(err) and "bucket_tokens=4096" in str(err)
    assert skrull.Status.INVALID_CHUNKING == 24 and skrull.Status.CHUNK_OVER_BUDGET == 25


def test_balanced_chunks_with_slow_links_on_any_group():
    cost = skrull.CostModel("h100", "qwen2.5-7b")
    cost.intra_node_bandwidth /= 1000
    cost.inter_node_bandwidth /= 1000
    s = skrull.Scheduler(dp=1, cp=16, bucket_tokens=13 * 1024, model="qwen2.5-7b",
                         cost_model=cost, chunk_size=4096)
    plan = s.plan([60_000, 500, 700, 300, 2000, 1000, 900, 800])
    assert plan.chunked.tolist() == [True] + [False] * 7
    assert plan.cp_size[0] == 1 and plan.kind[0] == "chunked"
    assert plan.tokens_per_gpu[0] == _peak(60_000, 4096, 1, 64, 1)


def _check_gpu_layouts(plan: skrull.Plan, chunk: int) -> int:
    """Every GPU's layouts of ``plan``: the chunk passes of each chunked sequence run in order
    over its group, every real token of the batch sits in exactly one buffer slot of its
    group's ranks, with its true position and gather index, and the loss weights sum to 1.
    Returns the number of chunk passes seen."""
    cfg = plan.config
    lengths = plan.lengths
    seen = np.zeros(int(lengths.sum()), np.int64)
    seq_base = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    weight, passes = 0.0, 0
    for d in range(cfg.dp):
        order = plan.dp_sequences(d)
        stream = dict(zip(order.tolist(), plan.dp_stream_offsets(d)[:-1].tolist()))
        for r in range(cfg.cp):
            for m, lay in enumerate(plan.rank_layouts(d, r)):
                weight += float(lay.loss_weights.sum())
                mine = np.flatnonzero(plan.chunked & (plan.dp_rank == d)
                                      & (plan.micro_batch == m) & (plan.cp_first <= r)
                                      & (r < plan.cp_first + plan.cp_size))
                cp = lay.chunk_passes
                assert sorted(set(cp["seq"].tolist())) == mine.tolist()
                assert lay.chunked_seqs == mine.size
                for s in mine.tolist():
                    mine_cp = cp[cp["seq"] == s]
                    n = -(-int(lengths[s]) // chunk)
                    assert mine_cp["index"].tolist() == list(range(n))
                    assert (mine_cp["count"] == n).all()
                    assert mine_cp["start"].tolist() == [k * chunk for k in range(n)]
                    assert int(mine_cp["len"].sum()) == lengths[s]
                    assert (mine_cp["first"] == plan.cp_first[s]).all()
                    assert (mine_cp["size"] == plan.cp_size[s]).all()
                    want = 1 if plan.cp_size[s] == 1 else 2
                    assert (mine_cp["spans"] == want).all()
                passes += cp.size
                # The chunked group closes the buffer, pass after pass.
                start = lay.local_tokens + lay.sharded_tokens
                assert lay.chunked_tokens == lay.tokens - start
                offsets = np.concatenate([[start], start + np.cumsum(cp["tokens"])])
                assert cp["offset"].tolist() == offsets[:-1].tolist()
                assert lay.chunk_max_tokens == int(cp["tokens"].max(initial=0))
                for p in cp:
                    span = lay.spans[p["span"]:p["span"] + p["spans"]]
                    assert int((span["len"] + span["pad"]).sum()) == p["tokens"]
                    assert (span["seq"] == p["seq"]).all()
                    if p["size"] == 1:
                        assert span["chunk"].tolist() == [skrull.WHOLE_CHUNK]
                real = np.flatnonzero(lay.is_real)
                seqs = lay.token_seq[real]
                pos = lay.positions[real]
                seen[seq_base[seqs] + pos] += 1
                want_gather = np.array([stream[int(q)] for q in seqs]) + pos
                assert lay.gather_index[real].tolist() == want_gather.tolist()
    assert (seen == 1).all()
    assert weight == pytest.approx(1.0)
    return passes


def test_layouts_lay_out_every_chunk_pass_in_order():
    plan = chunkflow().plan(LENGTHS)
    assert (plan.cp_size[plan.chunked] == 4).all()  # ChunkFlow: the whole group
    assert _check_gpu_layouts(plan, 2048) > 0
    # balanced on slow links chunks on one GPU (whole chunks) as well as on groups.
    cost = skrull.CostModel("h100", intra_node_bandwidth=4e8, inter_node_bandwidth=4e8)
    rng = np.random.default_rng(24)
    for _ in range(3):
        lengths = np.exp(rng.uniform(np.log(50), np.log(60_000), 24)).astype(np.int64)
        plan = skrull.Scheduler(dp=2, cp=8, bucket_tokens=26_624, policy="balanced",
                                cost_model=cost, chunk_size=4096).plan(lengths)
        assert (plan.cp_size[plan.chunked] == 1).any()
        assert _check_gpu_layouts(plan, 4096) > 0


def test_one_gpu_layout_equals_the_rank_layouts_with_chunks():
    plan = chunkflow().plan(LENGTHS)
    d, r = int(plan.dp_rank[1]), 0
    m = int(plan.micro_batch[1])
    lay = plan.layout(d, m, r)
    assert lay.chunk_passes.size == -(-9000 // 2048)
    direct = plan._scheduler._fill_layout(plan, d, m, r)
    for name in ("spans", "positions", "gather_index", "chunk_passes", "local_cu_seqlens",
                 "sharded_cu_seqlens"):
        assert getattr(direct, name).tolist() == getattr(lay, name).tolist(), name
    assert not lay.chunk_passes.flags.writeable
    assert "chunked" in repr(lay) and "passes" in repr(lay)


def test_megatron_groups_refuse_chunked_sequences():
    plan = chunkflow().plan(LENGTHS)
    with pytest.raises(NotImplementedError, match="chunk"):
        plan.to_megatron_groups()


def test_hf_gpu_buffer_holds_the_chunk_passes_after_a_padding_row():
    # Was refused (NotImplementedError) before the chunk executor.
    pytest.importorskip("torch")
    from skrull.hf import collate_gpu_buffer
    plan = chunkflow().plan(LENGTHS)
    lay = plan.layout(int(plan.dp_rank[1]), int(plan.micro_batch[1]), 0)
    samples = {i: {"input_ids": list(range(n))} for i, n in enumerate(LENGTHS)}
    batch = collate_gpu_buffer(lay, samples, plan=plan)
    gpu = batch["skrull_layout"]
    # No local or sharded token here: one padding row, then the chunk passes.
    assert lay.local_tokens + lay.sharded_tokens == 0
    assert gpu.tokens == lay.tokens + 1 and gpu.schedule.tokens == 1
    passes = gpu.schedule.passes
    assert [p.index for p in passes] == list(range(-(-9000 // 2048)))
    assert [p.offset for p in passes] == (lay.chunk_passes["offset"] + 1).tolist()
    pos = batch["position_ids"][0]
    for p in passes:
        rows = pos[p.offset:p.offset + p.tokens]
        assert ((rows >= p.start) & (rows < p.start + p.length)).all()
    assert batch["input_ids"][0, 1:].tolist() == pos[1:].tolist()   # ids = positions here


def test_skrull_torch_trains_a_chunked_plan_as_the_whole_sequence():
    # Was refused (NotImplementedError) before the chunk executor: one GPU, K = 1, three
    # chunks of 1024 and a last one of 952, beside a 100-token micro-batch.
    torch = pytest.importorskip("torch")
    from skrull.torch import TinyTransformer, collate
    plan = chunkflow(dp=1, cp=1, bucket_tokens=4096, lockstep=True,
                     chunk_size=1024).plan([100, 3000])
    assert plan.summary.chunked == 1
    torch.manual_seed(0)
    model = TinyTransformer(vocab=64, hidden=16, heads=2, ffn=32).double()
    samples = [torch.randint(64, (n,)) for n in plan.lengths.tolist()]
    total = sum(plan.lengths.tolist()) - 2
    loss = sum(model.loss_packed(mb) for mb in collate(plan, samples, 0, 0,
                                                      weight_dtype=torch.float64))
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = sum(torch.nn.functional.cross_entropy(model.forward_sequence(s)[:-1], s[1:],
                                                 reduction="sum") for s in samples) / total
    want.backward()
    assert torch.allclose(loss, want, rtol=1e-12, atol=0)
    for g, p in zip(got, model.parameters()):
        assert torch.allclose(g, p.grad, rtol=1e-10, atol=1e-14)


def test_skrull_hf_plans_chunked_batches_for_the_trainer():
    # Was refused (NotImplementedError) before the chunk executor.
    pytest.importorskip("transformers")
    from skrull.hf import plan_for_steps, scheduler_for_steps
    scheduler = scheduler_for_steps(dp=1, cp=1, bucket_tokens=4096, micro_batches=2,
                                    policy="chunkflow", chunk_size=1024)
    plan = plan_for_steps(scheduler, [100, 3000], micro_batches=2)
    assert plan.chunked.tolist() == [False, True]


def test_online_calibration_observes_chunked_steps_without_fitting_their_chunks(tmp_path):
    # Regression: the refit refused chunked placements (PLAN_INVALID), which made every step
    # of a chunked plan fail in OnlineCalibration.step (SkrullTrainer with calibrate_every,
    # and every chunkflow run of python -m skrull.bench); then such steps were timed but not
    # observed. Now they are observed: the GPU running the chunks is part of the step's time
    # and not fitted (counted in the refit's `skipped`).
    pytest.importorskip("torch")
    import torch.distributed as dist
    from skrull.torch import OnlineCalibration
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        scheduler = chunkflow(dp=1, cp=1, bucket_tokens=4096, lockstep=True, chunk_size=1024)
        online = OnlineCalibration(scheduler, every=1)
        for lengths in ([100, 3000], [100, 200]):
            plan = scheduler.plan(lengths)
            for _ in range(plan.num_micro_batches):
                with online.time():
                    pass
            online.step(plan)
        assert online.steps == 2 and online.chunked_steps == 1
        assert online.last_times.shape == (1, 1, 1)
        refit = online.last_refit
        assert refit is not None and refit.steps == 2 and refit.skipped >= 1
    finally:
        dist.destroy_process_group()


def test_whole_group_attention_refuses_a_sub_group_chunk_naming_the_sequence():
    # Without ring_groups only the whole CP group's process group exists: a sequence chunked
    # on a sub-group cannot exchange its chunks, and every rank of the DP rank must refuse it
    # (the check reads the plan, not the GPU's layout). The planner does not chunk on
    # sub-groups in these sizes, so the plan's group of sequence 1 is narrowed here.
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace
    from skrull.torch import collate
    from skrull.torch._packed import _refuse_subgroup_chunks
    plan = chunkflow(dp=1, cp=4, lockstep=True).plan(LENGTHS)
    seq = int(np.flatnonzero(plan.chunked)[0])
    mb = next(m for m in collate(plan, [torch.arange(n) for n in LENGTHS], 0, 0)
              if seq in m.seq_ids.tolist())
    _refuse_subgroup_chunks(mb)      # the whole group: runs
    narrowed = SimpleNamespace(config=plan.config, dp_rank=plan.dp_rank,
                               micro_batch=plan.micro_batch, chunked=plan.chunked,
                               cp_first=plan.cp_first, cp_size=np.where(
                                   np.arange(len(LENGTHS)) == seq, 2, plan.cp_size))
    for cp_rank in range(4):         # every rank of the DP rank refuses it
        other = collate(plan, [torch.arange(n) for n in LENGTHS], 0, cp_rank)[mb.layout.micro_batch]
        other.plan = narrowed
        with pytest.raises(ValueError, match=f"sequence {seq} runs chunked on CP ranks 0..2"):
            _refuse_subgroup_chunks(other)
