"""``python -m skrull.bench``: one tiny run end to end (the JSON's shape, not its speeds) and
every bad input refused with a clear message before any process starts."""

import json
import os

import pytest

pytest.importorskip("transformers")

from skrull.bench import BenchError, main  # noqa: E402
from skrull.bench._options import parse, lengths_and_bucket, check_fits  # noqa: E402
from skrull.bench._predict import (executor_time_s, mark_group_chunks,  # noqa: E402
                                   measured_compute_s)
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


def test_executor_composition_waits_only_for_sharded_micro_batches():
    # Two local micro-batches that are slow on alternate ranks take 3 s, not 4 (the
    # evaluator's barrier), and a sharded one starts when both ranks are ready.
    mbs = [{"dp": 0, "index": 0, "sharded": 0, "rank_times_s": [2.0, 1.0]},
           {"dp": 0, "index": 1, "sharded": 0, "rank_times_s": [1.0, 2.0]}]
    assert executor_time_s({"micro_batches": mbs}, 1, 2) == 3.0
    mbs.append({"dp": 0, "index": 2, "sharded": 1, "rank_times_s": [0.5, 1.0]})
    assert executor_time_s({"micro_batches": mbs}, 1, 2) == 4.0
    assert measured_compute_s([[[2.0, 1.0]], [[1.0, 2.0]]]) == 3.0
    # A sequence chunked over the group holds the ranks together like a sharded one; on one
    # GPU it does not (mark_group_chunks reads the group from the plan).
    plan = {"placements": [{"kind": "chunked", "cp_size": 2, "dp": 0, "micro_batch": 0},
                           {"kind": "chunked", "cp_size": 1, "dp": 0, "micro_batch": 1}]}
    mbs = [{"dp": 0, "index": 0, "sharded": 0, "rank_times_s": [2.0, 1.0]},
           {"dp": 0, "index": 1, "sharded": 0, "rank_times_s": [1.0, 2.0]}]
    report = mark_group_chunks({"micro_batches": mbs}, json.dumps(plan))
    assert [m["group_chunked"] for m in mbs] == [1, 0]
    assert executor_time_s(report, 1, 2) == 4.0


@pytest.mark.parametrize("argv, message", [
    (["--policies", "balanced,nope"], "unknown policy 'nope'"),
    (["--chunk-size", "-1"], "--chunk-size"),
    (["--dataset", "imdb"], "unknown dataset 'imdb'"),
    (["--dp", str(CORES), "--cp", "2"], "CPU cores"),
    (["--calibrate", "online", "--warmup", "1"], "--warmup 2"),
    (["--model", "/nonexistent/config.json"], "--model"),
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
