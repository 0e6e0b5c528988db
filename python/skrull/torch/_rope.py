"""``apply_rope``: rotary embeddings at explicit positions (a shard's or a chunk's true ones)."""

from __future__ import annotations

import torch


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding of ``x`` at explicit positions: a shard is rotated by its true
    positions, not 0..n.

    Parameters
    ----------
    x : torch.Tensor
        ``[tokens, heads, head_dim]``, ``head_dim`` even; its first half is rotated against
        its second half.
    positions : torch.Tensor
        ``[tokens]``: the position of each token (``MicroBatch.position_ids``).
    base : float, optional
        The RoPE base (default 10000); angles are computed in float64.

    Returns
    -------
    torch.Tensor
        The rotated ``x``: same shape, dtype and device.

    Example
    -------
    >>> import torch
    >>> from skrull.torch import apply_rope
    >>> x = torch.ones(2, 1, 4)
    >>> apply_rope(x, torch.tensor([0, 1]))[0].tolist()   # position 0: unchanged
    [[1.0, 1.0, 1.0, 1.0]]
    >>> apply_rope(x, torch.tensor([0, 1])).shape
    torch.Size([2, 1, 4])
    """
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64, device=x.device) / half)
    angle = positions.to(torch.float64)[:, None] * inv[None, :]
    cos, sin = angle.cos().to(x.dtype)[:, None, :], angle.sin().to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
