"""skrull.hf in one process: the collator, the batch sampler (budget, determinism, resume, the
micro-batch count), the attention function (per sequence, never T x T) and the guards against
silent transformers pitfalls."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import skrull  # noqa: E402
import skrull.hf as sh  # noqa: E402

import _hf_worker as worker  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    with worker.one_thread():
        yield


def _unpacked_loss(model, samples) -> float:
    labels = sum(len(s["input_ids"]) - 1 for s in samples)
    with torch.no_grad():
        return sum(float(model(input_ids=torch.tensor(s["input_ids"])[None],
                               labels=torch.tensor(s["input_ids"])[None],
                               num_items_in_batch=labels).loss) for s in samples)


# ---- collator -----------------------------------------------------------------------------

def test_collator_restarts_positions_and_never_labels_across_a_boundary():
    batch = sh.SkrullCollator()([{"input_ids": [5, 6, 7]},
                                 {"input_ids": [8, 9], "labels": [-100, 3]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["shift_labels"].tolist() == [[6, 7, -100, 3, -100]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 3]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5] == batch["cu_seq_lens_k"].tolist()
    assert batch["cu_seq_lens_q"].dtype == torch.int32
    assert batch["max_length_q"] == batch["max_length_k"] == 3


def test_an_empty_micro_batch_is_one_zero_loss_padding_token():
    batch = sh.SkrullCollator(pad_token_id=9)([])
    assert batch["input_ids"].tolist() == [[9]] and batch["position_ids"].tolist() == [[0]]
    assert batch["labels"].tolist() == [[-100]] == batch["shift_labels"].tolist()
    model = worker.tiny_model("llama", "skrull")
    out = model(**batch, num_items_in_batch=7)
    assert float(out.loss.detach()) == 0.0
    out.loss.backward()
    assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters()
               if p.grad is not None)


def test_collate_gpu_buffer_labels_a_chunk_with_the_next_token_of_its_sequence():
    # CP 2, everything sharded with zigzag padding: a chunk's last token is labelled with the
    # first token of the next chunk, which another CP rank holds.
    plan = skrull.Scheduler(1, 2, 16, policy="packed", shard_padding="zigzag",
                            lockstep=True).plan([6])
    samples = {0: {"input_ids": [10, 11, 12, 13, 14, 15]}}
    got = {}
    for r in range(2):
        b = sh.collate_gpu_buffer(plan.layout(0, 0, r), samples)
        real = b["skrull_layout"].is_real
        for pos, ids, shift in zip(b["position_ids"][0][real].tolist(),
                                   b["input_ids"][0][real].tolist(),
                                   b["shift_labels"][0][real].tolist()):
            got[pos] = (ids, shift)
        assert (b["shift_labels"][0][~real] == -100).all()
    assert got == {p: (10 + p, 11 + p if p < 5 else -100) for p in range(6)}


# ---- sampler ------------------------------------------------------------------------------

LENGTHS = np.random.default_rng(11).integers(1, 120, 96).tolist()


def _epoch(sampler) -> list[list[int]]:
    return [list(mb) for mb in sampler]


def test_sampler_places_every_sample_once_within_budget_in_exactly_g_micro_batches():
    dp, g, bucket, batch = 3, 4, 256, 24
    per_rank = [_epoch(sh.SkrullBatchSampler(LENGTHS, batch, bucket, g, dp_size=dp, rank=r))
                for r in range(dp)]
    assert all(len(mbs) == len(LENGTHS) // batch * g for mbs in per_rank)
    placed = sorted(i for mbs in per_rank for mb in mbs for i in mb)
    assert placed == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in mb) <= bucket for mbs in per_rank for mb in mbs)
    assert all(mb for mbs in per_rank for mb in mbs)  # no empty slot: every rank had >= G


def test_sampler_is_deterministic_per_seed_and_epoch_and_resumes_from_its_state():
    make = lambda **kw: sh.SkrullBatchSampler(LENGTHS, 24, 256, 4, dp_size=2, rank=1, **kw)
    a, b = make(seed=5), make(seed=5)
    assert _epoch(a) == _epoch(b)
    a.set_epoch(1)
    assert _epoch(a) != _epoch(b)
    resumed = make(seed=0)
    resumed.load_state_dict(a.state_dict())
    assert resumed.state_dict() == {"epoch": 1, "seed": 5} and _epoch(resumed) == _epoch(a)
    assert _epoch(make(seed=6)) != _epoch(b)


def test_sampler_names_the_gradient_accumulation_steps_a_batch_needs():
    sampler = sh.SkrullBatchSampler(LENGTHS, 48, 128, 2, dp_size=1, rank=0)
    with pytest.raises(ValueError, match=r"raise gradient_accumulation_steps to at least \d+"):
        next(iter(sampler))


def test_sampler_reads_dp_size_and_rank_from_the_world_and_cp():
    sampler = sh.SkrullBatchSampler(LENGTHS, 24, 256, 4)  # no process group: DP 1, rank 0
    assert (sampler.dp_size, sampler.rank) == (1, 0)
    with pytest.raises(ValueError, match="multiple of cp"):
        sh.SkrullBatchSampler(LENGTHS, 24, 256, 4, cp=2)


def test_a_slot_stays_empty_only_when_a_rank_has_fewer_sequences_than_slots():
    # Regression: TRL's collator and DataCollatorWithFlattening fail on an empty list, and
    # lockstep plans left slots empty. Balanced over DP 2, one rank takes two 250-token
    # sequences, the other the rest: the first has fewer sequences than G = 4.
    lengths = [250, 250, 250, 1, 1, 1, 1, 1]
    per_rank = [_epoch(sh.SkrullBatchSampler(lengths, 8, 256, 4, dp_size=2, rank=r,
                                             shuffle=False)) for r in range(2)]
    for mbs in per_rank:
        held = sum(len(mb) for mb in mbs)
        assert len(mbs) == 4 and sum(not mb for mb in mbs) == max(0, 4 - held)
    assert any(not mb for mbs in per_rank for mb in mbs)
    # ... and one with enough sequences fills every slot by splitting, never over budget.
    mbs = _epoch(sh.SkrullBatchSampler(lengths, 8, 512, 4, dp_size=1, rank=0, shuffle=False))
    assert all(mbs) and all(sum(lengths[i] for i in mb) <= 512 for mb in mbs)


# ---- attention ----------------------------------------------------------------------------

def test_more_micro_batches_than_samples_per_rank_is_valid_not_an_assertion():
    """Regression: transformers' BatchRebalanceSampler asserts effective_batch_size >=
    dp_size * grad_accum, so this crashed with a bare AssertionError (``skrull.bench --dp 2
    --cp 1`` on a long-tail file met it); a skrull plan runs the extra micro-batches empty."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(10, 2000, size=64).tolist()
    sampler = sh.SkrullBatchSampler(lengths, 16, 2048, grad_accum=9, dp_size=2, rank=0,
                                    policy="skrull")
    micro_batches = list(sampler)
    assert len(micro_batches) == len(sampler) == 4 * 9
    seen = [i for mb in micro_batches for i in mb]
    assert len(seen) == len(set(seen)) > 0
    assert sum(1 for mb in micro_batches if not mb) > 0  # the extra slots run empty
    with pytest.raises(ValueError, match="grad_accum must be a whole number"):
        sh.SkrullBatchSampler(lengths, 16, 2048, grad_accum=0, dp_size=2, rank=0)
    with pytest.raises(ValueError, match="rank must be from 0"):
        sh.SkrullBatchSampler(lengths, 16, 2048, grad_accum=2, dp_size=2, rank=2)


def test_the_sampler_plans_for_ddp_under_no_sync():
    """SkrullTrainer runs DDP with gradient accumulation under no_sync: the sampler's plans
    are made for that synchronisation unless told otherwise."""
    s = sh.SkrullBatchSampler([5, 3, 4, 6], 2, bucket_tokens=16, dp_size=1, rank=0)
    assert s.scheduler.config.sync == "sharded"
    s = sh.SkrullBatchSampler([5, 3, 4, 6], 2, bucket_tokens=16, dp_size=1, rank=0,
                              sync="every-gpu")
    assert s.scheduler.config.sync == "every-gpu"


def test_skrull_attention_runs_sequence_by_sequence_never_t_by_t(monkeypatch):
    from skrull.torch.attention import _merge
    lengths = [7, 30, 1, 12]
    samples = worker.dataset(lengths, seed=4)
    model = worker.tiny_model("qwen2", "skrull")
    calls = []
    real = _merge._FORWARD

    def spy(q, k, v, *args, **kwargs):   # the CPU flash kernel: [slots, heads, rows, dim]
        calls.append((q.shape[0], q.shape[2], k.shape[2]))
        return real(q, k, v, *args, **kwargs)
    monkeypatch.setattr(_merge, "_FORWARD", spy)
    batch = sh.SkrullCollator()(samples)
    labels = sum(n - 1 for n in lengths)
    with torch.no_grad():
        packed = float(model(**batch, num_items_in_batch=labels).loss)
    # One slot per sequence and layer (short sequences run batched by power-of-two size
    # class: 16 for 7, 1 and 12, 32 for 30); a slot is its class's square, never T x T.
    assert sum(slots for slots, _, _ in calls) == 2 * len(lengths)  # 2 layers
    assert max(rows * keys for _, rows, keys in calls) == 32 ** 2 < sum(lengths) ** 2
    assert abs(packed - _unpacked_loss(model, samples)) < 1e-13


# ---- guards -------------------------------------------------------------------------------

def _trainer(tmp_path, model, cfg, **args):
    return sh.SkrullTrainer(model=model, args=worker.training_args(str(tmp_path), 1, 1, **args),
                            train_dataset=worker.dataset([3, 4]), skrull=cfg)


def test_use_cache_breaks_packing_in_transformers_and_the_trainer_turns_it_off(tmp_path):
    samples = worker.dataset([9, 5, 14], seed=2)
    batch = sh.SkrullCollator()(samples)
    labels = sum(len(s["input_ids"]) - 1 for s in samples)
    model = worker.tiny_model("llama", "sdpa")
    want = _unpacked_loss(model, samples)
    with torch.no_grad():
        cached = float(model(**batch, num_items_in_batch=labels, use_cache=True).loss)
    assert abs(cached - want) > 1e-6  # the pitfall: a cache silently disables packing
    with pytest.warns(UserWarning, match="use_cache"):
        trainer = _trainer(tmp_path, model, sh.SkrullConfig(bucket_tokens=64), use_cache=True)
    assert model.config.use_cache  # the Trainer copied args.use_cache ...
    with torch.no_grad():
        got = float(trainer.compute_loss(model, dict(batch), num_items_in_batch=labels))
    assert abs(got - want) < 1e-13  # ... and compute_loss ran without a cache


def test_zigzag_positions_fool_transformers_sequence_detection_so_cp_needs_skrull_attention(
        tmp_path):
    from transformers.masking_utils import find_packed_sequence_indices
    plan = skrull.Scheduler(1, 2, 16, policy="packed", shard_padding="zigzag",
                            lockstep=True).plan([8])
    b = sh.collate_gpu_buffer(plan.layout(0, 0, 0), {0: {"input_ids": list(range(8))}})
    assert b["position_ids"].tolist() == [[0, 1, 6, 7]]  # one sequence, two chunks
    assert find_packed_sequence_indices(b["position_ids"]).tolist() == [[0, 0, 1, 1]]
    with pytest.raises(ValueError, match="attn_implementation='skrull'"):
        _trainer(tmp_path, worker.tiny_model("llama", "sdpa"),
                 sh.SkrullConfig(bucket_tokens=64, cp=2))


def test_cp_refuses_per_device_loss_normalisation(tmp_path):
    with pytest.raises(ValueError, match="average_tokens_across_devices"):
        _trainer(tmp_path, worker.tiny_model("llama", "skrull"),
                 sh.SkrullConfig(bucket_tokens=64, cp=2), average_tokens_across_devices=False)


def test_bf16_is_refused_when_exactness_is_asked_and_warned_about_otherwise(tmp_path):
    with pytest.raises(ValueError, match="bf16=True"):
        _trainer(tmp_path, worker.tiny_model("llama"), sh.SkrullConfig(64, exact=True),
                 bf16=True)
    with pytest.warns(UserWarning, match="bf16=True"):
        _trainer(tmp_path, worker.tiny_model("llama"), sh.SkrullConfig(64), bf16=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer = _trainer(tmp_path, worker.tiny_model("llama"), sh.SkrullConfig(64, exact=True))
    assert trainer.model.loss_function is sh.exact_causal_lm_loss


def test_cp_buffers_reach_dataloader_workers_with_their_plan():
    # Regression: a plan is ctypes-backed; a worker process must receive it (pickled with
    # the micro-batch's index list) and build the same buffers as the main process.
    from torch.utils.data import DataLoader
    from skrull.hf._trainer import _PerGpuDataset, _only
    data = worker.dataset(LENGTHS[:24], seed=5)

    def batches(workers):
        sampler = sh.SkrullBatchSampler(LENGTHS[:24], 12, 64, 12, dp_size=1, rank=0, cp=2,
                                        policy="skrull", shard_padding="zigzag")
        loader = DataLoader(_PerGpuDataset(data, 1, 0), batch_sampler=sampler,
                            collate_fn=_only, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
        return [(b["input_ids"], b["shift_labels"], b["skrull_layout"].rings) for b in loader]
    here, there = batches(0), batches(1)
    assert len(here) == 24 and any(rings for _, _, rings in here)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2]
               for a, b in zip(here, there))
