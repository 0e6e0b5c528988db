"""Timing and memory measurements of the profiler's modules, and its progress bar."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, TextIO

import torch
from torch.utils.checkpoint import checkpoint

from ._model import Attention, DecoderLayer, LMHead, Packing
from ._shape import ProfileShape


class Progress:
    """A plain text progress bar on stderr: redrawn in place on a terminal, one line per step
    elsewhere (logs, captured output)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, enabled: bool = True,
                 width: int = 30) -> None:
        self.total, self.done, self.stream = max(total, 1), 0, stream
        self.enabled, self.width = enabled, width
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()

    def step(self, label: str) -> None:
        """Counts one finished step, labelled ``label``."""
        self.done = min(self.done + 1, self.total)
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        text = (f"[{bar}] {self.done:>3}/{self.total} {time.perf_counter() - self.t0:6.1f} s  "
                f"{label}")
        if self.tty:
            self.stream.write("\r" + text.ljust(100)[:100])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends the bar's line."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(frozen=True)
class Bench:
    """Repetitions of a timed call: ``warmup`` untimed, then the fastest of ``repeats``
    (interference from other work only ever adds time)."""

    warmup: int
    repeats: int

    def time(self, step: Callable[[], None], device: torch.device) -> float:
        """Seconds of the fastest ``step()`` on ``device`` (CUDA work is synchronised)."""
        sync: Callable[[], None] = (torch.cuda.synchronize if device.type == "cuda"
                                    else (lambda: None))
        for _ in range(self.warmup):
            step()
        sync()
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        return min(times)


class Workload:
    """Builds inputs for the profiler's modules on one device and dtype, and runs forward and
    backward on them."""

    def __init__(self, shape: ProfileShape, attention: Attention, device: torch.device,
                 dtype: torch.dtype, seed: int = 0) -> None:
        self.shape, self.attention, self.device, self.dtype = shape, attention, device, dtype
        torch.manual_seed(seed)
        self.layer = DecoderLayer(shape, attention).to(device=device, dtype=dtype)
        self.head = (LMHead(shape).to(device=device, dtype=dtype) if shape.vocab > 0
                     else None)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def _randn(self, *size: int, requires_grad: bool = False) -> torch.Tensor:
        x = torch.randn(*size, generator=self.generator).to(self.device, self.dtype)
        return x.requires_grad_(requires_grad)

    def packing(self, lengths: Iterable[int]) -> Packing:
        """The packing of sequences of ``lengths``."""
        return Packing(list(lengths), self.shape.head_dim, self.device, self.dtype)

    def layer_step(self, tokens: int, recompute: bool = False) -> Callable[[], None]:
        """Forward + backward of the layer on one ``tokens``-token sequence (activation
        checkpointing when ``recompute``)."""
        p = self.packing([tokens])
        x = self._randn(tokens, self.shape.hidden, requires_grad=True)
        g = self._randn(tokens, self.shape.hidden)

        def step() -> None:
            y = self.layer_forward(x, p, recompute)
            y.backward(g)  # type: ignore[no-untyped-call]
            x.grad = None
        return step

    def layer_forward(self, x: torch.Tensor, p: Packing, recompute: bool) -> torch.Tensor:
        """The layer's output on ``x``, checkpointed when ``recompute``."""
        if recompute:
            out: torch.Tensor = checkpoint(self.layer, x, p, use_reentrant=False)
            return out
        plain: torch.Tensor = self.layer(x, p)
        return plain

    def head_inputs(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states (requiring grad) and labels for the head."""
        x = self._randn(tokens, self.shape.hidden, requires_grad=True)
        labels = torch.randint(0, self.shape.vocab, (tokens,), generator=self.generator)
        return x, labels.to(self.device)

    def head_step(self, tokens: int) -> Callable[[], None]:
        """Forward + backward of the final norm, LM head and loss on ``tokens`` tokens."""
        head = self.head
        assert head is not None
        x, labels = self.head_inputs(tokens)

        def step() -> None:
            head(x, labels).backward()
            x.grad = None
        return step

    def attention_step(self, length: int, count: int) -> Callable[[], None]:
        """Forward + backward of causal attention alone over ``count`` packed sequences of
        ``length`` tokens (one layer's Q, K and V)."""
        s, p = self.shape, self.packing([length] * count)
        t = length * count
        q = self._randn(t, s.heads, s.head_dim, requires_grad=True)
        k = self._randn(t, s.kv_heads, s.head_dim, requires_grad=True)
        v = self._randn(t, s.kv_heads, s.head_dim, requires_grad=True)
        g = self._randn(t, s.heads, s.head_dim)

        def step() -> None:
            self.attention(q, k, v, p).backward(g)  # type: ignore[no-untyped-call]
            q.grad = k.grad = v.grad = None
        return step

    def optimizer_step(self, parts: str) -> tuple[int, Callable[[], None]]:
        """One training-loop step outside the micro-batches over the parameters of
        ``parts`` (``"layer"``, ``"head"`` or ``"both"``): AdamW's update and zeroing the
        gradients (kept allocated, as a trainer between steps). Returns the parameter count
        and the step."""
        layer: list[Optional[torch.nn.Module]] = [self.layer]
        head: list[Optional[torch.nn.Module]] = [self.head]
        chosen = {"layer": layer, "head": head, "both": layer + head}[parts]
        params = [t for m in chosen if m is not None for t in m.parameters()]
        for t in params:
            t.grad = torch.ones_like(t)
        opt = torch.optim.AdamW(params, lr=1e-6)

        def step() -> None:
            opt.step()
            opt.zero_grad(set_to_none=False)
        return sum(t.numel() for t in params), step

    def parameter_storages(self) -> set[int]:
        """Storage addresses of every parameter (and gradient): model states, not
        activations."""
        out = set()
        for m in (self.layer, self.head):
            if m is None:
                continue
            for t in m.parameters():
                out.add(t.untyped_storage().data_ptr())
                if t.grad is not None:
                    out.add(t.grad.untyped_storage().data_ptr())
        return out


@dataclass(frozen=True)
class PartMemory:
    """Activation memory of one part (a layer or the head) at one token count: what it keeps
    for the backward pass (``retained``) and the extra its backward pass needs on top at its
    peak (``transient``)."""

    retained: int
    transient: int


def saved_bytes(run: Callable[[], object], exclude: set[int]) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``run()`` executes
    its forward, parameters and ``exclude`` left out (``saved_tensors_hooks``)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    del out
    return sum(seen.values())


def cpu_memory(w: Workload, tokens: int) -> dict[str, PartMemory]:
    """Activation memory from saved tensors, no allocator needed: ``layer``,
    ``layer-checkpoint`` and ``head``. The backward's extra is estimated as the gradients of
    the part's saved activations (as many bytes as the plain part saves), plus, when
    checkpointed, the recomputed activations (as many again)."""
    p = w.packing([tokens])
    exclude = w.parameter_storages() | {t.untyped_storage().data_ptr() for t in p.tensors()}
    x = w._randn(tokens, w.shape.hidden, requires_grad=True)
    plain = saved_bytes(lambda: w.layer_forward(x, p, False), exclude)
    ckpt = saved_bytes(lambda: w.layer_forward(x, p, True), exclude)
    out = {"layer": PartMemory(plain, plain), "layer-checkpoint": PartMemory(ckpt, 2 * plain)}
    lm_head = w.head
    if lm_head is not None:
        hx, labels = w.head_inputs(tokens)
        head = saved_bytes(lambda: lm_head(hx, labels), exclude)
        out["head"] = PartMemory(head, head)
    return out


def cuda_memory(w: Workload, tokens: int) -> dict[str, PartMemory]:
    """Activation memory from the CUDA caching allocator: ``retained`` is what is still
    allocated after the forward (saved tensors and the output), ``transient`` the peak during
    forward + backward above that. Gradients of the parameters exist beforehand (a warm-up
    step allocates them), so they count as model states, not here."""
    p = w.packing([tokens])
    out = {}

    def measure(forward: Callable[[], torch.Tensor], backward: Callable[[torch.Tensor], None]
                ) -> PartMemory:
        backward(forward())  # warm-up: parameter gradients and workspaces exist
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        y = forward()
        torch.cuda.synchronize()
        retained = torch.cuda.memory_allocated() - base
        backward(y)
        del y
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        return PartMemory(retained, max(peak - retained, 0))

    x = w._randn(tokens, w.shape.hidden, requires_grad=True)
    g = w._randn(tokens, w.shape.hidden)

    def layer_backward(y: torch.Tensor) -> None:
        y.backward(g)  # type: ignore[no-untyped-call]
        x.grad = None
    out["layer"] = measure(lambda: w.layer_forward(x, p, False), layer_backward)
    out["layer-checkpoint"] = measure(lambda: w.layer_forward(x, p, True), layer_backward)
    lm_head = w.head
    if lm_head is not None:
        hx, labels = w.head_inputs(tokens)

        def head_backward(loss: torch.Tensor) -> None:
            loss.backward()  # type: ignore[no-untyped-call]
            hx.grad = None
        out["head"] = measure(lambda: lm_head(hx, labels), head_backward)
    return out


def model_states(shape: ProfileShape, dtype: torch.dtype, zero_stage: int,
                 zero_shards: int) -> tuple[int, str]:
    """Bytes of the model states on one GPU (weights, gradients, Adam's states and float32
    master weights when training in 16 bits) for a ZeRO stage over ``zero_shards`` GPUs, and
    how they were counted."""
    n = shape.params()
    wb = torch.tensor([], dtype=dtype).element_size()
    ob = 12 if wb < 4 else 8  # fp32 master + m + v, or m + v
    k = max(zero_shards, 1)
    weights, grads, optim = n * wb, n * wb, n * ob
    if zero_stage >= 1:
        optim //= k
    if zero_stage >= 2:
        grads //= k
    if zero_stage >= 3:
        weights //= k
    how = (f"{n} parameters x ({wb} B weights + {wb} B gradients + {ob} B optimizer), ZeRO "
           f"stage {zero_stage} over {k} GPUs: {weights} + {grads} + {optim} bytes")
    return weights + grads + optim, how


def micro_batch_memory(shape: ProfileShape, static: int, parts: dict[str, PartMemory],
                       recompute: bool) -> int:
    """Peak bytes of one GPU for a micro-batch: model states, every layer's retained
    activations and the head's, and the largest backward extra of any one part (the
    backward runs one part at a time)."""
    layer = parts["layer-checkpoint" if recompute else "layer"]
    head = parts.get("head", PartMemory(0, 0))
    return (static + shape.layers * layer.retained + head.retained
            + max(layer.transient, head.transient))


def device_memory(device: torch.device) -> Optional[tuple[int, int]]:
    """Free and total bytes of a CUDA device (``None`` elsewhere)."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return int(free), int(total)
