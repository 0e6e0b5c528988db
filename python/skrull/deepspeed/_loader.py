"""The global batches of a run and one GPU's micro-batches of each: ``Step`` and
``MicroBatch``, collated as ``SkrullTrainer`` collates them."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from .._plan import Plan


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """Dataset indices of one epoch in the order the global batches take them: the order of
    transformers' ``BatchRebalanceSampler`` (and so of ``SkrullTrainer``): ``torch.randperm``
    seeded with ``seed + epoch``.

    Parameters
    ----------
    n : int
        Dataset size.
    seed, epoch : int
        The shuffle's seed is ``seed + epoch``.
    shuffle : bool, optional
        False: dataset order.

    Returns
    -------
    list of int

    Example
    -------
    >>> from skrull.deepspeed import epoch_order
    >>> epoch_order(4, seed=0, epoch=0, shuffle=False)
    [0, 1, 2, 3]
    >>> sorted(epoch_order(4, seed=42, epoch=1))
    [0, 1, 2, 3]
    """
    if not shuffle:
        return list(range(n))
    import torch
    order: list[int] = torch.randperm(
        n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    return order


def label_count(sample: Mapping[str, Any], ignore_index: int = -100) -> int:
    """Next-token targets of one sample: its ``labels`` (default: ``input_ids``) after the
    first position that are not ``ignore_index``, as ``SkrullCollator``'s ``shift_labels``
    count them.

    Parameters
    ----------
    sample : mapping
        ``input_ids`` and optionally ``labels`` (unshifted, as HF datasets hold them).
    ignore_index : int, optional
        The label that adds nothing (default -100).

    Returns
    -------
    int

    Example
    -------
    >>> from skrull.deepspeed import label_count
    >>> label_count({"input_ids": [5, 6, 7]}), label_count({"input_ids": [5, 6, 7],
    ...                                                      "labels": [-100, -100, 7]})
    (2, 1)
    """
    labels = sample.get("labels")
    if labels is None:
        labels = sample["input_ids"]
    arr = np.asarray(labels).reshape(-1)
    return int((arr[1:] != ignore_index).sum())


class MicroBatch(dict):  # type: ignore[type-arg]
    """One GPU's inputs for one micro-batch: a dict to pass to the engine (``engine(**mb)``),
    with where it sits in the step.

    The keys are ``SkrullTrainer``'s: ``input_ids``, ``position_ids``, ``labels``,
    ``shift_labels`` (``[1, T]``), the flash-attention varlen arguments without context
    parallelism, ``skrull_attention`` (the micro-batch's ``skrull.hf.SkrullAttention``) with
    it, plus ``num_items_in_batch`` (the step's label tokens over all ranks) and
    ``use_cache=False``.

    Parameters
    ----------
    inputs : mapping
        The keyword arguments of the model's forward.
    index : int
        Which micro-batch of this DP rank, from 0.
    count : int
        How many this DP rank runs in the step.
    step : Step
        The step it belongs to.

    Example
    -------
    >>> from skrull.deepspeed import MicroBatch
    >>> mb = MicroBatch({"input_ids": [[1, 2]]}, index=1, count=2, step=None)
    >>> sorted(mb), mb.index, mb.last
    (['input_ids'], 1, True)
    """

    def __init__(self, inputs: Mapping[str, Any], index: int, count: int, step: Any) -> None:
        super().__init__(inputs)
        self.index, self.count, self.step = index, count, step

    @property
    def last(self) -> bool:
        """True on the step's last micro-batch of this DP rank (its accumulation boundary)."""
        return self.index == self.count - 1


class Step:
    """One optimizer step on this GPU: the global batch's plan and this GPU's micro-batches,
    collated as they are iterated (only the samples this GPU holds are loaded).

    Made by ``SkrullDeepSpeed.steps``; ``len(step)`` is this DP rank's micro-batch count.

    Parameters
    ----------
    epoch, index : int
        The epoch and the global batch within it, from 0.
    indices : numpy.ndarray
        Dataset index of each plan sequence.
    plan : Plan
        The global batch's plan (the same on every rank).
    label_tokens : int
        Label tokens of the whole global batch (the loss's divisor on every rank).
    dp_rank, cp_rank : int
        This GPU.
    collate : callable
        ``collate(step, micro_batch)`` -> the model's keyword arguments.

    Example
    -------
    >>> import numpy as np, skrull
    >>> from skrull.deepspeed import Step
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=8).plan([5, 6])
    >>> step = Step(0, 0, np.array([3, 1]), plan, 9, 0, 0, lambda s, m: {"m": m})
    >>> len(step), [(dict(mb), mb.last) for mb in step]
    (2, [({'m': 0}, False), ({'m': 1}, True)])
    """

    def __init__(self, epoch: int, index: int, indices: np.ndarray, plan: Plan,
                 label_tokens: int, dp_rank: int, cp_rank: int,
                 collate: Callable[[Step, int], Mapping[str, Any]]) -> None:
        self.epoch, self.index, self.indices, self.plan = epoch, index, indices, plan
        self.label_tokens, self.dp_rank, self.cp_rank = label_tokens, dp_rank, cp_rank
        self._collate = collate

    def __len__(self) -> int:
        return int(self.plan.micro_batches_per_dp[self.dp_rank])

    def __iter__(self) -> Iterator[MicroBatch]:
        count = len(self)
        for m in range(count):
            yield MicroBatch(self._collate(self, m), m, count, self)

    def samples_of(self, micro_batch: int) -> list[int]:
        """Dataset indices of one of this DP rank's micro-batches (every CP rank's).

        Parameters
        ----------
        micro_batch : int
            ``0 <= micro_batch < len(step)``.

        Returns
        -------
        list of int

        Example
        -------
        >>> import numpy as np, skrull
        >>> from skrull.deepspeed import Step
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=8).plan([5, 6])
        >>> step = Step(0, 0, np.array([3, 1]), plan, 9, 0, 0, dict)
        >>> step.samples_of(0), step.samples_of(1)     # dataset indices 1 and 3
        ([1], [3])
        """
        return [int(self.indices[s]) for s in self.plan.members_of(self.dp_rank, micro_batch)]

    def __repr__(self) -> str:
        return (f"Step(epoch={self.epoch}, index={self.index}, sequences={len(self.indices)}, "
                f"micro_batches={len(self)}, label_tokens={self.label_tokens})")


def collate_hf(dataset: Sequence[Any], cp: int, pad_token_id: int,
               ring_groups: Any) -> Callable[[Step, int], dict[str, Any]]:
    """The collation ``SkrullTrainer`` uses, for one GPU: ``SkrullCollator`` without context
    parallelism, ``collate_gpu_buffer`` and the micro-batch's ``SkrullAttention`` with it.

    Parameters
    ----------
    dataset : sequence
        Samples: mappings with ``input_ids`` and optionally ``labels``.
    cp : int
        CP ranks per DP rank.
    pad_token_id : int
        Token id of padding (an empty micro-batch's one token, zigzag padding).
    ring_groups : dict or None
        ``skrull.torch.cp_ring_groups`` of this rank (with ``cp > 1``).

    Returns
    -------
    callable
        ``collate(step, micro_batch)`` -> the model's keyword arguments.

    Example
    -------
    >>> import numpy as np, skrull
    >>> from skrull.deepspeed import Step, collate_hf
    >>> data = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=8).plan([3, 2])
    >>> step = Step(0, 0, np.array([0, 1]), plan, 3, 0, 0, collate_hf(data, 1, 0, None))
    >>> mb = next(iter(step))
    >>> mb["input_ids"].tolist(), mb["position_ids"].tolist(), mb["num_items_in_batch"]
    ([[1, 2, 3, 4, 5]], [[0, 1, 2, 0, 1]], 3)
    """
    from ..hf._attention import SkrullAttention
    from ..hf._collator import SkrullCollator, collate_gpu_buffer
    collator = SkrullCollator(pad_token_id)

    def collate(step: Step, m: int) -> dict[str, Any]:
        plan = step.plan
        if cp == 1:
            out = collator([dataset[int(i)] for i in step.samples_of(m)])
        else:
            layout = plan.layout(step.dp_rank, m, step.cp_rank)
            wanted = {int(s) for s in layout.spans["seq"].tolist()}
            samples = {s: dataset[int(step.indices[s])] for s in wanted}
            out = collate_gpu_buffer(layout, samples, pad_token_id, plan=plan)
            out["skrull_attention"] = SkrullAttention(out.pop("skrull_layout"), ring_groups)
        out["num_items_in_batch"] = step.label_tokens
        out["use_cache"] = False
        return out
    return collate
