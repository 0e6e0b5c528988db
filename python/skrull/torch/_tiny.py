"""``TinyTransformer``: the smallest model that exercises a skrull layout end to end."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._collate import MicroBatch
from ._packed import PackedAttention
from ._rope import apply_rope

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class TinyTransformer(nn.Module):
    """Embedding, ``layers`` x (RMS-normed causal self-attention with RoPE, then a SiLU MLP),
    and an LM head, all with residuals. ``forward_packed`` runs one skrull micro-batch (with
    ``PackedAttention``); ``forward_sequence`` runs one whole sequence with plain causal
    attention, the unpacked reference.

    Parameters
    ----------
    vocab : int, optional
        Vocabulary size (default 64).
    hidden : int, optional
        Hidden size (default 32), a multiple of ``heads`` with an even quotient.
    heads : int, optional
        Attention heads (default 2).
    ffn : int, optional
        MLP width (default 64).
    layers : int, optional
        Transformer blocks (default 1).

    Example
    -------
    >>> import torch, skrull
    >>> from skrull.torch import TinyTransformer, collate
    >>> _ = torch.manual_seed(0)
    >>> model = TinyTransformer().double()
    >>> seqs = [torch.randint(64, (n,)) for n in (5, 3)]
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, seqs, dp_rank=0, cp_rank=0)[0]
    >>> packed = model.forward_packed(mb)
    >>> unpacked = torch.cat([model.forward_sequence(s) for s in seqs])
    >>> torch.allclose(packed, unpacked)             # packing changes nothing
    True
    """

    def __init__(self, vocab: int = 64, hidden: int = 32, heads: int = 2, ffn: int = 64,
                 layers: int = 1) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "qkv": nn.Linear(hidden, 3 * hidden), "out": nn.Linear(hidden, hidden),
            "up": nn.Linear(hidden, ffn), "down": nn.Linear(ffn, hidden)})
            for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, attend: Attention) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            b: nn.ModuleDict = block  # type: ignore[assignment]
            h = F.rms_norm(x, x.shape[-1:])
            q, k, v = b["qkv"](h).view(len(ids), 3 * self.heads, self.head_dim).chunk(3, dim=1)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
            x = x + b["out"](attend(q, k, v).reshape(len(ids), self.heads * self.head_dim))
            x = x + b["down"](F.silu(b["up"](F.rms_norm(x, x.shape[-1:]))))
        logits: torch.Tensor = self.head(x)
        return logits

    def forward_packed(self, mb: MicroBatch, group: Any = None,
                       ring_groups: Any = None) -> torch.Tensor:
        """Logits ``[tokens, vocab]`` of this GPU's buffer; collective over ``group`` (CP), or
        ring by ring over ``ring_groups`` (see ``PackedAttention``).

        Parameters
        ----------
        mb : MicroBatch
            This GPU's micro-batch (``collate``); ``input_ids`` at ``position_ids``.
        group : process group, optional
            The whole CP group; None (default) at CP 1.
        ring_groups : dict, optional
            ``(first, size)`` -> process group (``cp_ring_groups``).

        Returns
        -------
        torch.Tensor
            ``[mb.num_tokens, vocab]`` logits, padding rows included.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import TinyTransformer, collate
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
        >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
        >>> TinyTransformer(vocab=64).forward_packed(mb).shape
        torch.Size([8, 64])
        """
        attention = PackedAttention(mb, group, ring_groups)
        if not attention.schedule.passes:
            return self._run(mb.input_ids, mb.position_ids, attention)
        return attention.outputs(self.forward_part)

    def forward_part(self, part: MicroBatch, attention: Attention) -> torch.Tensor:
        """Logits ``[rows, vocab]`` of one pass's rows (``part``, see ``PackedAttention.loss``)
        with that pass's attention.

        Parameters
        ----------
        part : MicroBatch
            The pass's rows (``skrull.torch._packed.rows_of``).
        attention : callable
            ``attention(q, k, v)`` over them.

        Returns
        -------
        torch.Tensor
            ``[rows, vocab]`` logits.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import PackedAttention, TinyTransformer, collate
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
        >>> mb = collate(plan, [torch.arange(5), torch.arange(3)], dp_rank=0, cp_rank=0)[0]
        >>> TinyTransformer(vocab=64).forward_part(mb, PackedAttention(mb)).shape
        torch.Size([8, 64])
        """
        return self._run(part.input_ids, part.position_ids, attention)

    def loss_packed(self, mb: MicroBatch, group: Any = None,
                    ring_groups: Any = None) -> torch.Tensor:
        """``packed_loss`` of this GPU's micro-batch, pass by pass: with chunked sequences
        (chunking on) their chunks run as ChunkFlow's schedule does, the first ``count - K``
        recomputed in the backward pass, so memory follows the chunk size
        (``PackedAttention.loss``); otherwise ``packed_loss(forward_packed(mb), mb)``.

        Parameters
        ----------
        mb : MicroBatch
            This GPU's micro-batch (``collate``).
        group, ring_groups : optional
            As ``forward_packed``.

        Returns
        -------
        torch.Tensor
            The scalar loss; call ``backward()`` once.

        Example
        -------
        >>> import torch, skrull
        >>> from skrull.torch import TinyTransformer, collate, packed_loss
        >>> _ = torch.manual_seed(0)
        >>> model = TinyTransformer().double()
        >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=16, policy="chunkflow",
        ...                         chunk_size=4, lockstep=True).plan([10])
        >>> seqs = [torch.randint(64, (10,))]
        >>> mb = collate(plan, seqs, 0, 0, weight_dtype=torch.float64)[0]   # 3 chunk passes
        >>> whole = packed_loss(model.forward_sequence(seqs[0]), mb)
        >>> torch.allclose(model.loss_packed(mb), whole)
        True
        """
        attention = PackedAttention(mb, group, ring_groups)
        return attention.loss(lambda part, att: packed_loss(self.forward_part(part, att), part))

    def forward_sequence(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[len, vocab]`` of one whole sequence at positions ``0 .. len``.

        Parameters
        ----------
        ids : torch.Tensor
            ``[len]`` token ids of one sequence.

        Returns
        -------
        torch.Tensor
            ``[len, vocab]`` logits, with plain causal attention (the unpacked reference).

        Example
        -------
        >>> import torch
        >>> from skrull.torch import TinyTransformer
        >>> TinyTransformer(vocab=64).forward_sequence(torch.tensor([1, 2, 3])).shape
        torch.Size([3, 64])
        """
        def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                               v.transpose(0, 1), is_causal=True)
            return o.transpose(0, 1)
        return self._run(ids, torch.arange(len(ids), device=ids.device), causal)


def packed_loss(logits: torch.Tensor, mb: MicroBatch, ignore_index: int = -100) -> torch.Tensor:
    """Sum over the buffer of cross-entropy x ``loss_weights``: summed over every GPU of the
    global batch, the mean over its labelled tokens.

    Parameters
    ----------
    logits : torch.Tensor
        ``[mb.num_tokens, vocab]`` (``TinyTransformer.forward_packed``).
    mb : MicroBatch
        The micro-batch: its ``labels`` and ``loss_weights``.
    ignore_index : int, optional
        The label that adds nothing (default -100, as ``collate``).

    Returns
    -------
    torch.Tensor
        A scalar, in the dtype of ``logits``.

    Example
    -------
    >>> import torch, skrull
    >>> import torch.nn.functional as F
    >>> from skrull.torch import TinyTransformer, collate, packed_loss
    >>> _ = torch.manual_seed(0)
    >>> model = TinyTransformer().double()
    >>> seqs = [torch.randint(64, (n,)) for n in (5, 3)]
    >>> plan = skrull.Scheduler(dp=1, cp=1, bucket_tokens=64, lockstep=True).plan([5, 3])
    >>> mb = collate(plan, seqs, dp_rank=0, cp_rank=0)[0]
    >>> loss = packed_loss(model.forward_packed(mb), mb)
    >>> mean = torch.cat([F.cross_entropy(model.forward_sequence(s)[:-1], s[1:],
    ...                                   reduction="none") for s in seqs]).mean()
    >>> torch.allclose(loss, mean)                   # the mean over the 6 labelled tokens
    True
    """
    ce = F.cross_entropy(logits, mb.labels, ignore_index=ignore_index, reduction="none")
    return (ce * mb.loss_weights.to(ce.dtype)).sum()
