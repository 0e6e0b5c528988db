"""Plans to per-rank tensors: ``collate`` for one global batch, ``SkrullLoader`` over a dataset."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

import numpy as np
import torch

from .._layout import Layout, Ring
from .._plan import Plan
from .._scheduler import Scheduler

#: A sample: a 1-D tensor of token ids (labels = the next token), or a mapping with
#: ``input_ids`` and ``labels`` of the same length.
Sample = Union[torch.Tensor, Mapping[str, torch.Tensor]]


@dataclass
class MicroBatch:
    """One GPU's tensors for one micro-batch, flat over its buffer (local group, then sharded).

    ``input_ids``, ``labels`` (``ignore_index`` on padding and unlabelled tokens),
    ``position_ids`` (RoPE positions), ``loss_weights`` (``1 / label_tokens`` on labelled real
    tokens, else 0), ``seq_ids`` (index in the global batch, -1 on padding) and ``sample_ids``
    (dataset index, -1 on padding) have one entry per token. The varlen metadata is the
    layout's: ``local_cu_seqlens`` (real lengths) and ``local_cu_seqlens_padded`` (buffer
    offsets; they differ only with ``pad_local``) over ``[0, local_tokens)``;
    ``sharded_cu_seqlens`` (real), ``sharded_cu_seqlens_padded`` and ``rank_cu_seqlens`` over
    ``[local_tokens, tokens)``. ``rings`` splits the sharded group by CP group (the whole
    group's ring first, then sub-groups, largest first; ``skrull.Ring``: buffer rows
    ``[start, stop)`` and that ring's ``cu_seqlens`` from 0): one CP attention call per ring,
    over that ring's process group (``cp_ring_groups``).
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    loss_weights: torch.Tensor
    seq_ids: torch.Tensor
    sample_ids: torch.Tensor
    local_cu_seqlens: torch.Tensor
    local_cu_seqlens_padded: torch.Tensor
    sharded_cu_seqlens: torch.Tensor
    sharded_cu_seqlens_padded: torch.Tensor
    rank_cu_seqlens: torch.Tensor
    local_tokens: int
    local_max_seqlen: int
    sharded_max_seqlen: int
    sharded_max_seqlen_padded: int
    rank_max_seqlen: int
    layout: Layout
    rings: list[Ring]

    @property
    def num_tokens(self) -> int:
        """Tokens in this GPU's buffer, padding included."""
        return int(self.input_ids.numel())

    @property
    def is_empty(self) -> bool:
        """True for an empty lockstep micro-batch: run only to keep step with the other DP
        ranks (it holds no token but joins every collective)."""
        return self.layout.is_empty_micro_batch

    #: The name older code used for ``is_empty``.
    is_padding = is_empty

    def to(self, device: torch.device | str, non_blocking: bool = False) -> MicroBatch:
        """A copy with every tensor on ``device``."""
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                 for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}
        return replace(self, **moved)


def _split(sample: Sample, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(sample, Mapping):
        ids, labels = torch.as_tensor(sample["input_ids"]), torch.as_tensor(sample["labels"])
        if ids.shape != labels.shape or ids.dim() != 1:
            raise ValueError("input_ids and labels must be 1-D and of the same length")
        return ids.long(), labels.long()
    ids = torch.as_tensor(sample).long()
    return ids, torch.cat([ids[1:], ids.new_full((1,), ignore_index)])


def default_label_tokens(plan: Plan, shifted: bool) -> int:
    """Labelled tokens of the global batch: every token, less one per sequence when labels
    are the next token."""
    return plan.summary.total_tokens - (plan.summary.sequences if shifted else 0)


def require_lockstep(scheduler_or_plan: Scheduler | Plan) -> None:
    """Raises ``ValueError`` unless every DP rank runs the same number of micro-batches in
    every plan: DP 1, or ``lockstep=True``."""
    c = scheduler_or_plan.config
    if c.dp > 1 and not c.lockstep:
        raise ValueError("skrull.torch needs the same micro-batch count on every DP rank: "
                         "build the Scheduler with lockstep=True (DP ranks then run empty "
                         "micro-batches instead of fewer)")


def collate(plan: Plan, samples: Sequence[Sample] | Callable[[int], Sample], dp_rank: int,
            cp_rank: int, *, sample_ids: Sequence[int] | None = None,
            label_tokens: int | None = None, pad_id: int = 0, ignore_index: int = -100,
            weight_dtype: torch.dtype = torch.float32) -> list[MicroBatch]:
    """This GPU's micro-batches for one planned global batch: ``micro_batches_per_dp[dp_rank]``
    of them, the same count on every DP rank (the plan must be lockstep when DP > 1; its empty
    micro-batches hold no token), so collectives stay in step.

    ``samples[i]`` (or ``samples(i)``) is sequence ``i`` of the batch (its length must be
    ``plan.lengths[i]``); only the sequences this GPU holds are loaded. They are laid out in
    the DP rank's token stream (``plan.dp_sequences``), and each buffer is filled with one
    gather through the layout's ``gather_index``. ``label_tokens`` normalises the loss
    (default: ``default_label_tokens``, exact when no label is masked).
    """
    require_lockstep(plan)
    get = samples if callable(samples) else samples.__getitem__
    ids_of = np.arange(len(plan.lengths)) if sample_ids is None else np.asarray(sample_ids)
    layouts = plan.rank_layouts(dp_rank, cp_rank)
    stream_seqs = plan.dp_sequences(dp_rank).tolist()
    offsets = plan.dp_stream_offsets(dp_rank).tolist()
    needed = {int(s) for lay in layouts for s in lay.spans["seq"].tolist()}
    # The DP rank's token stream: this GPU's sequences at their offsets; the others (held by
    # other CP ranks) are never gathered, so they are not loaded.
    ids_stream = torch.full((offsets[-1],), pad_id, dtype=torch.long)
    labels_stream = torch.full((offsets[-1],), ignore_index, dtype=torch.long)
    shifted = None
    for k, s in enumerate(stream_seqs):
        if s not in needed:
            continue
        sample = get(s)
        shifted = not isinstance(sample, Mapping) if shifted is None else shifted
        ids, labels = _split(sample, ignore_index)
        if ids.numel() != plan.lengths[s]:
            raise ValueError(f"sample {s} has {ids.numel()} tokens, the plan says "
                             f"{plan.lengths[s]}")
        ids_stream[offsets[k]:offsets[k + 1]] = ids
        labels_stream[offsets[k]:offsets[k + 1]] = labels
    total = label_tokens if label_tokens is not None else \
        default_label_tokens(plan, shifted if shifted is not None else True)
    return [_gather(lay, ids_stream, labels_stream, ids_of, total, pad_id, ignore_index,
                    weight_dtype) for lay in layouts]


def _gather(lay: Layout, ids_stream: torch.Tensor, labels_stream: torch.Tensor,
            ids_of: np.ndarray, label_tokens: int, pad_id: int, ignore_index: int,
            weight_dtype: torch.dtype) -> MicroBatch:
    """Fills the buffer with one gather through ``lay.gather_index`` (-1 = padding)."""
    index = torch.tensor(lay.gather_index)  # a copy: the layout's arrays are read-only
    pad = index < 0
    source = index.clamp(min=0)
    input_ids = ids_stream.index_select(0, source).masked_fill_(pad, pad_id)
    labels = labels_stream.index_select(0, source).masked_fill_(pad, ignore_index)
    weights = (labels != ignore_index).to(weight_dtype) / max(label_tokens, 1)
    token_seq = lay.token_seq
    seq_t = torch.from_numpy(token_seq.astype(np.int64))
    sample = torch.from_numpy(np.where(token_seq >= 0, ids_of[np.maximum(token_seq, 0)], -1))

    def i32(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a, np.int32))
    return MicroBatch(
        input_ids=input_ids, labels=labels,
        position_ids=torch.from_numpy(lay.positions.astype(np.int64)), loss_weights=weights,
        seq_ids=seq_t, sample_ids=sample.long(), local_cu_seqlens=i32(lay.local_cu_seqlens),
        local_cu_seqlens_padded=i32(lay.local_cu_seqlens_padded),
        sharded_cu_seqlens=i32(lay.sharded_cu_seqlens),
        sharded_cu_seqlens_padded=i32(lay.sharded_cu_seqlens_padded),
        rank_cu_seqlens=i32(lay.rank_cu_seqlens), local_tokens=lay.local_tokens,
        local_max_seqlen=lay.local_max_seqlen, sharded_max_seqlen=lay.sharded_max_seqlen,
        sharded_max_seqlen_padded=lay.sharded_max_seqlen_padded,
        rank_max_seqlen=lay.rank_max_seqlen, layout=lay, rings=lay.ring_views())


@dataclass
class GlobalBatch:
    """One optimizer step for this rank: the dataset indices of the global batch, its plan
    (identical on every rank) and this GPU's micro-batches."""

    step: int
    indices: np.ndarray
    plan: Plan
    micro_batches: list[MicroBatch]


class SkrullLoader:
    """Iterates a map-style dataset with known lengths in global batches, planned by
    ``scheduler``; yields this rank's ``GlobalBatch`` per step.

    Every rank builds the same order (``seed`` + ``set_epoch``) and the same plan from the
    same lengths, so nothing is broadcast; check ``batch.plan.digest()`` across ranks once if
    in doubt. ``collate_kwargs`` go to ``collate``.
    """

    def __init__(self, dataset: Sequence[Sample], lengths: Sequence[int] | np.ndarray,
                 scheduler: Scheduler, dp_rank: int, cp_rank: int, global_batch_size: int, *,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 **collate_kwargs: Any) -> None:
        require_lockstep(scheduler)
        self.dataset, self.lengths = dataset, np.asarray(lengths, np.int64)
        if len(self.lengths) != len(dataset):
            raise ValueError(f"{len(self.lengths)} lengths for {len(dataset)} samples")
        self.scheduler, self.dp_rank, self.cp_rank = scheduler, dp_rank, cp_rank
        self.global_batch_size, self.shuffle, self.seed = global_batch_size, shuffle, seed
        self.drop_last, self.collate_kwargs, self.epoch = drop_last, collate_kwargs, 0

    def set_epoch(self, epoch: int) -> None:
        """Reshuffles for ``epoch`` (every rank must call it with the same value)."""
        self.epoch = epoch

    def __len__(self) -> int:
        n, b = len(self.lengths), self.global_batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self) -> Iterator[GlobalBatch]:
        order = np.arange(len(self.lengths))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(order)
        for step in range(len(self)):
            idx = order[step * self.global_batch_size:(step + 1) * self.global_batch_size]
            plan = self.scheduler.plan(self.lengths[idx])
            def sample(i: int, idx: np.ndarray = idx) -> Sample:
                return self.dataset[int(idx[i])]
            mbs = collate(plan, sample, self.dp_rank, self.cp_rank, sample_ids=idx.tolist(),
                          **self.collate_kwargs)
            yield GlobalBatch(step, idx, plan, mbs)
