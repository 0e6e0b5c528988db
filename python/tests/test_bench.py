"""``python -m skrull.bench``: one tiny run end to end (the JSON's shape, not its speeds) and
every bad input refused with a clear message before any process starts."""

import json
import os

import pytest

pytest.importorskip("transformers")

from skrull.bench import BenchError, main  # noqa: E402
from skrull.bench._options import parse, lengths_and_bucket, check_fits  # noqa: E402
from skrull.bench._predict import executor_time_s, measured_compute_s  # noqa: E402
from skrull.profile import find_cli  # noqa: E402

CORES = len(os.sched_getaffinity(0))


@pytest.mark.skipif(CORES < 2, reason="DP 1 x CP 2 needs two cores")
def test_tiny_run_prints_the_documented_json(tmp_path, capsys):
    out, chart = tmp_path / "bench.json", tmp_path / "bench.svg"
    main(["--dp", "1", "--cp", "2", "--dataset", "chatqa2", "--max-len", "256",
          "--batch", "4", "--warmup", "2", "--steps", "1", "--policies", "balanced,deepspeed",
          "--calibrate", "online", "--format", "json", "--quiet", "--out", str(out),
          "--chart", str(chart)])
    printed = json.loads(capsys.readouterr().out)   # nothing but the JSON on stdout
    assert printed == json.loads(out.read_text())
    assert printed["config"]["dp"] == 1 and printed["config"]["cp"] == 2
    assert [p["policy"] for p in printed["policies"]] == ["balanced", "deepspeed"]
    for p in printed["policies"]:
        for key in ("measured_step_s", "predicted_step_s", "tokens_per_s",
                    "speedup_vs_deepspeed", "peak_memory_bytes", "micro_batches"):
            assert key in p, key
        assert p["measured_step_s"] > 0 and p["predicted_step_s"] > 0
        assert p["peak_memory_bytes"] > 0 and p["micro_batches"] >= 1
        assert p["refit"] is not None and "refit" in p["refit"]
    ds = printed["policies"][1]
    assert ds["speedup_vs_deepspeed"] == 1.0
    assert chart.read_text().startswith("<svg")


def test_executor_composition_waits_only_for_sharded_micro_batches():
    # Two local micro-batches that are slow on alternate ranks take 3 s, not 4 (the
    # evaluator's barrier), and a sharded one starts when both ranks are ready.
    mbs = [{"dp": 0, "index": 0, "sharded": 0, "rank_times_s": [2.0, 1.0]},
           {"dp": 0, "index": 1, "sharded": 0, "rank_times_s": [1.0, 2.0]}]
    assert executor_time_s({"micro_batches": mbs}, 1, 2) == 3.0
    mbs.append({"dp": 0, "index": 2, "sharded": 1, "rank_times_s": [0.5, 1.0]})
    assert executor_time_s({"micro_batches": mbs}, 1, 2) == 4.0
    assert measured_compute_s([[[2.0, 1.0]], [[1.0, 2.0]]]) == 3.0


@pytest.mark.parametrize("argv, message", [
    (["--policies", "balanced,nope"], "unknown policy 'nope'"),
    (["--policies", "chunkflow"], "chunkflow"),
    (["--dataset", "imdb"], "unknown dataset 'imdb'"),
    (["--dp", str(CORES), "--cp", "2"], "CPU cores"),
    (["--calibrate", "online", "--warmup", "1"], "--warmup 2"),
    (["--model", "/nonexistent/config.json"], "--model"),
    (["--outlier-delay", "65"], "--outlier-delay"),
    (["--cost-model", "/nonexistent/model.json"], "--cost-model"),
    (["--cost-model", __file__, "--calibrate", "profile"], "not with --calibrate profile"),
])
def test_bad_options_are_refused(argv, message):
    with pytest.raises(BenchError, match=message):
        parse(["--device", "cpu"] + argv)


def test_bad_lengths_files_are_refused(tmp_path):
    cli = find_cli(None)
    bad = tmp_path / "bad.txt"
    bad.write_text("12\nseven\n")
    with pytest.raises(BenchError, match="line 2: 'seven' is not an integer"):
        lengths_and_bucket(parse(["--device", "cpu", "--lengths", str(bad)]), cli)
    long = tmp_path / "long.txt"
    long.write_text("\n".join(["100"] * 15 + ["5000"]) + "\n")
    with pytest.raises(BenchError, match="5000 tokens does not fit --bucket 1024"):
        lengths_and_bucket(parse(["--device", "cpu", "--lengths", str(long),
                                  "--bucket", "1024", "--cp", "2"]), cli)


def test_a_model_that_does_not_fit_is_refused():
    opts = parse(["--device", "cpu", "--cp", "1", "--model", "qwen2.5-0.5b"])
    with pytest.raises(BenchError, match="GiB per process"):
        check_fits(opts, 1 << 31)


def test_the_delayed_steps_are_what_the_sampler_trains():
    """``--outlier-delay``'s micro-batch count is sized on the steps the sampler yields."""
    import skrull
    from skrull.bench._delay import delayed_steps, mean_p95, whole_epochs
    from skrull.hf import SkrullBatchSampler
    lengths = [40] * 60
    for i in (3, 21, 40):
        lengths[i] = 3000
    sched = skrull.Scheduler(2, 1, 4096, shard_padding="zigzag")
    sampler = SkrullBatchSampler(lengths, 6, 4096, 1, dp_size=2, rank=0, seed=0,
                                 outlier_delay=2, shard_padding="zigzag")
    sampler.record_plans = True
    list(sampler)
    import torch
    order = torch.randperm(60, generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[k * 6:(k + 1) * 6] for k in range(10)]
    steps = delayed_steps(batches, 10, lengths, sched, 2)
    assert [sorted(lengths[i] for i in s) for s in steps] == \
        [sorted(p.lengths.tolist()) for _, _, p in sampler.plans]
    assert steps != batches and sorted(sum(steps, [])) == list(range(60))
    assert whole_epochs(11, 10) == 20 and mean_p95([1.0, 3.0]) == (2.0, 3.0)
