"""``python -m skrull.bench``: one tiny run end to end (the JSON's shape, not its speeds) and
every bad input refused with a clear message before any process starts."""

import json
import os

import pytest

pytest.importorskip("transformers")

from skrull.bench import BenchError, main  # noqa: E402
from skrull.bench._options import parse, lengths_and_bucket, check_fits  # noqa: E402
from skrull.bench import _noise, _ranked_alike, _spread  # noqa: E402
from skrull.bench._predict import evaluate, measured_compute_s  # noqa: E402
from skrull.profile import find_cli  # noqa: E402

CORES = len(os.sched_getaffinity(0))


@pytest.mark.skipif(CORES < 2, reason="DP 1 x CP 2 needs two cores")
def test_tiny_run_prints_the_documented_json(tmp_path, capsys):
    out, chart = tmp_path / "bench.json", tmp_path / "bench.svg"
    main(["--dp", "1", "--cp", "2", "--dataset", "chatqa2", "--max-len", "256",
          "--batch", "4", "--warmup", "2", "--steps", "1", "--policies", "balanced,deepspeed",
          "--calibrate", "online", "--calibration-steps", "3", "--format", "json", "--quiet",
          "--out", str(out),
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
        assert p["measured_spread"] >= 0 and p["runs"] in (1, 2)
    # One calibration of the machine, before the policies, used by every one of them.
    cal = printed["calibration"]
    assert cal is not None and "cost model" in cal["refit"]
    assert cal["iteration_fixed_s"] >= 0
    # The model's per-step cost holds what each rank pays inside its last micro-batch.
    assert 0 <= cal["last_micro_batch_s"] <= cal["iteration_fixed_s"] + 1e-12
    # One refit pools a calibration run per policy of CALIBRATION_POLICIES: 3 observed
    # steps each, after one dropped.
    assert cal["policies"] == ["balanced", "deepspeed"]
    assert "over 6 steps" in cal["refit"], cal["refit"]
    ds = printed["policies"][1]
    assert ds["speedup_vs_deepspeed"] == 1.0
    assert chart.read_text().startswith("<svg")


@pytest.mark.skipif(CORES < 2, reason="DP 1 x CP 2 needs two cores")
def test_chunkflow_runs_real_steps_beside_its_prediction(tmp_path, capsys):
    # Was refused ("chunkflow plans chunked sequences, which the attention executor cannot
    # run") before the chunk executor.
    main(["--dp", "1", "--cp", "2", "--dataset", "chatqa2", "--max-len", "256",
          "--batch", "4", "--warmup", "1", "--steps", "1", "--policies", "chunkflow",
          "--chunk-size", "64", "--format", "json", "--quiet"])
    printed = json.loads(capsys.readouterr().out)
    (p,) = printed["policies"]
    assert p["policy"] == "chunkflow" and p["measured_step_s"] > 0
    assert p["predicted_step_s"] > 0 and p["micro_batches"] >= 1


def test_the_prediction_composes_the_trainers_synchronisation(tmp_path):
    """The bench predicts with the evaluator's ``sharded`` composition (DDP under no_sync):
    the plan carries it, and it never takes longer than the barrier at every micro-batch."""
    import skrull
    from skrull.profile import find_cli
    cli = find_cli(None)
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=3000, policy="skrull", sync="sharded")
    plan = s.plan([2900, 100, 2900, 150, 2800, 120])
    model = skrull.CostModel("h100").to_json()
    rep = evaluate(cli, plan.to_json(), model)
    barrier = evaluate(cli, plan.to_json(), model, sync="cp-group")
    assert rep["iteration_time_s"] <= barrier["iteration_time_s"]
    # By hand: the ranks' clocks run apart through micro-batches without a sharded sequence.
    clocks = [0.0, 0.0]
    for m in sorted(rep["micro_batches"], key=lambda m: m["index"]):
        t = m["rank_times_s"]
        if m["sharded"]:
            clocks = [max(clocks) + max(t)] * 2
        else:
            clocks = [c + x for c, x in zip(clocks, t)]
    fixed = json.loads(model).get("iteration_fixed_s", 0.0)
    assert rep["iteration_time_s"] == pytest.approx(max(clocks) + fixed, rel=1e-12)
    assert measured_compute_s([[[2.0, 1.0]], [[1.0, 2.0]]]) == 3.0


def test_only_pairs_apart_by_more_than_the_noise_must_rank_alike():
    rows = [{"measured_step_s": 1.0, "predicted_step_s": 2.0},
            {"measured_step_s": 1.05, "predicted_step_s": 1.0},   # within 10 %: not judged
            {"measured_step_s": 2.0, "predicted_step_s": 3.0}]
    assert _ranked_alike(rows) == (True, 2)
    rows[2]["predicted_step_s"] = 0.5
    assert _ranked_alike(rows) == (False, 2)
    assert _spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)


def test_noise_is_the_spread_the_steps_content_does_not_explain():
    # Regression: every run was marked noisy (spreads of 30-70 %) because the timed steps
    # train different global batches; a step twice as long that was predicted twice as long
    # is not noise.
    walls, predicted = [0.1, 0.2, 0.4], [1.0, 2.0, 4.0]
    assert _spread(walls) == pytest.approx(1.5)
    assert _noise(walls, predicted) == pytest.approx(0.0)
    assert _noise([0.1, 0.2], [1.0, 1.0]) == pytest.approx(2 / 3)
    assert _noise(walls, [1.0, 0.0, 4.0]) == _spread(walls)  # a step without a prediction


@pytest.mark.parametrize("argv, message", [
    (["--policies", "balanced,nope"], "unknown policy 'nope'"),
    (["--chunk-size", "-1"], "--chunk-size"),
    (["--dataset", "imdb"], "unknown dataset 'imdb'"),
    (["--dp", str(CORES), "--cp", "2"], "CPU cores"),
    (["--calibrate", "online", "--calibration-steps", "1"], "--calibration-steps"),
    (["--calibrate", "online", "--cost-model", "x.json"], "--cost-model: only with"),
    (["--cost-model", "/nonexistent/model.json"], "no such file"),
    (["--max-spread", "0"], "--max-spread"),
    (["--model", "/nonexistent/config.json"], "--model"),
    (["--outlier-delay", "65"], "--outlier-delay"),
    (["--cost-model", __file__, "--calibrate", "profile"], "--cost-model: only with"),
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
