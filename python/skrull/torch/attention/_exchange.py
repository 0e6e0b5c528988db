"""The K/V exchange of one ring: the one place where keys and values cross GPUs.

It is an all-gather per layer (the Llama 3 scheme, as Megatron's all-gather CP runs it): every
member of the ring sends its block of rows, keys and values stacked along the head axis, and
receives every member's block, in CP-rank order. Per GPU and layer it holds the ring's
exchanged rows once (``sum(member_rows) x 2 x kv heads x dim``), and the attention then holds
each sequence's keys and values in position order once more: memory linear in the ring's
tokens. The backward sums every member's gradient of this GPU's rows and hands it to this GPU
alone (a reduce-scatter, ``skrull.torch._dist.GatherBlocks``), not the whole exchanged
gradient to every member.

On the first exchange of a schedule every member appends a tag row holding the schedule's
fingerprint mixed with the ring's shape (plan digest, DP rank, micro-batch, the ring's CP
ranks and rows per member): a peer whose tag differs planned
another batch, and the exchange is refused before any attention runs. No collective beyond
the all-gather itself is run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._dist import GatherBlocks
from ._schedule import RingSchedule, ring_fingerprint


def check_group(ring: RingSchedule, group: Any, cp_rank: int) -> None:
    """Raises ``ValueError`` unless ``group`` is the ring's process group as this GPU sees
    it: ``ring.size`` ranks, this GPU at group rank ``cp_rank - ring.first``."""
    where = f"ring of CP ranks {ring.first}..{ring.first + ring.size}"
    if group is None:
        raise ValueError(f"{where}: no process group given for it (pass ring_groups from "
                         "skrull.torch.cp_ring_groups)")
    size = dist.get_world_size(group)
    if size != ring.size:
        raise ValueError(f"{where}: its process group has {size} ranks, the plan's ring "
                         f"{ring.size} (a CP group size that does not match the plan)")
    rank = dist.get_rank(group)
    if rank != cp_rank - ring.first:
        raise ValueError(f"{where}: this GPU (CP rank {cp_rank}) is rank {rank} of the "
                         f"process group, the plan puts it at {cp_rank - ring.first}")


def _tag(fingerprint: int, like: torch.Tensor) -> torch.Tensor:
    """Rows shaped like ``like``'s whose first 8 bytes hold ``fingerprint``."""
    row_bytes = max(int(torch.Size(like.shape[1:]).numel()) * like.element_size(), 1)
    tag = like.new_zeros((-(-8 // row_bytes), *like.shape[1:]))
    raw = np.frombuffer(int(fingerprint).to_bytes(8, "little", signed=True), np.uint8).copy()
    tag.view(torch.uint8).view(-1)[:8] = torch.from_numpy(raw).to(tag.device)
    return tag


def _read_tag(rows: torch.Tensor) -> int:
    raw = rows.detach().contiguous().view(torch.uint8).view(-1)[:8].cpu().numpy().tobytes()
    return int.from_bytes(raw, "little", signed=True)


def padded_rows(keys: np.ndarray, member_rows: tuple[int, ...], block: int) -> np.ndarray:
    """``keys`` (rows of the members' blocks concatenated) as rows of ``exchange``'s output,
    where member ``j``'s block starts at ``j * block``."""
    base = np.concatenate([[0], np.cumsum(member_rows)])
    member = np.searchsorted(base, keys, side="right") - 1
    out: np.ndarray = member * block + keys - base[member]
    return out


def exchange(k: torch.Tensor, v: torch.Tensor, ring: RingSchedule, group: Any,
             fingerprint: int | None) -> tuple[torch.Tensor, int]:
    """Every member's keys and values of ``ring``, differentiable: ``(gathered, block)``,
    ``gathered`` ``[size * block, 2 * kv heads, dim]`` (keys in the first ``kv heads``), member
    ``j``'s rows from ``j * block`` (each block padded to ``block`` rows).

    ``k``, ``v``: ``[tokens, kv heads, dim]`` over this GPU's buffer. With ``fingerprint``,
    the members' tags are compared (``ValueError`` naming the first member that differs). The
    backward hands this GPU only its own rows' gradient (``GatherBlocks``: a
    reduce-scatter).
    """
    mine = torch.cat([k[ring.start:ring.stop], v[ring.start:ring.stop]], dim=1)
    return exchange_rows(mine, ring, group, fingerprint)


def exchange_rows(mine: torch.Tensor, ring: RingSchedule, group: Any,
                  fingerprint: int | None) -> tuple[torch.Tensor, int]:
    """As ``exchange``, for this GPU's rows already stacked (``[member_rows[me], 2 * kv heads,
    dim]``): a chunk pass sends its rows of every chunk up to its own."""
    if ring.size == 1:
        return mine, mine.shape[0]
    if fingerprint is None:
        block = max(ring.member_rows)
        return GatherBlocks.apply(mine, block, group), block
    fingerprint = ring_fingerprint(fingerprint, ring)
    tag = _tag(fingerprint, mine)
    t = tag.shape[0]
    block = max(ring.member_rows) + t
    gathered = GatherBlocks.apply(torch.cat([mine, tag]), block, group)
    for j, n in enumerate(ring.member_rows):
        got = _read_tag(gathered[j * block + n:j * block + n + t])
        if got != fingerprint:
            raise ValueError(
                f"K/V from a different plan: CP rank {ring.first + j} of the ring of CP ranks "
                f"{ring.first}..{ring.first + ring.size} exchanged rows for schedule "
                f"{got:#018x}, this GPU for {fingerprint:#018x} (every rank must plan the "
                "same batch and run the same micro-batch)")
    return gathered, block
