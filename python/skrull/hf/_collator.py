"""Padding-free collation: HF-style samples to one flat ``[1, T]`` micro-batch.

Two entry points:

- ``SkrullCollator`` (a ``data_collator`` for ``Trainer``) concatenates whole sequences, as
  the batch sampler hands them over (no context parallelism);
- ``collate_gpu_buffer`` fills one GPU's buffer from a skrull ``Layout`` (context
  parallelism: local sequences whole, sharded ones as their two zigzag chunks, true positions).

Both return ``input_ids``, ``position_ids``, ``labels`` (``-100`` at every sequence start, so
that HF's own label shift never crosses a boundary) and ``shift_labels`` (the next token within
the sequence, ``-100`` on its last token and on padding), all ``[1, T]`` int64. An empty
micro-batch becomes one explicit padding token labelled ``-100``: it adds nothing to the loss
or the gradients, and the rank still runs its forward and backward, so DDP stays in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..torch.attention import attention_schedule, local_schedule

IGNORE_INDEX = -100


def _tokens(sample: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) of one sample as 1-D int64 tensors; labels default to the ids."""
    ids = torch.as_tensor(sample["input_ids"], dtype=torch.long).reshape(-1)
    labels = sample.get("labels")
    labels = ids if labels is None else torch.as_tensor(labels, dtype=torch.long).reshape(-1)
    if labels.shape != ids.shape:
        raise ValueError(f"labels ({labels.numel()}) and input_ids ({ids.numel()}) differ in "
                         "length")
    return ids, labels


def shifted(labels: torch.Tensor) -> torch.Tensor:
    """The next-token targets of one sequence: ``labels[1:]`` then ``-100``."""
    return torch.cat([labels[1:], labels.new_full((1,), IGNORE_INDEX)])


def padding_batch(pad_token_id: int = 0) -> dict[str, Any]:
    """The batch of an empty micro-batch: one padding token, position 0, label ``-100``.

    Parameters
    ----------
    pad_token_id : int, optional
        The padding token's id (default 0).

    Returns
    -------
    dict
        ``SkrullCollator``'s keys: ``input_ids``, ``position_ids``, ``labels``,
        ``shift_labels`` (``[1, 1]`` int64), ``cu_seq_lens_q`` / ``cu_seq_lens_k``
        (``[0, 1]`` int32) and ``max_length_q`` / ``max_length_k`` (1).

    Example
    -------
    >>> from skrull.hf import padding_batch
    >>> batch = padding_batch(pad_token_id=2)
    >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["cu_seq_lens_q"].tolist()
    ([[2]], [[-100]], [0, 1])
    """
    one = torch.tensor([[pad_token_id]], dtype=torch.long)
    ignore = torch.full((1, 1), IGNORE_INDEX, dtype=torch.long)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    return {"input_ids": one, "position_ids": torch.zeros((1, 1), dtype=torch.long),
            "labels": ignore, "shift_labels": ignore.clone(), "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu.clone(), "max_length_q": 1, "max_length_k": 1}


@dataclass
class SkrullCollator:
    """``data_collator`` for a padding-free ``Trainer`` fed by ``SkrullBatchSampler``.

    Called with a list of samples (mappings with ``input_ids`` and optionally ``labels``,
    unshifted, as HF datasets hold them; default: the ids; other keys are dropped), it
    concatenates them into one ``[1, T]`` batch. An empty list gives ``padding_batch``.

    Parameters
    ----------
    pad_token_id : int, optional
        The token id of the padding token an empty micro-batch becomes (default 0).

    Returns
    -------
    dict
        Per call: ``input_ids``, ``position_ids`` (restarting at 0 per sequence),
        ``labels`` (``-100`` at every sequence start), ``shift_labels`` (the next token,
        ``-100`` on each sequence's last) (``[1, T]`` int64), and the flash-attention varlen
        arguments ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (int32) and ``max_length_q`` /
        ``max_length_k``.

    Raises
    ------
    ValueError
        A sample with no tokens, or ``labels`` of another length than ``input_ids``.

    Example
    -------
    >>> from skrull.hf import SkrullCollator
    >>> batch = SkrullCollator()([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    >>> batch["position_ids"].tolist(), batch["cu_seq_lens_q"].tolist(), batch["max_length_q"]
    ([[0, 1, 2, 0, 1]], [0, 3, 5], 3)
    >>> batch["labels"].tolist(), batch["shift_labels"].tolist()
    ([[-100, 6, 7, -100, 9]], [[6, 7, -100, 9, -100]])
    """

    pad_token_id: int = 0

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if len(features) == 0:
            return padding_batch(self.pad_token_id)
        pairs = [_tokens(f) for f in features]
        if any(ids.numel() == 0 for ids, _ in pairs):
            raise ValueError("a sample has no tokens")
        lengths = [ids.numel() for ids, _ in pairs]
        ids = torch.cat([p[0] for p in pairs])
        positions = torch.cat([torch.arange(n) for n in lengths])
        labels = torch.cat([torch.cat([lab.new_full((1,), IGNORE_INDEX), lab[1:]])
                            for _, lab in pairs])
        shift = torch.cat([shifted(lab) for _, lab in pairs])
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
        longest = max(lengths)
        return {"input_ids": ids[None], "position_ids": positions[None], "labels": labels[None],
                "shift_labels": shift[None], "cu_seq_lens_q": cu, "cu_seq_lens_k": cu.clone(),
                "max_length_q": longest, "max_length_k": longest}


@dataclass(frozen=True)
class GpuLayout:
    """What the attention function needs of one GPU's micro-batch (small, picklable).

    Made by ``collate_gpu_buffer`` (its ``skrull_layout``); ``SkrullAttention`` reads it.

    Parameters
    ----------
    local_slots : tuple of (int, int)
        ``(start, stop)`` buffer rows of each local sequence (its padding included).
    rings : tuple of (int, int, int, int)
        Per CP group the sharded group runs over, ``(first, size, start, stop)``: the CP
        ranks ``first .. first + size`` and the buffer rows.
    span_seq : torch.Tensor
        Per buffer row, the plan sequence it belongs to (padding included; -1 on none).
    positions : torch.Tensor
        Per buffer row, its true position in its sequence.
    is_real : torch.Tensor
        Per buffer row, False on padding.
    dp_rank, micro_batch, cp_rank : int
        Which GPU and micro-batch.
    schedule : AttentionSchedule or None
        What the attention runs (``skrull.torch.attention.attention_schedule``, built from
        the plan alone: its local and sharded rows ``[0, schedule.tokens)``, then its chunk
        passes); None for a buffer made without its plan, which then cannot run sharded or
        chunked sequences.

    Example
    -------
    >>> import skrull
    >>> from skrull.hf import collate_gpu_buffer
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([3, 2])
    >>> samples = {0: {"input_ids": [5, 6, 7]}, 1: {"input_ids": [8, 9]}}
    >>> gpu = collate_gpu_buffer(plan.layout(0, 0, 0), samples)["skrull_layout"]
    >>> gpu.local_slots, gpu.rings, gpu.tokens
    (((0, 3), (3, 5)), (), 5)
    """

    local_slots: tuple[tuple[int, int], ...]
    rings: tuple[tuple[int, int, int, int], ...]
    span_seq: torch.Tensor
    positions: torch.Tensor
    is_real: torch.Tensor
    dp_rank: int
    micro_batch: int
    cp_rank: int
    schedule: Any = None

    @property
    def tokens(self) -> int:
        """Rows in this GPU's buffer (1 for an empty micro-batch's padding token)."""
        return int(self.positions.numel())


def collate_gpu_buffer(layout: Any, samples: Mapping[int, Mapping[str, Any]],
                       pad_token_id: int = 0, *, plan: Any = None) -> dict[str, Any]:
    """One GPU's batch for a skrull ``Layout`` (any DP rank, micro-batch, CP rank).

    The buffer holds the local sequences whole, then each sharded sequence's two zigzag
    chunks with its padding, then (chunking on) the chunk passes of its chunked sequences. A
    GPU with no local or sharded token gets one padding token in front.

    Parameters
    ----------
    layout : Layout
        This GPU's layout of the micro-batch (``Plan.layout(dp_rank, micro_batch, cp_rank)``).
    samples : mapping
        ``samples[s]`` is plan sequence ``s`` (every sequence the layout's spans name), a
        mapping with ``input_ids`` and optionally ``labels``.
    pad_token_id : int, optional
        Token id of padding rows (default 0).
    plan : Plan, optional
        The plan the layout comes from: the attention's schedule is built from it (needed
        when the layout has sharded or chunked sequences; ``SkrullTrainer`` passes it).

    Returns
    -------
    dict
        ``input_ids``, ``position_ids`` (the layout's true positions), ``labels`` (``-100``
        at each sequence start) and ``shift_labels`` (the next token of the whole sequence,
        so a chunk's last token is labelled with the first token of the next chunk, held by
        another GPU), all ``[1, T]`` int64; and ``skrull_layout`` (a ``GpuLayout``) for the
        attention function.

    Raises
    ------
    ValueError
        A sample whose ``labels`` differ in length from its ``input_ids``, or a sequence of
        the layout missing from ``samples``.

    Example
    -------
    >>> import skrull
    >>> from skrull.hf import collate_gpu_buffer
    >>> plan = skrull.Scheduler(dp=1, cp=2, bucket_tokens=16, policy="packed",
    ...                         shard_padding="zigzag").plan([8])
    >>> batch = collate_gpu_buffer(plan.layout(0, 0, 0), {0: {"input_ids": list(range(8))}})
    >>> batch["position_ids"].tolist(), batch["shift_labels"].tolist()  # two zigzag chunks
    ([[0, 1, 6, 7]], [[1, 2, 7, -100]])
    >>> batch["skrull_layout"].rings                  # CP ranks 0..2, buffer rows 0..4
    ((0, 2, 0, 4),)
    """
    spans = layout.spans
    main = int(layout.local_tokens) + int(layout.sharded_tokens)
    # A GPU without local or sharded tokens runs one padding row in front of its buffer (its
    # chunk passes, if any, follow it): every forward has a row.
    shift = 1 if main == 0 else 0
    size = int(layout.tokens) + shift
    ids = torch.full((size,), pad_token_id, dtype=torch.long)
    labels = torch.full((size,), IGNORE_INDEX, dtype=torch.long)
    shift_labels = torch.full((size,), IGNORE_INDEX, dtype=torch.long)
    span_seq = torch.full((size,), -1, dtype=torch.long)
    is_real = torch.zeros(size, dtype=torch.bool)
    positions = torch.zeros(size, dtype=torch.long)
    positions[shift:] = torch.from_numpy(np.asarray(layout.positions, np.int64))
    cache: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for seq, _chunk, offset, start, length, pad in spans.tolist():
        if seq not in cache:
            if seq not in samples:
                raise ValueError(f"sequence {seq} of the plan is missing from the batch: the "
                                 f"layout of GPU ({layout.dp_rank}, {layout.micro_batch}, "
                                 f"{layout.cp_rank}) holds it, samples has no entry {seq}")
            full_ids, full_labels = _tokens(samples[seq])
            starts = torch.cat([full_labels.new_full((1,), IGNORE_INDEX), full_labels[1:]])
            cache[seq] = (full_ids, starts, shifted(full_labels))
        full_ids, starts, full_shift = cache[seq]
        offset += shift
        ids[offset:offset + length] = full_ids[start:start + length]
        labels[offset:offset + length] = starts[start:start + length]
        shift_labels[offset:offset + length] = full_shift[start:start + length]
        span_seq[offset:offset + length + pad] = seq
        is_real[offset:offset + length] = True
    local = int(layout.local_tokens)
    if shift:
        local_slots: tuple[tuple[int, int], ...] = ((0, 1),)
    else:
        cu = np.asarray(layout.local_cu_seqlens_padded, np.int64)
        local_slots = tuple((int(a), int(b)) for a, b in zip(cu[:-1], cu[1:]) if b > a)
    base = 1 if shift else local
    rings = tuple((r.first, r.size, base + r.start - local, base + r.stop - local)
                  for r in layout.ring_views())
    where = (int(layout.dp_rank), int(layout.micro_batch), int(layout.cp_rank))
    if plan is not None:
        schedule = attention_schedule(plan, *where, empty_row=True)
    elif not rings and not len(layout.chunk_passes):
        schedule = local_schedule(local_slots, size, where)
    else:
        schedule = None
    gpu = GpuLayout(local_slots, rings, span_seq, positions, is_real, *where, schedule)
    return {"input_ids": ids[None], "position_ids": positions[None], "labels": labels[None],
            "shift_labels": shift_labels[None], "skrull_layout": gpu}

