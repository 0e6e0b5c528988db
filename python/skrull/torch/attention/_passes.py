"""``MicroBatchPasses``: everything one GPU runs for one micro-batch, pass by pass: its local
and sharded groups (one ``CpAttention``), then every chunk pass of its chunked sequences (one
``ChunkedSequence`` each), as ChunkFlow's state-aware schedule runs them.

``loss(main_loss, pass_loss)`` returns the micro-batch's loss as one autograd graph, so one
``backward()`` (and one DDP reduction) trains it. The passes' forwards run in order; the first
``count - K`` passes of each chunked sequence run under non-reentrant activation checkpointing
(their activations are dropped and recomputed in the backward pass), the last ``K`` keep
theirs. The backward then runs the kept chunks in reverse order, then recomputes and runs each
earlier chunk, latest first: autograd runs the nodes made last first, and a chunk's keys and
values receive the gradient of every later chunk (they read them from the K/V state) before
its own pass runs backward. Every member of a chunk's group runs the same passes in the same
order, so their exchanges (forward, recomputation and backward) pair up.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch.utils.checkpoint import checkpoint

from ._attend import CpAttention
from ._chunks import ChunkAttention, ChunkedSequence, split_passes
from ._schedule import AttentionSchedule, ChunkPassSchedule

#: ``main_loss(attention)``: the loss of the local and sharded groups' rows.
MainLoss = Callable[[CpAttention], torch.Tensor]
#: ``pass_loss(chunk_pass, attention)``: the loss of one chunk pass's rows.
PassLoss = Callable[[ChunkPassSchedule, ChunkAttention], torch.Tensor]


class MicroBatchPasses:
    """The passes of one GPU's micro-batch, built once (no collective) from its schedule.

    Parameters
    ----------
    schedule : AttentionSchedule
        This GPU's schedule (``attention_schedule``).
    ring_groups : mapping, optional
        ``(first, size)`` -> process group (``skrull.torch.cp_ring_groups``): the rings'
        groups and each chunked sequence's group of more than one rank.
    backend : str, optional
        A kernel of ``BACKENDS`` (default by device and dtype).
    verify : bool, optional
        Compare fingerprints on each ring's and each chunk pass's first exchange.

    Raises
    ------
    ValueError
        A ring or a chunk group of more than one rank without its process group, or one
        whose size or rank does not match (``check_group``); passes out of order.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch.attention import MicroBatchPasses, attention_schedule
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
    ...                         chunk_size=4).plan([10])
    >>> passes = MicroBatchPasses(attention_schedule(plan, 0, 0, 0))
    >>> passes.main is None, [p.recompute for p in passes.schedule.passes]   # K = 1
    (True, [True, True, False])
    >>> q = torch.randn(10, 2, 8, requires_grad=True)
    >>> loss = passes.loss(None, lambda p, att: att(*(q[p.offset:p.offset + p.tokens],) * 3)
    ...                    .square().sum())
    >>> loss.backward()                                  # one graph: the chunk schedule
    >>> q.grad.shape
    torch.Size([10, 2, 8])
    """

    def __init__(self, schedule: AttentionSchedule,
                 ring_groups: Mapping[tuple[int, int], Any] | None = None, *,
                 backend: str | None = None, verify: bool = True) -> None:
        self.schedule = schedule
        self.main = (CpAttention(schedule, ring_groups, backend=backend, verify=verify)
                     if schedule.main_needed else None)
        self.sequences = []
        for passes in split_passes(schedule.passes):
            first, size = passes[0].first, passes[0].size
            group = None
            if size > 1:
                group = None if ring_groups is None else ring_groups.get((first, size))
            self.sequences.append(ChunkedSequence(
                passes, group, schedule.cp_rank, schedule.fingerprint if verify else None,
                backend=backend))

    def outputs(self, main: MainLoss | None, each: PassLoss) -> list[torch.Tensor]:
        """``main(main attention)`` (when the local and sharded groups run) and ``each(chunk
        pass, attention)`` of every chunk pass, in order, every pass keeping its activations
        (no recomputation): a whole buffer's outputs, e.g. its logits, for checks. Train with
        ``loss``, whose memory is bounded.

        Parameters
        ----------
        main : callable or None
            ``main(attention)``: the local and sharded rows' output (None when this GPU
            runs only chunk passes).
        each : callable
            ``each(chunk_pass, attention)``: one chunk pass's output.

        Returns
        -------
        list of torch.Tensor
            The outputs, pass by pass (buffer order).

        Raises
        ------
        ValueError
            ``main`` is None although the local and sharded groups run.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch.attention import MicroBatchPasses, attention_schedule
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4).plan([10])
        >>> passes = MicroBatchPasses(attention_schedule(plan, 0, 0, 0))
        >>> x = torch.randn(10, 2, 8)
        >>> outs = passes.outputs(None, lambda p, att: att(*(x[p.offset:p.offset + p.tokens],)
        ...                                                 * 3))
        >>> [o.shape[0] for o in outs]
        [4, 4, 2]
        """
        out = []
        if self.main is not None:
            if main is None:
                raise ValueError("this micro-batch has local or sharded rows: give main")
            out.append(main(self.main))
        for chunked in self.sequences:
            for p in chunked.passes:
                attention = chunked.attention(p.index)
                attention.begin()
                out.append(each(p, attention))
        return out

    def loss(self, main_loss: MainLoss | None, pass_loss: PassLoss) -> torch.Tensor:
        """The micro-batch's loss: ``main_loss(main)`` (when the local and sharded groups
        run) plus ``pass_loss(chunk_pass, attention)`` of every chunk pass, the recomputed
        ones under activation checkpointing. ``pass_loss`` runs again for each recomputed
        pass in the backward pass: it must compute the same thing (no side effects beyond
        the attention's).

        Parameters
        ----------
        main_loss : callable or None
            ``main_loss(attention)``: the local and sharded rows' loss (None when this GPU
            runs only chunk passes).
        pass_loss : callable
            ``pass_loss(chunk_pass, attention)``: one chunk pass's loss.

        Returns
        -------
        torch.Tensor
            The scalar loss, one autograd graph: call ``backward()`` on it once.

        Raises
        ------
        ValueError
            ``main_loss`` is None although the local and sharded groups run.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch.attention import MicroBatchPasses, attention_schedule
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4).plan([10])
        >>> passes = MicroBatchPasses(attention_schedule(plan, 0, 0, 0))
        >>> x = torch.randn(10, 2, 8, requires_grad=True)
        >>> loss = passes.loss(None, lambda p, att: att(*(x[p.offset:p.offset + p.tokens],)
        ...                                             * 3).sum())
        >>> loss.backward(); x.grad.shape
        torch.Size([10, 2, 8])
        """
        total: torch.Tensor | None = None
        if self.main is not None:
            if main_loss is None:
                raise ValueError("this micro-batch has local or sharded rows: give main_loss")
            total = main_loss(self.main)
        for chunked in self.sequences:
            for p in chunked.passes:
                attention = chunked.attention(p.index)

                def run(p: ChunkPassSchedule = p, attention: ChunkAttention = attention
                        ) -> torch.Tensor:
                    attention.begin()
                    return pass_loss(p, attention)
                got = checkpoint(run, use_reentrant=False) if p.recompute else run()
                total = got if total is None else total + got
        assert total is not None  # main_needed holds when there is no chunk pass
        return total
