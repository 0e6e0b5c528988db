"""transformers' Trainer with the skrull batch sampler (no CP), float64: at DP 1 (in this
process, Llama, transformers' own SDPA attention finding the sequences from the restarting
``position_ids``) and DP 2 (two gloo processes, Qwen2, the ``"skrull"`` attention function
running each sequence from ``cu_seq_lens_q``), every step's loss equals the unpacked
reference's and the weights after 4 AdamW steps agree to 1e-10 relative."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from skrull.hf import SkrullBatchSampler, SkrullConfig  # noqa: E402

import _hf_worker as worker  # noqa: E402

WEIGHTS_TOLERANCE = 1e-10
LOSS_TOLERANCE = 1e-12
N, BATCH, STEPS, GRAD_ACCUM, BUCKET = 64, 16, 4, 3, 256


def _lengths() -> list[int]:
    return np.random.default_rng(3).integers(1, 89, N).tolist()


def _check(got: dict, ref: dict, label: str) -> None:
    loss_err = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
    weight_err = worker.max_rel_diff(got["weights"], ref["weights"])
    print(f"\n{label}: losses {[round(x, 6) for x in got['losses']]}, max relative error loss "
          f"{loss_err:.1e}, weights {weight_err:.1e}")
    assert got["micro_batches"] == STEPS * GRAD_ACCUM
    assert loss_err < LOSS_TOLERANCE
    assert weight_err < WEIGHTS_TOLERANCE


def test_trainer_dp1_equals_unpacked_training(tmp_path):
    data = worker.dataset(_lengths())
    ref = worker.reference("llama", data, worker.global_batches(N, BATCH, STEPS))
    cfg = SkrullConfig(bucket_tokens=BUCKET, global_batch_size=BATCH)
    got = worker.run_skrull_trainer("llama", "sdpa", data, STEPS, GRAD_ACCUM, cfg,
                                    str(tmp_path))
    _check(got, ref, "DP 1, Llama, sdpa")


def test_trainer_dp2_equals_unpacked_training(tmp_path):
    lengths = _lengths()
    # Both DP ranks run sequences in every step, and some micro-batches pack several.
    sampler = SkrullBatchSampler(lengths, BATCH, BUCKET, GRAD_ACCUM, dp_size=2, rank=0,
                                 shuffle=True)
    first = next(iter(sampler))
    assert sampler.last_plan is not None and len(first) >= 1
    assert (sampler.last_plan.micro_batches_per_dp > 0).all()
    t0 = time.perf_counter()
    spec = dict(lengths=lengths, seed=0, kind="qwen2", attention="skrull", bucket=BUCKET,
                batch=BATCH, steps=STEPS, grad_accum=GRAD_ACCUM)
    got = worker.launch(2, "dp", spec, str(tmp_path))
    launched = time.perf_counter() - t0
    ref = worker.reference("qwen2", worker.dataset(lengths),
                           worker.global_batches(N, BATCH, STEPS))
    _check(got, ref, f"DP 2, Qwen2, skrull attention (launch {launched:.1f} s)")
