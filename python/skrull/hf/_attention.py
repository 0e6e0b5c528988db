"""The ``"skrull"`` attention function for transformers models (``AttentionInterface``):
an adapter from transformers' ``[batch, heads, T, dim]`` tensors to
``skrull.torch.attention`` (one attention package for ``skrull.hf`` and ``skrull.torch``).

- Without context parallelism, each sequence of the packed buffer (``cu_seq_lens_q`` from
  ``SkrullCollator``) attends causally within itself.
- With a ``SkrullAttention`` (passed by ``SkrullTrainer`` as the ``skrull_attention`` model
  keyword), the micro-batch's ``AttentionSchedule`` (built from the plan by
  ``collate_gpu_buffer``, no collective) runs: local sequences on this GPU alone, each sharded
  sequence over its CP ring, keys and values exchanged once per layer and ring, every query
  chunk at true positions ``[p0, p1)`` over its sequence's keys ``[0, p1)``.
- A micro-batch with chunk passes (chunking on) runs pass by pass (``SkrullTrainer``), each
  forward with a ``PassAttention`` over that pass's attention; a chunk pass's attention keeps
  its K/V state per layer (``module.layer_idx``).

No ``rows x sequence`` mask is built: time and memory per GPU are linear in its rows plus
the keys its chunks read (``docs/attention.md``). The kernel is picked per device and dtype
(``skrull.torch.attention.pick_backend``; ``$SKRULL_ATTENTION_BACKEND`` overrides it).
Grouped-query attention is handled inside the kernels. Rotary embeddings are applied by the
model from ``position_ids`` before this function runs, so shards are rotated by their true
positions.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..torch.attention import CpAttention, local_schedule
from ._collator import GpuLayout

#: The name to pass as ``attn_implementation`` (registered on import of ``skrull.hf``).
ATTENTION_NAME = "skrull"


def _thd(x: torch.Tensor) -> torch.Tensor:
    """``[1, heads, T, dim]`` -> ``[T, heads, dim]`` (a view)."""
    return x[0].transpose(0, 1)


class PassAttention:
    """transformers' ``[1, heads, T, dim]`` tensors to one pass's attention of
    ``skrull.torch.attention`` (``CpAttention`` of the local and sharded rows, or a chunk
    pass's ``ChunkAttention``), passed as the ``skrull_attention`` model keyword.

    Parameters
    ----------
    attention : callable
        ``attention(q, k, v, scale, dropout[, layer=])`` over ``[T, heads, dim]`` tensors.
    tokens : int
        ``T``: the pass's rows (a chunk pass without rows here runs one padding row).
    layered : bool, optional
        Pass the layer's index (``module.layer_idx``) on: a chunk pass's attention keeps
        K/V state per layer.

    Example
    -------
    >>> import torch
    >>> from skrull.hf import PassAttention
    >>> from skrull.torch.attention import CpAttention, local_schedule
    >>> attention = PassAttention(CpAttention(local_schedule(((0, 3),), 3)), 3)
    >>> attention(*(torch.randn(1, 2, 3, 8),) * 3).shape
    torch.Size([1, 2, 3, 8])
    """

    def __init__(self, attention: Any, tokens: int, *, layered: bool = False) -> None:
        self.attention, self.tokens, self.layered = attention, tokens, layered

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scaling: float | None = None, dropout: float = 0.0,
                 layer: int | None = None) -> torch.Tensor:
        """``q``: ``[1, heads, T, dim]``, ``k``/``v``: ``[1, kv heads, T, dim]``; returns
        ``[1, heads, T, dim]``. ``scaling``: the softmax scale (default ``1 / sqrt(dim)``);
        ``dropout``: attention dropout (not on the CPU kernel); ``layer``: the layer's index.
        Raises ``ValueError`` when ``T`` is not the pass's row count."""
        if q.shape[0] != 1 or (q.shape[2] != self.tokens
                               and not (self.tokens == 0 and q.shape[2] == 1)):
            raise ValueError(f"{tuple(q.shape)} query for a layout of [1, heads, "
                             f"{self.tokens}, dim]")
        extra = {"layer": layer} if self.layered else {}
        out: torch.Tensor = self.attention(_thd(q), _thd(k), _thd(v), scaling, dropout, **extra)
        return out.transpose(0, 1)[None]


class SkrullAttention(PassAttention):
    """Attention for one micro-batch on one GPU, built once (before the forward pass, without
    a collective) and called by every layer through the ``"skrull"`` attention function.

    Called with ``q`` (``[1, heads, T, dim]``) and ``k``, ``v`` (``[1, kv heads, T, dim]``),
    it returns ``[1, heads, T, dim]``: local sequences attended on this GPU alone, each
    sharded sequence over its CP ring (``skrull.torch.attention.CpAttention``).

    Parameters
    ----------
    gpu : GpuLayout
        The micro-batch's ``GpuLayout`` (``collate_gpu_buffer`` returns it as
        ``skrull_layout``; made with ``plan=`` when it holds sharded sequences).
    ring_groups : dict or None
        ``(first, size)`` -> process group of every CP group this GPU's rings run over
        (``skrull.torch.cp_ring_groups``); None when the layout has no ring. Every GPU of a
        ring must call the attention for the same micro-batch and layer together.
    backend : str, optional
        A kernel of ``skrull.torch.attention.BACKENDS`` (default: by device and dtype).

    Raises
    ------
    ValueError
        Rings without ``ring_groups`` or without the layout's schedule (a buffer collated
        without ``plan=``), buffer rows that belong to no sequence, or a process group whose
        size or rank does not match the plan's ring.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.hf import SkrullAttention, collate_gpu_buffer
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([3, 2])
    >>> samples = {0: {"input_ids": [5, 6, 7]}, 1: {"input_ids": [8, 9]}}
    >>> gpu = collate_gpu_buffer(plan.layout(0, 0, 0), samples, plan=plan)["skrull_layout"]
    >>> attention = SkrullAttention(gpu, ring_groups=None)   # no ring: no process group
    >>> q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)   # GQA: 4 heads, 2 kv heads
    >>> attention(q, kv, kv).shape
    torch.Size([1, 4, 5, 8])
    """

    def __init__(self, gpu: GpuLayout, ring_groups: Mapping[tuple[int, int], Any] | None, *,
                 backend: str | None = None) -> None:
        schedule = gpu.schedule
        if schedule is None:
            if gpu.rings:
                raise ValueError("this micro-batch has sharded sequences: collate it with "
                                 "collate_gpu_buffer(..., plan=plan) so that its attention "
                                 "schedule is known")
            schedule = local_schedule(gpu.local_slots, gpu.tokens,
                                      (gpu.dp_rank, gpu.micro_batch, gpu.cp_rank))
        if schedule.rings and any(r.size > 1 for r in schedule.rings) and ring_groups is None:
            raise ValueError("this micro-batch has sharded sequences: pass ring_groups")
        if schedule.passes:
            raise ValueError("this micro-batch has chunk passes: run it with "
                             "skrull.torch.attention.MicroBatchPasses (SkrullTrainer does)")
        super().__init__(CpAttention(schedule, ring_groups, backend=backend), schedule.tokens)


def _slots_from_cu(cu: torch.Tensor) -> tuple[tuple[int, int], ...]:
    edges = cu.tolist()
    return tuple((a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a)


def skrull_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask: torch.Tensor | None,
                             dropout: float = 0.0, scaling: float | None = None,
                             **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function (``attn_implementation="skrull"``).

    Uses ``skrull_attention`` (a ``SkrullAttention``) when given, else the sequences of
    ``cu_seq_lens_q``, else treats each batch row as one sequence.

    Parameters
    ----------
    module : torch.nn.Module
        The attention layer (read for ``sliding_window``).
    query : torch.Tensor
        ``[batch, heads, T, dim]``.
    key, value : torch.Tensor
        ``[batch, kv heads, T, dim]`` (each repeated for its query heads).
    attention_mask : torch.Tensor or None
        Must be None: batches are padding-free.
    dropout : float, optional
        Attention dropout.
    scaling : float, optional
        Softmax scale; default ``1 / sqrt(dim)``.
    **kwargs
        ``skrull_attention`` (a ``PassAttention``, such as ``SkrullAttention``, which needs
        ``batch`` 1; it gets the module's ``layer_idx``) or
        ``cu_seq_lens_q`` (``SkrullCollator``'s, which needs ``batch`` 1); others ignored.

    Returns
    -------
    tuple
        ``(output, None)``: ``output`` is ``[batch, T, heads, dim]``, no attention weights.

    Raises
    ------
    NotImplementedError
        A sliding-window layer.
    ValueError
        A padding ``attention_mask``, or ``cu_seq_lens_q`` / ``skrull_attention`` with more
        than one batch row.

    Example
    -------
    >>> import torch
    >>> from skrull.hf import skrull_attention_forward
    >>> q, kv = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    >>> cu = torch.tensor([0, 3, 5], dtype=torch.int32)       # two sequences: 3 + 2 rows
    >>> out, weights = skrull_attention_forward(torch.nn.Module(), q, kv, kv, None,
    ...                                         cu_seq_lens_q=cu)
    >>> out.shape, weights
    (torch.Size([1, 5, 2, 8]), None)
    >>> alone, _ = skrull_attention_forward(torch.nn.Module(), q[:, :, 3:], kv[:, :, 3:],
    ...                                     kv[:, :, 3:], None)
    >>> torch.allclose(out[:, 3:], alone, atol=1e-6)  # the second never sees the first
    True
    """
    if getattr(module, "sliding_window", None):
        raise NotImplementedError("skrull attention: sliding-window layers are not supported")
    plan = kwargs.get("skrull_attention")
    layer = getattr(module, "layer_idx", None)
    if plan is None:
        if attention_mask is not None:
            raise ValueError("skrull attention runs padding-free batches: pass position_ids "
                             "and cu_seq_lens_q (SkrullCollator), not an attention_mask")
        cu = kwargs.get("cu_seq_lens_q")
        if cu is None:
            slots: tuple[tuple[int, int], ...] = ((0, query.shape[2]),)
        else:
            if query.shape[0] != 1:
                raise ValueError("cu_seq_lens_q needs a packed [1, T] batch")
            slots = _slots_from_cu(cu)
        attention = CpAttention(local_schedule(slots, query.shape[2]))
        out = torch.cat([attention(_thd(query[i:i + 1]), _thd(key[i:i + 1]),
                                   _thd(value[i:i + 1]), scaling, dropout).transpose(0, 1)[None]
                         for i in range(query.shape[0])], dim=0)
    else:
        if query.shape[0] != 1:
            raise ValueError("a skrull micro-batch is one packed [1, T] row")
        out = plan(query, key, value, scaling, dropout, layer=layer)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Registers ``skrull_attention_forward`` as ``"skrull"`` with transformers (idempotent).
    No mask function is registered, so transformers builds no mask and runs no packed-sequence
    detection for models using it. Importing ``skrull.hf`` calls it.

    Example
    -------
    >>> from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    >>> from skrull.hf import ATTENTION_NAME, register, skrull_attention_forward
    >>> register()
    >>> ALL_ATTENTION_FUNCTIONS[ATTENTION_NAME] is skrull_attention_forward
    True
    """
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION_NAME, skrull_attention_forward)
