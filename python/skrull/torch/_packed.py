"""``PackedAttention``: the attention package (``skrull.torch.attention``, which knows plans and
schedules but no ``MicroBatch``) run over one ``MicroBatch`` of ``collate``. It is
``skrull.torch``'s adapter, as ``skrull.hf.SkrullAttention`` is transformers'."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ._collate import MicroBatch
from .attention import CpAttention, attention_schedule


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
            ring_groups = {(0, mb.plan.config.cp): group}
        self.schedule = schedule
        self.attention = CpAttention(schedule, ring_groups, backend=backend)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention output ``[tokens, heads, head_dim]``; ``q``: ``[tokens, heads,
        head_dim]``, ``k``, ``v``: ``[tokens, kv heads, head_dim]`` over this GPU's buffer."""
        return self.attention(q, k, v)
