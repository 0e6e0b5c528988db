"""A causal-LM loss that keeps float64 logits in float64."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ._collator import IGNORE_INDEX


def exact_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                         num_items_in_batch: torch.Tensor | int | None = None,
                         ignore_index: int = IGNORE_INDEX,
                         shift_labels: torch.Tensor | None = None,
                         **kwargs: Any) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` without its cast of every logit to float32: half
    precision is still upcast to float32, float64 stays float64. (With the cast, float64
    training packed and unpacked differs by float32 rounding of the logits: up to 7e-10
    relative in the weights after 4 AdamW steps in our DP 2 Qwen2 test.) Install it with
    ``model.loss_function = exact_causal_lm_loss`` (``SkrullConfig(exact=True)`` does).

    Parameters
    ----------
    logits : torch.Tensor
        ``[batch, T, vocab]`` (or anything that reshapes to ``[-1, vocab_size]``).
    labels : torch.Tensor
        ``[batch, T]`` unshifted labels; used only without ``shift_labels``.
    vocab_size : int
        The logits' last dimension.
    num_items_in_batch : torch.Tensor or int, optional
        Label tokens of the global batch: the summed loss is divided by it; None (default)
        averages over this call's labelled tokens.
    ignore_index : int, optional
        The label that adds nothing (default -100).
    shift_labels : torch.Tensor, optional
        The next-token targets (``SkrullCollator``'s); default ``labels`` shifted by one.
    **kwargs
        Whatever else transformers passes; ignored.

    Returns
    -------
    torch.Tensor
        The scalar loss, float64 for float64 logits, else float32.

    Example
    -------
    >>> import torch
    >>> from skrull.hf import exact_causal_lm_loss
    >>> logits = torch.zeros(1, 4, 8, dtype=torch.float64)
    >>> loss = exact_causal_lm_loss(logits, torch.tensor([[1, 2, 3, 4]]), vocab_size=8)
    >>> loss.dtype, round(float(loss), 6)            # uniform logits: log(8)
    (torch.float64, 2.079442)
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    target = shift_labels.reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        return F.cross_entropy(logits, target, ignore_index=ignore_index)
    total = F.cross_entropy(logits, target, ignore_index=ignore_index, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch
