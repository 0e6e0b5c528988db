"""Measurements on a process group: all-gathers inside one node and across nodes, and the
executor's sharded attention against the number of sharded sequences, under ``torchrun`` or
on processes the profiler spawns itself."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from ._measure import Progress


@dataclass(frozen=True)
class Launch:
    """Where this process sits: its rank, the world size, processes per node."""

    rank: int
    world: int
    local_world: int

    @property
    def nodes(self) -> int:
        """Nodes in the job."""
        return self.world // self.local_world

    @staticmethod
    def from_env() -> Optional["Launch"]:
        """The ``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), if
        this process was launched with more than one."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world < 2 or "RANK" not in os.environ:
            return None
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        return Launch(int(os.environ["RANK"]), world, local)


@dataclass(frozen=True)
class CollectiveRow:
    """One ``collective,BYTES,SECONDS,GROUP,SCOPE`` sample."""

    bytes: int
    seconds: float
    group: int
    scope: str


def _all_gather_seconds(group: Any, size: int, nbytes: int, device: torch.device,
                        dtype: torch.dtype, warmup: int, repeats: int) -> tuple[int, float]:
    """The fastest over ``repeats`` of the slowest rank's time for one all-gather whose result
    is about ``nbytes`` over ``size`` ranks; the exact result size."""
    elt = torch.tensor([], dtype=dtype).element_size()
    numel = max(nbytes // (size * elt), 1)
    send = torch.ones(numel, dtype=dtype, device=device)
    recv = [torch.empty_like(send) for _ in range(size)]
    sync: Callable[[], None] = (torch.cuda.synchronize if device.type == "cuda"
                                else (lambda: None))
    times = []
    for i in range(warmup + repeats):
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        dist.all_gather(recv, send, group=group)
        sync()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                          device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
        if i >= warmup:
            times.append(float(dt.item()))
    return numel * elt * size, min(times)


#: Sharded sequences per micro-batch of the ``sharded`` rows, and each one's tokens per ring
#: rank (few: the rows time the executor's work per sequence, not attention).
SHARDED_COUNTS = (1, 2, 4, 8)
SHARDED_TOKENS_PER_RANK = 32


@dataclass(frozen=True)
class ShardedRow:
    """One ``sharded,COUNT,SECONDS,TOKENS,GROUP`` sample: one layer's CP attention of a
    micro-batch of ``count`` sequences of ``tokens`` tokens, every one sharded over the ring of
    ``group`` ranks."""

    count: int
    seconds: float
    tokens: int
    group: int


def _sharded_seconds(group: Any, size: int, rank: int, heads: tuple[int, int, int],
                     count: int, device: torch.device, dtype: torch.dtype, warmup: int,
                     repeats: int) -> tuple[int, float]:
    """The fastest over ``repeats`` of the slowest rank's forward + backward of the
    executor's attention (``skrull.torch.attention.CpAttention``) for a micro-batch of
    ``count`` sequences all sharded over the ring of ``size`` ranks; the tokens per sequence."""
    import skrull
    from skrull.torch.attention import CpAttention, attention_schedule

    n_heads, kv_heads, dim = heads
    tokens = SHARDED_TOKENS_PER_RANK * size
    plan = skrull.Scheduler(dp=1, cp=size, bucket_tokens=count * tokens,
                            policy="packed").plan([tokens] * count)
    attention = CpAttention(attention_schedule(plan, 0, 0, rank), {(0, size): group})
    rows = attention.schedule.tokens
    gen = torch.Generator(device="cpu").manual_seed(rank)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device, dtype).requires_grad_(True)
    q, k, v = randn(rows, n_heads, dim), randn(rows, kv_heads, dim), randn(rows, kv_heads, dim)
    g = torch.randn(rows, n_heads, dim, generator=gen).to(device, dtype)
    sync: Callable[[], None] = (torch.cuda.synchronize if device.type == "cuda"
                                else (lambda: None))
    times = []
    for i in range(warmup + repeats):
        dist.barrier(group=group)
        sync()
        t0 = time.perf_counter()
        attention(q, k, v).backward(g)  # type: ignore[no-untyped-call]
        q.grad = k.grad = v.grad = None
        sync()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                          device=device if device.type == "cuda" else "cpu")
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
        if i >= warmup:
            times.append(float(dt.item()))
    return tokens, min(times)


def measure_sharded(launch: Launch, device: torch.device, heads: tuple[int, int, int],
                    warmup: int, repeats: int, progress: Optional[Progress]
                    ) -> list[ShardedRow]:
    """The executor's sharded attention for ``SHARDED_COUNTS`` sequences per micro-batch on
    the ring of each node's ranks (every node at once) when a node holds two or more
    processes; rank 0's rows. Every rank calls it."""
    local, nodes = launch.local_world, launch.nodes
    if local < 2:
        return []
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    groups = [dist.new_group(list(range(n * local, (n + 1) * local))) for n in range(nodes)]
    group = groups[launch.rank // local]
    rows = []
    for count in SHARDED_COUNTS:
        tokens, seconds = _sharded_seconds(group, local, launch.rank % local, heads, count,
                                           device, dtype, warmup, repeats)
        rows.append(ShardedRow(count, seconds, tokens, local))
        if progress is not None:
            progress.step(f"sharded attention, {count} x {tokens} tokens over {local} ranks")
    dist.barrier()
    return rows


def measure(launch: Launch, device: torch.device, sizes: Sequence[int], warmup: int,
            repeats: int, progress: Optional[Progress]) -> list[CollectiveRow]:
    """All-gathers of every size in ``sizes`` (bytes of the result) inside each node (every
    node at once, its ranks ``node * local .. node * local + local``) when a node holds two or
    more processes, and over the whole world when there are several nodes. Every rank calls
    it; the rows are rank 0's (its node, the world)."""
    local, nodes = launch.local_world, launch.nodes
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    groups = [dist.new_group(list(range(n * local, (n + 1) * local))) for n in range(nodes)]
    rows = []
    plan: list[tuple[Any, int, str]] = []
    if local >= 2:
        plan.append((groups[launch.rank // local], local, "intra"))
    if nodes >= 2:
        plan.append((dist.group.WORLD, launch.world, "inter"))
    for group, size, scope in plan:
        for nbytes in sizes:
            got, seconds = _all_gather_seconds(group, size, nbytes, device, dtype, warmup,
                                               repeats)
            rows.append(CollectiveRow(got, seconds, size, scope))
            if progress is not None:
                progress.step(f"all-gather {scope} {size} ranks {got / 2**20:.2f} MiB")
    dist.barrier()
    return rows


def steps(launch: Launch, sizes: Sequence[int]) -> int:
    """Progress steps :func:`measure` and :func:`measure_sharded` take."""
    return (len(sizes) * ((launch.local_world >= 2) + (launch.nodes >= 2))
            + len(SHARDED_COUNTS) * (launch.local_world >= 2))


def _worker(rank: int, world: int, local: int, init: str, device_type: str,
            sizes: list[int], warmup: int, repeats: int, out: str, show: bool,
            heads: tuple[int, int, int]) -> None:
    """One spawned process: joins the group through ``init`` and measures; rank 0 writes the
    rows to ``out``."""
    launch = Launch(rank, world, local)
    device = torch.device(device_type)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=init,
                            rank=rank, world_size=world)
    try:
        progress = Progress(steps(launch, sizes), enabled=show) if rank == 0 else None
        rows = measure(launch, device, sizes, warmup, repeats, progress)
        sharded = measure_sharded(launch, device, heads, warmup, repeats, progress)
        if progress is not None:
            progress.close()
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump({"collective": [asdict(r) for r in rows],
                           "sharded": [asdict(r) for r in sharded]}, f)
    finally:
        dist.destroy_process_group()


def spawn(procs: int, nodes: int, device: torch.device, sizes: Sequence[int], warmup: int,
          repeats: int, show: bool, heads: tuple[int, int, int]
          ) -> tuple[list[CollectiveRow], list[ShardedRow]]:
    """Runs :func:`measure` and :func:`measure_sharded` (attention of ``heads``: query
    heads, KV heads, head dim) on ``procs`` new local processes split into ``nodes`` groups of
    consecutive ranks (gloo on CPU, NCCL on CUDA, one GPU per process round robin); returns
    rank 0's rows. On CPU the processes are forked where the platform can (this process has
    not computed anything yet, and forking skips importing torch again); CUDA needs
    ``spawn``."""
    import multiprocessing

    import torch.multiprocessing as mp

    fork = device.type == "cpu" and "fork" in multiprocessing.get_all_start_methods()

    with tempfile.TemporaryDirectory(prefix="skrull-profile-") as tmp:
        out = os.path.join(tmp, "collectives.json")
        start: Any = getattr(mp, "start_processes")
        start(_worker, args=(procs, procs // nodes, f"file://{tmp}/rendezvous", device.type,
                             list(sizes), warmup, repeats, out, show, heads), nprocs=procs,
              start_method="fork" if fork else "spawn")
        with open(out, encoding="utf-8") as f:
            got = json.load(f)
        return ([CollectiveRow(**r) for r in got["collective"]],
                [ShardedRow(**r) for r in got["sharded"]])
