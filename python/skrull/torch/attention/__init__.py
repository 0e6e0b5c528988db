"""Attention over skrull micro-batches, memory linear in tokens, for ``skrull.torch`` and
``skrull.hf`` alike (see docs/attention.md).

- ``attention_schedule(plan, dp_rank, micro_batch, cp_rank)``: what one GPU attends, from the
  plan alone: its local slots, and per ring the rows every member exchanges and where each
  position of each sharded sequence lands (no process group, no collective).
- ``CpAttention(schedule, ring_groups)``: the attention of that GPU, called per layer with
  ``[tokens, heads, dim]`` queries and ``[tokens, kv heads, dim]`` keys and values. Each
  query chunk of a sharded sequence at true positions ``[p0, p1)`` attends to keys
  ``[0, p1)`` causally aligned at the bottom right, after one all-gather of the ring's keys
  and values (``_exchange``).
- ``ChunkedSequence`` / ``MicroBatchPasses`` (chunking on): a chunked sequence's passes with
  their K/V state, and everything a GPU runs for one micro-batch as one loss, the first
  ``count - K`` passes of each chunked sequence recomputed in the backward pass.
- ``BACKENDS`` / ``pick_backend``: the kernels behind one interface (pairs in, output and
  log-sum-exp out): ``"merge"`` (CPU: mask-free flash calls merged by log-sum-exp),
  ``"flash"`` (flash-attn varlen on CUDA), ``"sdpa"`` (torch's fused CUDA kernels with a
  lower-right causal bias) and ``"dense"`` (the explicit-mask oracle); chosen once by device
  and dtype, overridden by ``backend=`` or ``$SKRULL_ATTENTION_BACKEND``.

The package knows plans and schedules, not the front ends' batches: its adapters are
``skrull.torch.PackedAttention`` (over a ``skrull.torch.MicroBatch``, ``torch/_packed.py``)
and ``skrull.hf.SkrullAttention`` (over transformers' tensors, ``hf/_attention.py``).
"""

from ._attend import CpAttention
from ._chunks import ChunkAttention, ChunkedSequence
from ._kernels import BACKEND_ENV, BACKENDS, pick_backend
from ._passes import MicroBatchPasses
from ._schedule import (AttentionSchedule, ChunkPassSchedule, LocalSlot, QueryChunk,
                        RingSchedule, RingSequence, attention_schedule, local_schedule)

__all__ = ["BACKENDS", "BACKEND_ENV", "AttentionSchedule", "ChunkAttention",
           "ChunkPassSchedule", "ChunkedSequence", "CpAttention", "LocalSlot",
           "MicroBatchPasses", "QueryChunk", "RingSchedule", "RingSequence",
           "attention_schedule", "local_schedule", "pick_backend"]
