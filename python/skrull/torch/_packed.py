"""``PackedAttention``: the attention package (``skrull.torch.attention``, which knows plans and
schedules but no ``MicroBatch``) run over one ``MicroBatch`` of ``collate``. It is
``skrull.torch``'s adapter, as ``skrull.hf.SkrullAttention`` is transformers'."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Callable, Mapping

import torch

from ._collate import MicroBatch
from .attention import CpAttention, MicroBatchPasses, attention_schedule

#: ``loss_fn(part, attention)``: the loss of ``part`` (a ``MicroBatch`` of one pass's rows) with
#: that pass's attention.
PartLoss = Callable[[MicroBatch, Any], torch.Tensor]

#: The per-token fields of a ``MicroBatch``: one entry per buffer row.
_PER_TOKEN = ("input_ids", "labels", "position_ids", "loss_weights", "seq_ids", "sample_ids")


def rows_of(mb: MicroBatch, start: int, stop: int) -> MicroBatch:
    """``mb`` with its per-token tensors cut to buffer rows ``[start, stop)`` (one pass's);
    the layout, the ``cu_seqlens`` and the plan stay the whole micro-batch's.

    Parameters
    ----------
    mb : MicroBatch
        A micro-batch of ``collate``.
    start, stop : int
        Buffer rows.

    Returns
    -------
    MicroBatch

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import collate
    >>> from skrull.torch._packed import rows_of
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
    >>> rows_of(mb, 5, 8).position_ids.tolist()
    [0, 1, 2]
    """
    return replace(mb, **{f.name: getattr(mb, f.name)[start:stop] for f in fields(mb)
                          if f.name in _PER_TOKEN})


class PackedAttention:
    """Causal attention for one micro-batch on one GPU, built once (no collective) and
    called per layer: ``CpAttention`` over the micro-batch's ``attention_schedule``.

    Local group (``[0, local_tokens)``): each sequence attends to itself, no communication.
    Sharded group: keys and values are exchanged per ring (an all-gather, differentiable),
    and each query chunk of a sharded sequence attends to its sequence's keys at earlier or
    equal positions, without a ``rows x sequence`` mask (``skrull.torch.attention``). Calling
    it with ``q`` (``[tokens, heads, head_dim]``) and ``k``, ``v`` (``[tokens, kv heads,
    head_dim]``) over this GPU's buffer returns the output shaped like ``q``; a padding query
    gets zeros.

    Parameters
    ----------
    mb : MicroBatch
        This GPU's micro-batch (``collate``; it carries its plan).
    group : process group, optional
        The whole CP group (``cp_group``); None (default) at CP 1. Without ``ring_groups``,
        all sharded tokens are exchanged over it in one all-gather, which every CP rank of the
        DP rank must join for every micro-batch, empty ones included.
    ring_groups : dict, optional
        ``(first, size)`` -> process group (``cp_ring_groups``): the sharded group then runs
        ring by ring (``MicroBatch.rings``), each exchanged over its own CP group, the whole
        group's or a sub-group's; every GPU of a ring calls it, GPUs outside a ring do not.
    backend : str, optional
        The kernel (``skrull.torch.attention.BACKENDS``); default by device and dtype
        (``"merge"`` on the CPU), ``"dense"`` for the explicit-mask oracle.

    Raises
    ------
    ValueError
        Sharded sequences without a process group, or a process group that does not match
        the plan's ring (see ``CpAttention``).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import PackedAttention, collate
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
    >>> attention = PackedAttention(mb)              # CP 1: no group
    >>> q = k = v = torch.randn(mb.num_tokens, 2, 8)
    >>> attention(q, k, v).shape
    torch.Size([8, 2, 8])
    """

    def __init__(self, mb: MicroBatch, group: Any = None,
                 ring_groups: Mapping[tuple[int, int], Any] | None = None, *,
                 backend: str | None = None) -> None:
        lay = mb.layout
        if mb.plan is None:
            raise ValueError("this MicroBatch carries no plan (make it with skrull.torch."
                             "collate): the attention is scheduled from the plan")
        whole = ring_groups is None
        schedule = attention_schedule(mb.plan, lay.dp_rank, lay.micro_batch, lay.cp_rank,
                                      whole_group=whole)
        if whole:
            cp = mb.plan.config.cp
            ring_groups = {(0, cp): group}
            _refuse_subgroup_chunks(mb)
        self.mb = mb
        self.schedule = schedule
        self.passes = MicroBatchPasses(schedule, ring_groups, backend=backend)
        self.attention: CpAttention | None = self.passes.main

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention output ``[tokens, heads, head_dim]``; ``q``: ``[tokens, heads,
        head_dim]``, ``k``, ``v``: ``[tokens, kv heads, head_dim]`` over this GPU's buffer
        (its local and sharded groups when the micro-batch has chunk passes, which ``loss``
        and ``outputs`` run)."""
        if self.attention is None:
            raise ValueError("this GPU runs only chunk passes in this micro-batch: run them "
                             "with PackedAttention.loss (or outputs)")
        return self.attention(q, k, v)

    def _main_part(self) -> MicroBatch:
        return rows_of(self.mb, 0, self.schedule.tokens)

    def loss(self, loss_fn: PartLoss) -> torch.Tensor:
        """The micro-batch's loss, one autograd graph: ``loss_fn(part, attention)`` of its
        local and sharded rows with this attention, plus that of every chunk pass's rows with
        the pass's attention (``ChunkAttention``), the first ``count - K`` passes of each
        chunked sequence recomputed in the backward pass (``MicroBatchPasses.loss``). Without
        chunk passes it is ``loss_fn(mb, self)``.

        Parameters
        ----------
        loss_fn : callable
            ``(part, attention) -> scalar``: ``part`` a ``MicroBatch`` of the pass's rows
            (``rows_of``), ``attention`` callable as ``attention(q, k, v)`` over them. It runs
            again for each recomputed pass: no side effects.

        Returns
        -------
        torch.Tensor
            The scalar loss; call ``backward()`` on it once.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import PackedAttention, TinyTransformer, collate, packed_loss
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4, lockstep=True).plan([10, 3])
        >>> model = TinyTransformer()
        >>> mb = collate(plan, [torch.arange(10), torch.arange(3)], 0, 0)[1]   # the chunks
        >>> attention = PackedAttention(mb)
        >>> loss = attention.loss(lambda part, att: packed_loss(
        ...     model.forward_part(part, att), part))
        >>> loss.backward()
        """
        main = self.passes.main
        if not self.schedule.passes:
            return loss_fn(self.mb, self)
        return self.passes.loss(
            None if main is None else (lambda att: loss_fn(self._main_part(), self)),
            lambda p, att: loss_fn(rows_of(self.mb, p.offset, p.offset + p.tokens), att))

    def outputs(self, fn: PartLoss) -> torch.Tensor:
        """``fn(part, attention)`` of every pass, concatenated in buffer order, every pass
        keeping its activations: e.g. the whole buffer's logits. Train with ``loss``.

        Parameters
        ----------
        fn : callable
            ``(part, attention) -> tensor`` over the pass's rows (as ``loss``).

        Returns
        -------
        torch.Tensor
            The passes' outputs concatenated along the rows.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import PackedAttention, TinyTransformer, collate
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4, lockstep=True).plan([10])
        >>> mb = collate(plan, [torch.arange(10)], 0, 0)[0]
        >>> model = TinyTransformer()
        >>> PackedAttention(mb).outputs(model.forward_part).shape      # 3 chunk passes
        torch.Size([10, 64])
        """
        main = self.passes.main
        parts = self.passes.outputs(
            None if main is None else (lambda att: fn(self._main_part(), self)),
            lambda p, att: fn(rows_of(self.mb, p.offset, p.offset + p.tokens), att))
        return torch.cat(parts)


def _refuse_subgroup_chunks(mb: MicroBatch) -> None:
    """Without ``ring_groups`` only the whole CP group's process group is known: a chunked
    sequence of this micro-batch on a smaller group cannot run. Raised on every rank of the
    DP rank (the check reads the plan, not this GPU's layout)."""
    plan = mb.plan
    assert plan is not None
    lay = mb.layout
    cp = plan.config.cp
    here = ((plan.dp_rank == lay.dp_rank) & (plan.micro_batch == lay.micro_batch)
            & plan.chunked & (plan.cp_size > 1) & (plan.cp_size < cp))
    if here.any():
        seq = int(here.nonzero()[0][0])
        raise ValueError(
            f"sequence {seq} runs chunked on CP ranks {int(plan.cp_first[seq])}.."
            f"{int(plan.cp_first[seq] + plan.cp_size[seq])}, a sub-group: pass ring_groups "
            "(skrull.torch.cp_ring_groups) so that its chunks are exchanged over that group")
