"""``python -m skrull.bench --engine deepspeed``: the ZeRO-2/3 composition of predicted times
(every micro-batch waits for every GPU), the engine's worker, and the engine options refused
where they make no sense. test_deepspeed.py runs the DeepSpeed worker on two processes."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from skrull.bench import BenchError  # noqa: E402
from skrull.bench._engine import sync_of, worker  # noqa: E402
from skrull.bench._options import parse  # noqa: E402


def test_each_engine_predicts_with_its_synchronisation():
    # SkrullTrainer (DDP under no_sync) and ZeRO-0/1: CP ranks meet only in sharded
    # micro-batches; ZeRO-2/3: every micro-batch waits for every GPU.
    opts = parse(["--device", "cpu", "--dp", "1", "--cp", "2"])
    assert sync_of(opts) == "sharded"
    opts.engine, opts.zero = "deepspeed", 2
    assert sync_of(opts) == "every-gpu"
    opts.zero = 3
    assert sync_of(opts) == "every-gpu"
    opts.zero = 1
    assert sync_of(opts) == "sharded"


def _has_deepspeed() -> bool:
    import importlib.util
    return importlib.util.find_spec("deepspeed") is not None


def test_zero_needs_the_deepspeed_engine():
    with pytest.raises(BenchError, match="--zero: only with --engine deepspeed"):
        parse(["--device", "cpu", "--zero", "2"])


@pytest.mark.skipif(not _has_deepspeed(), reason="DeepSpeed")
def test_the_deepspeed_engine_defaults_to_zero2():
    assert parse(["--device", "cpu", "--engine", "deepspeed"]).zero == 2


def test_each_engine_has_its_worker():
    from skrull.bench import _ds_worker, _worker
    opts = parse(["--device", "cpu"])
    assert worker(opts) is _worker.rank_main
    opts.engine = "deepspeed"
    assert worker(opts) is _ds_worker.rank_main
