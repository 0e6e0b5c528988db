"""TRL's ``SFTTrainer`` (padding-free, TRL's own collator and loss) with the skrull batch
sampler (``SkrullTrainerMixin``), DP 1, a float64 Llama and an in-memory WordLevel tokenizer:
every step's loss equals the unpacked reference's to float32 rounding (TRL computes the
per-token log-probabilities in float32), and so do the weights after 4 AdamW steps, within
the bound AdamW's normalisation leaves (measured: losses 3.1e-8, weights 1.0e-4 relative)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

from skrull.hf import SkrullConfig, SkrullTrainerMixin  # noqa: E402

import _hf_worker as worker  # noqa: E402

N, BATCH, STEPS, GRAD_ACCUM, BUCKET = 64, 16, 4, 3, 256
LOSS_TOLERANCE = 1e-6     # float32 rounding of TRL's per-token loss
WEIGHTS_TOLERANCE = 1e-3  # the same rounding after 4 AdamW steps


def _tokenizer():
    from transformers import PreTrainedTokenizerFast
    vocab = {f"t{i}": i for i in range(worker.VOCAB)}
    model = tokenizers.models.WordLevel(vocab, unk_token="t1")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(model),
                                   pad_token="t0", unk_token="t1", eos_token="t2")


class SkrullSFTTrainer(SkrullTrainerMixin, worker.recording(trl.SFTTrainer)):
    """What a user writes: the mixin before TRL's trainer."""


def test_sft_trainer_padding_free_equals_unpacked_training_to_float32(tmp_path):
    lengths = np.random.default_rng(3).integers(2, 89, N).tolist()
    data = worker.dataset(lengths)
    args = trl.SFTConfig(
        output_dir=str(tmp_path), use_cpu=True, max_steps=STEPS, per_device_train_batch_size=1,
        gradient_accumulation_steps=GRAD_ACCUM, learning_rate=worker.LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=0.0,
        optim="adamw_torch", report_to=[], save_strategy="no", logging_strategy="no",
        disable_tqdm=True, seed=42, padding_free=True, packing=False, max_length=None,
        bf16=False, gradient_checkpointing=False,
        dataset_kwargs={"skip_prepare_dataset": True})
    model = worker.tiny_model("llama", "sdpa")
    trainer = SkrullSFTTrainer(model=model, args=args,
                               train_dataset=datasets.Dataset.from_list(data),
                               processing_class=_tokenizer(),
                               skrull=SkrullConfig(bucket_tokens=BUCKET, global_batch_size=BATCH))
    with worker.one_thread():
        trainer.train()
    losses = worker.step_losses(trainer, GRAD_ACCUM)
    ref = worker.reference("llama", data, worker.global_batches(N, BATCH, STEPS))
    loss_err = max(abs(a - b) / b for a, b in zip(losses, ref["losses"]))
    weight_err = worker.max_rel_diff(dict(model.state_dict()), ref["weights"])
    print(f"\nSFTTrainer DP 1: max relative error loss {loss_err:.1e}, weights {weight_err:.1e}")
    assert len(trainer.micro_losses) == STEPS * GRAD_ACCUM
    assert loss_err < LOSS_TOLERANCE
    assert weight_err < WEIGHTS_TOLERANCE
