"""``python -m skrull.bench --engine deepspeed``: the ZeRO-2/3 composition of predicted times
(every micro-batch waits for every GPU), the engine's worker, and the engine options refused
where they make no sense. test_deepspeed.py runs the DeepSpeed worker on two processes."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from skrull.bench import BenchError  # noqa: E402
from skrull.bench._engine import every_gpu_time_s, predicted_time_s, worker  # noqa: E402
from skrull.bench._options import parse  # noqa: E402


def _report() -> dict:
    # Two DP ranks of two CP ranks, two micro-batches of whole sequences each.
    return {"micro_batches": [
        {"dp": 0, "index": 0, "sharded": 0, "rank_times_s": [2.0, 1.0]},
        {"dp": 0, "index": 1, "sharded": 0, "rank_times_s": [1.0, 1.0]},
        {"dp": 1, "index": 0, "sharded": 0, "rank_times_s": [1.0, 3.0]},
        {"dp": 1, "index": 1, "sharded": 0, "rank_times_s": [2.0, 1.0]}]}


def test_zero2_waits_for_every_gpu_at_every_micro_batch():
    # Slowest GPU of micro-batch 0 (3 s) plus that of micro-batch 1 (2 s); under DDP or
    # ZeRO-0/1 each CP rank runs on (DP rank 1's ranks finish at 3 s and 4 s).
    assert every_gpu_time_s(_report()) == 5.0
    opts = parse(["--device", "cpu", "--dp", "1", "--cp", "2"])
    opts.dp = 2
    assert predicted_time_s(opts, _report()) == 4.0
    opts.engine, opts.zero = "deepspeed", 2
    assert predicted_time_s(opts, _report()) == 5.0
    opts.zero = 1
    assert predicted_time_s(opts, _report()) == 4.0


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
