"""The ``"skrull"`` attention function for transformers models (``AttentionInterface``).

It runs a packed ``[1, T]`` micro-batch sequence by sequence, so time and memory grow with
the sum of the squared sequence lengths, never with ``T^2``:

- without context parallelism, each sequence of the buffer (``cu_seq_lens_q`` from
  ``SkrullCollator``) is causal attention on its own: flash-attention varlen when it is
  installed and the tensors are on CUDA in half precision, else one torch SDPA call per
  sequence;
- with a ``SkrullAttention`` (passed by ``SkrullTrainer`` as the ``skrull_attention`` model
  keyword), local sequences are attended on this GPU alone and each sharded sequence over its
  CP ring: keys and values of the ring's rows are all-gathered (differentiably) over the
  ring's process group, and every query attends to the keys of its own sequence at earlier
  or equal true positions. Masks come from sequence ids and positions, never from jumps in
  ``position_ids``, so zigzag buffers are safe.

Grouped-query attention repeats each key/value head for its query heads. Rotary embeddings are
applied by the model from ``position_ids`` before this function runs, so shards are rotated by
their true positions.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from ..torch import all_gather_varlen, gather_sizes
from ..torch._dist import gather_varlen_nograd
from ._collator import GpuLayout

#: The name to pass as ``attn_implementation`` (registered on import of ``skrull.hf``).
ATTENTION_NAME = "skrull"


def _flash_varlen() -> Any:
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_rep: int, scaling: float | None,
          dropout: float, *, causal: bool = False,
          mask: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA on ``[1, heads, rows, dim]`` tensors, key/value heads repeated for GQA."""
    if n_rep > 1:
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                          is_causal=causal, scale=scaling)


def _local(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           slots: tuple[tuple[int, int], ...], n_rep: int, scaling: float | None,
           dropout: float) -> list[torch.Tensor]:
    """Causal attention of each ``(start, stop)`` slot on its own; outputs per slot."""
    flash = _flash_varlen() if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) \
        else None
    if flash is not None and slots:
        first, last = slots[0][0], slots[-1][1]
        cu = torch.tensor([a - first for a, _ in slots] + [last - first], dtype=torch.int32,
                          device=q.device)
        longest = max(b - a for a, b in slots)
        rows = [x[0, :, first:last].transpose(0, 1) for x in (q, k, v)]  # [rows, heads, dim]
        out = flash(*rows, cu, cu, longest, longest, dropout_p=dropout, softmax_scale=scaling,
                    causal=True)
        return [out.transpose(0, 1)[None]]
    return [_sdpa(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], n_rep, scaling, dropout,
                  causal=True) for a, b in slots]


class _Ring:
    """One CP ring of a GPU's sharded group: buffer rows ``[start, stop)`` over ``group``."""

    def __init__(self, gpu: GpuLayout, start: int, stop: int, group: Any) -> None:
        self.start, self.stop, self.group = start, stop, group
        self.sizes = gather_sizes(stop - start, group)
        mine = torch.stack([gpu.span_seq[start:stop], gpu.positions[start:stop]], dim=1)
        meta = gather_varlen_nograd(mine, self.sizes, group).numpy()
        self.sequences = []  # (first row, stop row, key index, mask) per sequence here
        seq = gpu.span_seq[start:stop].numpy()
        pos = gpu.positions[start:stop].numpy()
        cuts = np.flatnonzero(np.diff(seq)) + 1
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(seq)]])):
            if b <= a:
                continue
            rows = np.flatnonzero(meta[:, 0] == seq[a])
            rows = rows[np.argsort(meta[rows, 1], kind="stable")]
            if not np.array_equal(meta[rows, 1], np.arange(len(rows))):
                raise ValueError(f"sequence {seq[a]}: the ring's rows do not hold positions "
                                 f"0..{len(rows) - 1} exactly once")
            last = int(pos[a:b].max()) + 1
            keys = torch.from_numpy(rows[:last].copy())
            mask = torch.arange(last)[None, :] <= torch.from_numpy(pos[a:b].copy())[:, None]
            self.sequences.append((start + int(a), start + int(b), keys, mask))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_rep: int,
                 scaling: float | None, dropout: float) -> list[torch.Tensor]:
        heads = k.shape[1]
        rows = torch.cat([k[0, :, self.start:self.stop], v[0, :, self.start:self.stop]],
                         dim=0).transpose(0, 1)  # [rows, 2 kv heads, dim]
        gathered = all_gather_varlen(rows.contiguous(), self.sizes, self.group)
        out = []
        for a, b, keys, mask in self.sequences:
            kv = gathered.index_select(0, keys.to(gathered.device)).transpose(0, 1)[None]
            out.append(_sdpa(q[:, :, a:b], kv[:, :heads], kv[:, heads:], n_rep, scaling,
                             dropout, mask=mask.to(q.device)))
        return out


class SkrullAttention:
    """Attention for one micro-batch on one GPU, built once (before the forward pass) and
    called by every layer through the ``"skrull"`` attention function.

    Called with ``q`` (``[1, heads, T, dim]``) and ``k``, ``v`` (``[1, kv heads, T, dim]``),
    it returns ``[1, heads, T, dim]``: local sequences attended on this GPU alone, each
    sharded sequence over its CP ring.

    Parameters
    ----------
    gpu : GpuLayout
        The micro-batch's ``GpuLayout`` (``collate_gpu_buffer`` returns it as
        ``skrull_layout``).
    ring_groups : dict or None
        ``(first, size)`` -> process group of every CP group this GPU's rings run over
        (``skrull.torch.cp_ring_groups``); None when the layout has no ring. Every GPU of a
        ring must build its ``SkrullAttention`` for the same micro-batch together: building
        it all-gathers each ring's sequence ids and positions once.

    Raises
    ------
    ValueError
        Rings without ``ring_groups``, buffer rows that belong to no sequence, or a ring
        whose gathered rows do not hold each position of a sequence exactly once.

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.hf import SkrullAttention, collate_gpu_buffer
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64).plan([3, 2])
    >>> samples = {0: {"input_ids": [5, 6, 7]}, 1: {"input_ids": [8, 9]}}
    >>> gpu = collate_gpu_buffer(plan.layout(0, 0, 0), samples)["skrull_layout"]
    >>> attention = SkrullAttention(gpu, ring_groups=None)   # no ring: no process group
    >>> q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)   # GQA: 4 heads, 2 kv heads
    >>> attention(q, kv, kv).shape
    torch.Size([1, 4, 5, 8])
    """

    def __init__(self, gpu: GpuLayout, ring_groups: Mapping[tuple[int, int], Any] | None) -> None:
        self.local_slots = gpu.local_slots
        self.tokens = gpu.tokens
        if gpu.rings and ring_groups is None:
            raise ValueError("this micro-batch has sharded sequences: pass ring_groups")
        self.rings = [_Ring(gpu, start, stop, ring_groups[(first, size)])  # type: ignore[index]
                      for first, size, start, stop in gpu.rings]
        edges = [(a, b) for a, b in self.local_slots] + [(r.start, r.stop) for r in self.rings]
        covered = 0
        for a, b in edges:
            if a != covered:
                raise ValueError(f"buffer rows {covered}..{a} belong to no sequence")
            covered = b
        if covered != self.tokens:
            raise ValueError(f"slots cover {covered} of {self.tokens} rows")

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
        """``q``: ``[1, heads, T, dim]``, ``k``/``v``: ``[1, kv heads, T, dim]``; returns
        ``[1, heads, T, dim]``. ``scaling``: the softmax scale (default ``1 / sqrt(dim)``);
        ``dropout``: attention dropout. Raises ``ValueError`` when ``T`` is not the layout's
        row count."""
        if q.shape[2] != self.tokens:
            raise ValueError(f"{q.shape[2]} query rows for a layout of {self.tokens}")
        n_rep = q.shape[1] // k.shape[1]
        parts = _local(q, k, v, self.local_slots, n_rep, scaling, dropout)
        for ring in self.rings:
            parts += ring(q, k, v, n_rep, scaling, dropout)
        return torch.cat(parts, dim=2)


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
        ``skrull_attention`` (a ``SkrullAttention``, which needs ``batch`` 1) or
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
        n_rep = query.shape[1] // key.shape[1]
        rows = [torch.cat(_local(query[i:i + 1], key[i:i + 1], value[i:i + 1], slots, n_rep,
                                 scaling, dropout), dim=2) for i in range(query.shape[0])]
        out = torch.cat(rows, dim=0)
    else:
        if query.shape[0] != 1:
            raise ValueError("a skrull micro-batch is one packed [1, T] row")
        out = plan(query, key, value, scaling, dropout)
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
