"""Plans to per-rank tensors: ``collate`` for one global batch, ``SkrullLoader`` over a dataset."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

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

    Made by ``collate``; the per-token tensors have one entry per buffer row (padding
    included). The varlen metadata is the layout's: int32 ``cu_seqlens`` over
    ``[0, local_tokens)`` for the local group and over ``[local_tokens, tokens)`` for the
    sharded group.

    Parameters
    ----------
    input_ids : torch.Tensor
        int64 token ids (``pad_id`` on padding).
    labels : torch.Tensor
        int64 targets (``ignore_index`` on padding and unlabelled tokens).
    position_ids : torch.Tensor
        int64 RoPE positions: each token's true position in its sequence.
    loss_weights : torch.Tensor
        ``1 / label_tokens`` on labelled real tokens, else 0 (``packed_loss``).
    seq_ids : torch.Tensor
        int64 index in the global batch, -1 on padding.
    sample_ids : torch.Tensor
        int64 dataset index, -1 on padding.
    local_cu_seqlens, local_cu_seqlens_padded : torch.Tensor
        Local group: real lengths and buffer offsets (they differ only with ``pad_local``).
    sharded_cu_seqlens, sharded_cu_seqlens_padded, rank_cu_seqlens : torch.Tensor
        Sharded group: the whole sequences' real and padded lengths (global, as
        TransformerEngine takes them), and this rank's share of each (offsets in its rows
        from ``local_tokens``, as ring-flash-attn's zigzag varlen takes them).
    local_tokens : int
        Rows of the local group.
    local_max_seqlen, sharded_max_seqlen, sharded_max_seqlen_padded, rank_max_seqlen : int
        The longest entry of the matching ``cu_seqlens``.
    layout : Layout
        The ``skrull.Layout`` the buffer was gathered through.
    rings : list of Ring
        The sharded group split by CP group (the whole group's ring first, then sub-groups,
        largest first; ``skrull.Ring``: buffer rows ``[start, stop)`` and that ring's
        ``cu_seqlens`` from 0): one CP attention call per ring, over that ring's process group
        (``cp_ring_groups``).
    plan : Plan or None
        The global batch's plan (``collate`` sets it): the attention builds its schedule from
        it (``skrull.torch.attention.attention_schedule``).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import collate
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
    >>> mb.position_ids.tolist()
    [0, 1, 2, 3, 4, 0, 1, 2]
    >>> mb.labels.tolist()                       # the next token; -100 ends each sequence
    [1, 2, 3, 4, -100, 1, 2, -100]
    >>> mb.local_cu_seqlens.tolist(), mb.local_tokens, mb.num_tokens, mb.is_empty
    ([0, 5, 8], 8, 8, False)
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
    plan: Optional[Plan] = None

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
        """A copy with every tensor on ``device``.

        Parameters
        ----------
        device : torch.device or str
            Where the tensors go (``"cuda"``, ``torch.device("cuda", 1)``...).
        non_blocking : bool, optional
            Passed to ``Tensor.to`` (asynchronous copies from pinned memory).

        Returns
        -------
        MicroBatch
            A new micro-batch; ``layout``, ``rings`` and the ints are shared.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import collate
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([4])
        >>> mb = collate(plan, [torch.arange(4)], dp_rank=0, cp_rank=0)[0]
        >>> mb.to("cpu").input_ids.device
        device(type='cpu')
        """
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
    are the next token.

    Parameters
    ----------
    plan : Plan
        The global batch's plan.
    shifted : bool
        True when labels are the next token (samples given as plain tensors of ids): the
        last token of each sequence has no label.

    Returns
    -------
    int
        ``plan.summary.total_tokens``, less ``plan.summary.sequences`` when ``shifted``.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch import default_label_tokens
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([5, 3, 4])
    >>> default_label_tokens(plan, shifted=True), default_label_tokens(plan, shifted=False)
    (9, 12)
    """
    return plan.summary.total_tokens - (plan.summary.sequences if shifted else 0)


def require_lockstep(scheduler_or_plan: Scheduler | Plan) -> None:
    """Raises ``ValueError`` unless every DP rank runs the same number of micro-batches in
    every plan: DP 1, or ``lockstep=True``.

    Parameters
    ----------
    scheduler_or_plan : Scheduler or Plan
        Its ``config`` is checked.

    Raises
    ------
    ValueError
        DP above 1 without ``lockstep=True``.

    Example
    -------
    >>> import skrull
    >>> from skrull.torch import require_lockstep
    >>> require_lockstep(skrull.Scheduler(dp=2, cp=1, bucket_tokens=64, lockstep=True))
    >>> require_lockstep(skrull.Scheduler(dp=2, cp=1, bucket_tokens=64))
    Traceback (most recent call last):
    ...
    ValueError: skrull.torch needs the same micro-batch count on every DP rank: ...
    """
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

    Only the sequences this GPU holds are loaded. They are laid out in the DP rank's token
    stream (``plan.dp_sequences``), and each buffer is filled with one gather through the
    layout's ``gather_index``.

    Parameters
    ----------
    plan : Plan
        The global batch's plan (lockstep when DP > 1).
    samples : sequence or callable
        ``samples[i]`` (or ``samples(i)``) is sequence ``i`` of the batch, of
        ``plan.lengths[i]`` tokens: a 1-D tensor of token ids (labels: the next token) or a
        mapping with 1-D ``input_ids`` and ``labels`` of the same length.
    dp_rank, cp_rank : int
        This GPU's coordinates (``0 <= dp_rank < dp``, ``0 <= cp_rank < cp``).
    sample_ids : sequence of int, optional
        Dataset index of each sequence (``MicroBatch.sample_ids``); default ``0 .. n``.
    label_tokens : int, optional
        What the loss is normalised by (``loss_weights = 1 / label_tokens``); default
        ``default_label_tokens``, exact when no label is masked.
    pad_id : int, optional
        Token id of padding rows (default 0).
    ignore_index : int, optional
        Label of padding and unlabelled tokens (default -100).
    weight_dtype : torch.dtype, optional
        dtype of ``loss_weights`` (default float32).

    Returns
    -------
    list of MicroBatch
        One per micro-batch of the DP rank, in order.

    Raises
    ------
    ValueError
        DP above 1 without lockstep (``require_lockstep``), a sample whose length is not
        the plan's, or a mapping sample whose ``input_ids`` and ``labels`` are not 1-D and of
        the same length.
    LayoutError
        ``NO_SUCH_GPU`` for a rank out of range (``Plan.rank_layouts``).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import collate
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3, 4])
    >>> samples = [torch.arange(5), torch.arange(3), torch.arange(4)]
    >>> mbs = collate(plan, samples, dp_rank=0, cp_rank=0)
    >>> [mb.num_tokens for mb in mbs]
    [12]
    >>> mbs[0].seq_ids.tolist()
    [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    >>> round(float(mbs[0].loss_weights.sum()), 6)   # 9 labelled tokens of 1/9 each
    1.0
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
    return [_gather(plan, lay, ids_stream, labels_stream, ids_of, total, pad_id, ignore_index,
                    weight_dtype) for lay in layouts]


def _gather(plan: Plan, lay: Layout, ids_stream: torch.Tensor, labels_stream: torch.Tensor,
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
        rank_max_seqlen=lay.rank_max_seqlen, layout=lay, rings=lay.ring_views(), plan=plan)


@dataclass
class GlobalBatch:
    """One optimizer step for this rank: the dataset indices of the global batch, its plan
    (identical on every rank) and this GPU's micro-batches.

    Parameters
    ----------
    step : int
        The step within the epoch, from 0.
    indices : numpy.ndarray
        Dataset index of each sequence of the global batch (plan order).
    plan : Plan
        The global batch's plan.
    micro_batches : list of MicroBatch
        This GPU's micro-batches (``collate``).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import SkrullLoader
    >>> scheduler = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True)
    >>> data = [torch.arange(n) for n in (5, 3, 4, 6)]
    >>> batch = next(iter(SkrullLoader(data, [5, 3, 4, 6], scheduler, 0, 0, 2)))
    >>> batch.step, batch.indices.tolist(), len(batch.micro_batches)
    (0, [0, 1], 1)
    """

    step: int
    indices: np.ndarray
    plan: Plan
    micro_batches: list[MicroBatch]


class SkrullLoader:
    """Iterates a map-style dataset with known lengths in global batches, planned by
    ``scheduler``; yields this rank's ``GlobalBatch`` per step.

    Every rank builds the same order (``seed`` + ``set_epoch``) and the same plan from the
    same lengths, so nothing is broadcast; check ``batch.plan.digest()`` across ranks once if
    in doubt. ``len(loader)`` is the number of steps.

    Parameters
    ----------
    dataset : sequence
        Samples as ``collate`` takes them (1-D id tensors, or mappings with ``input_ids``
        and ``labels``).
    lengths : sequence of int or numpy.ndarray
        Token count of every sample.
    scheduler : Scheduler
        Plans each global batch (lockstep when DP > 1).
    dp_rank, cp_rank : int
        This GPU's coordinates.
    global_batch_size : int
        Samples per step, over all DP ranks.
    shuffle : bool, optional
        Shuffle per ``(seed, epoch)`` (default False: dataset order).
    seed : int, optional
        The shuffle seed, the same on every rank.
    drop_last : bool, optional
        Drop a last, smaller global batch.
    **collate_kwargs
        Passed to ``collate`` (``pad_id``, ``ignore_index``, ``label_tokens``...).

    Yields
    ------
    GlobalBatch
        One per step.

    Raises
    ------
    ValueError
        DP above 1 without lockstep, or ``lengths`` not one per sample.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import SkrullLoader
    >>> scheduler = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True)
    >>> data = [torch.arange(n) for n in (5, 3, 4, 6)]
    >>> loader = SkrullLoader(data, [5, 3, 4, 6], scheduler, dp_rank=0, cp_rank=0,
    ...                       global_batch_size=2)
    >>> [(b.step, b.indices.tolist(), b.plan.summary.total_tokens) for b in loader]
    [(0, [0, 1], 8), (1, [2, 3], 10)]
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
        """Reshuffles for ``epoch`` (every rank must call it with the same value).

        Parameters
        ----------
        epoch : int
            Seeds the order with ``(seed, epoch)`` when ``shuffle``.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import SkrullLoader
        >>> scheduler = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True)
        >>> data = [torch.arange(n) for n in (5, 3, 4, 6)]
        >>> loader = SkrullLoader(data, [5, 3, 4, 6], scheduler, 0, 0, 4, shuffle=True)
        >>> loader.set_epoch(1)
        >>> sorted(next(iter(loader)).indices.tolist())
        [0, 1, 2, 3]
        """
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
