"""``SkrullConfig(calibrate_every=k)``: the Trainer times every micro-batch, observes each step
and refits every ``k`` steps (DP 1, in this process, CPU); later steps are planned with the
refitted model and training stays the unpacked computation."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import skrull  # noqa: E402
from skrull.hf import SkrullConfig  # noqa: E402

import _hf_worker as worker  # noqa: E402

N, BATCH, STEPS, GRAD_ACCUM, BUCKET = 48, 12, 4, 3, 256


def test_trainer_refits_every_k_steps_and_still_trains_exactly(tmp_path):
    lengths = np.random.default_rng(3).integers(1, 89, N).tolist()
    data = worker.dataset(lengths)
    refits: list[skrull.Refit] = []
    cfg = SkrullConfig(bucket_tokens=BUCKET, global_batch_size=BATCH, calibrate_every=2,
                       calibration_callback=refits.append)
    from skrull.hf import SkrullTrainer
    model = worker.tiny_model("llama")
    trainer = worker.recording(SkrullTrainer)(
        model=model, args=worker.training_args(str(tmp_path), STEPS, GRAD_ACCUM),
        train_dataset=data, skrull=cfg)
    with worker.one_thread():
        trainer.train()
    online = trainer.skrull_calibration
    assert online is not None and online.steps == STEPS
    scheduler = trainer._sampler.scheduler
    # Refits every 2 steps; the callback gets those that changed the model (whether the H100
    # preset moves toward a tiny CPU model depends on how far off it is: docs/hf.md).
    assert online.last_refit is not None and online.last_refit.steps == STEPS
    assert all(r.changed for r in refits) and len(refits) <= STEPS // 2
    assert scheduler.cost_model == online.last_refit.model
    assert len(trainer._sampler.plans) <= 1  # consumed step by step (one may be prefetched)
    ref = worker.reference("llama", data, worker.global_batches(N, BATCH, STEPS))
    losses = worker.step_losses(trainer, GRAD_ACCUM)
    assert max(abs(a - b) / b for a, b in zip(losses, ref["losses"])) < 1e-12


def test_a_negative_calibrate_every_is_refused():
    from types import SimpleNamespace
    from skrull.hf import check_training_setup
    args = SimpleNamespace(average_tokens_across_devices=True, bf16=False, fp16=False,
                           world_size=1, use_cache=False)
    with pytest.raises(ValueError, match="calibrate_every=-1"):
        check_training_setup(None, args, SkrullConfig(bucket_tokens=64, calibrate_every=-1))


def test_a_resumed_run_pairs_each_step_with_its_own_plan(tmp_path):
    """Resuming mid-epoch, the Trainer skips the batches it trained: the sampler still plans
    them, and the trainer drops those plans (a regression: taking plans in order paired every
    later step with a skipped batch's plan)."""
    from skrull.hf import SkrullTrainer
    lengths = np.random.default_rng(5).integers(1, 89, N).tolist()
    data = worker.dataset(lengths)
    steps_seen: list[list[int]] = []

    def run(resume: str | None) -> SkrullTrainer:
        cfg = SkrullConfig(bucket_tokens=BUCKET, global_batch_size=BATCH, calibrate_every=1)
        args = worker.training_args(str(tmp_path), STEPS, GRAD_ACCUM, save_strategy="steps",
                                    save_steps=2)
        trainer = SkrullTrainer(model=worker.tiny_model("llama"), args=args,
                                train_dataset=data, skrull=cfg)
        online = trainer.skrull_calibration
        seen: list[int] = []
        steps_seen.append(seen)
        original = trainer._step_plan

        def step_plan():
            plan = original()
            seen.append(int(plan.lengths.sum()))
            return plan
        trainer._step_plan = step_plan
        with worker.one_thread():
            trainer.train(resume_from_checkpoint=resume)
        assert online is None  # made by the sampler, when training starts
        return trainer

    first = run(None)
    assert first.skrull_calibration.steps == STEPS
    second = run(str(tmp_path / "checkpoint-2"))
    assert second.skrull_calibration.steps == STEPS - 2
    # The resumed run trained the global batches 2 and 3 of the first run, with their plans.
    assert steps_seen[1] == steps_seen[0][2:]
