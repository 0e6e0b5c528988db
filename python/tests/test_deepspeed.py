"""DeepSpeed on two gloo processes (CPU, ``DS_ACCELERATOR=cpu``), float64 tiny Llama, SGD: the
raw engine loop through ``skrull.deepspeed`` and ``SkrullTrainer(deepspeed=...)`` at DP 2 and
DP 1 x CP 2 against plain DeepSpeed on the same global batches (every sequence on its own
micro-batch) and against the float64 per-sequence reference; ZeRO-1 with unmanaged
accumulation running unequal micro-batch counts; ZeRO-2 refusing them on every rank; a run
resumed from a checkpoint mid-epoch yielding the same remaining batches; ZeRO-3 at DP 1 x
CP 2; ``examples/deepspeed_sft.py``'s ``main`` (the example torchrun runs) and one run of
``python -m skrull.bench --engine deepspeed``'s rank on the same process group. One launch
runs every job.

ZeRO keeps float32 master weights and gradients (for a float64 model too), so weights agree
with the float64 reference and with plain DeepSpeed to float32 rounding (measured about 1e-7
after 3 SGD steps); the first step's loss is computed before any update and agrees exactly.
"""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("transformers")
if importlib.util.find_spec("deepspeed") is None:  # not imported here: the ranks import it
    pytest.skip("DeepSpeed is not installed", allow_module_level=True)

import re  # noqa: E402

import _deepspeed_worker as dsw  # noqa: E402
import _hf_worker as hf  # noqa: E402

JOBS = [
    ("dp2", "raw", dsw.job_spec(cp=1, bucket=dsw.BUCKET_DP)),
    ("plain", "plain", dsw.job_spec(batches=dsw.batches())),
    ("trainer_dp2", "trainer", dsw.job_spec(cp=1, bucket=dsw.BUCKET_DP, grad_accum=3,
                                            use_cpu=False)),
    ("cp2", "raw", dsw.job_spec(cp=2, bucket=dsw.BUCKET_CP)),
    ("trainer_cp2", "trainer", dsw.job_spec(cp=2, bucket=dsw.BUCKET_CP, grad_accum=7,
                                            use_cpu=True)),
    ("zero1_unequal", "raw", dsw.job_spec(cp=1, bucket=dsw.BUCKET_DP, stage=1, managed=False)),
    ("resumed", "raw", dsw.job_spec(cp=1, bucket=dsw.BUCKET_DP, resume_after=1)),
    ("zero2_unequal", "refused", dsw.job_spec(bucket=dsw.BUCKET_DP)),
    # ZeRO-3 refuses float64 parameters: this run is float32.
    ("zero3_cp2", "raw", dsw.job_spec(cp=2, bucket=dsw.BUCKET_CP, stage=3, dtype="float32")),
]


EXAMPLE_ARGV = ["--cp", "2", "--zero", "2", "--policy", "skrull", "--steps", "2",
                "--global-batch", "5", "--bucket", "64"]
EXAMPLE_LENGTHS = [5, 120, 33, 64, 1, 90, 17, 128, 8, 47]
BENCH_ARGV = ["--device", "cpu", "--engine", "deepspeed", "--zero", "2", "--dp", "1", "--cp",
              "2", "--dataset", "chatqa2", "--max-len", "256", "--batch", "4", "--warmup", "2",
              "--steps", "1", "--policies", "balanced"]


def _bench_spec() -> tuple:
    """What ``python -m skrull.bench`` hands one rank for ``BENCH_ARGV``."""
    from skrull.bench import _grad_accum
    from skrull.bench._options import lengths_and_bucket, parse
    from skrull.profile import find_cli
    opts, cli = parse(BENCH_ARGV), find_cli(None)
    lengths, bucket = lengths_and_bucket(opts, cli)
    spec = {"policy": "balanced", "dp": 1, "cp": 2, "bucket": bucket, "batch": opts.batch,
            "warmup": opts.warmup, "steps": opts.steps, "lengths": lengths,
            "longest": max(lengths), "grad_accum": _grad_accum(opts, "balanced", lengths, bucket,
                                                                None),
            "model_config": opts.model_config, "dtype": opts.dtype, "device": "cpu",
            "calibrate": opts.calibrate, "cost_model": None, "seed": opts.seed,
            "zero": opts.zero}
    return opts, cli, spec


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("deepspeed")
    opts, cli, bench_spec = _bench_spec()
    jobs = JOBS + [("example", "example", {"argv": EXAMPLE_ARGV, "lengths": EXAMPLE_LENGTHS}),
                   ("bench", "bench", bench_spec)]  # last: the bench's rank keeps no stdout
    result = dsw.launch(2, jobs, str(out))
    print(f"\nseconds per job: {result['seconds']}")
    result["bench_context"] = (opts, cli, bench_spec)
    return result, dsw.sgd_reference(dsw.batches())


def test_plain_deepspeed_is_the_reference_to_float32_rounding(ran):
    result, ref = ran
    assert hf.max_rel_diff(result["plain"]["weights"], ref["weights"]) < dsw.WEIGHTS_TOLERANCE


@pytest.mark.parametrize("name,label", [("dp2", "raw loop, DP 2, ZeRO-2"),
                                        ("cp2", "raw loop, DP 1 x CP 2, ZeRO-2")])
def test_raw_loop_equals_plain_deepspeed_and_the_reference(ran, name, label):
    result, ref = ran
    got = result[name]
    assert got["batches"] == dsw.batches()  # the Trainer's global batches
    dsw.check(got, ref, result["plain"], label)


def test_raw_loop_declares_cp_to_deepspeed(ran):
    result, _ = ran
    dp2, cp2 = result["dp2"], result["cp2"]
    # DP 2: G 3 micro-batches on every DP rank, train_batch_size G x DP.
    assert dp2["sp"] == 1 and dp2["gas"] == dp2["micro_batches"] == 3
    assert dp2["train_batch_size"] == 6
    assert all(c == [3, 3] for c in dp2["counts"])
    # DP 1 x CP 2: DeepSpeed sees 2 sequence-parallel ranks and DP 1.
    assert cp2["sp"] == 2 and cp2["train_batch_size"] == cp2["gas"] == cp2["micro_batches"]
    assert all(c == [cp2["micro_batches"]] for c in cp2["counts"])


@pytest.mark.parametrize("name,label", [("trainer_dp2", "SkrullTrainer, DP 2, ZeRO-2"),
                                        ("trainer_cp2", "SkrullTrainer, DP 1 x CP 2, ZeRO-2")])
def test_trainer_under_deepspeed_equals_plain_deepspeed_and_the_reference(ran, name, label):
    result, ref = ran
    got = result[name]
    assert got["engine"] == "DeepSpeedEngine" and got["world_size"] == 2
    dsw.check(got, ref, result["plain"], label)


def test_trainer_starts_on_cpu_without_use_cpu(ran):
    # Regression: with use_cpu=False, transformers counted one process on a CPU-only machine
    # and DeepSpeed refused the batch sizes; SkrullTrainer repairs the arguments.
    result, _ = ran
    assert result["trainer_dp2"]["world_size"] == 2
    assert result["trainer_dp2"]["micro_batches"] == dsw.STEPS * 3


def test_raw_loop_and_trainer_run_the_same_steps(ran):
    result, _ = ran
    for raw, trainer in (("dp2", "trainer_dp2"), ("cp2", "trainer_cp2")):
        diff = hf.max_rel_diff(result[raw]["weights"], result[trainer]["weights"])
        print(f"\n{raw} vs {trainer}: {diff:.1e}")
        assert diff < 1e-12


def test_zero1_runs_unequal_counts(ran):
    result, ref = ran
    got = result["zero1_unequal"]
    assert got["micro_batches"] is None and got["gas"] == 1
    assert any(c[0] != c[1] for c in got["counts"]), got["counts"]
    dsw.check(got, ref, result["plain"], "raw loop, DP 2, ZeRO-1 unmanaged, unequal counts")


def test_zero2_refuses_unequal_counts_on_every_rank(ran):
    result, _ = ran
    messages = result["zero2_unequal"]["messages"]
    assert len(messages) == 2 and messages[0] == messages[1]
    assert "needs ZeRO stage 0 or 1" in messages[0] and "hang" in messages[0]


def test_resume_mid_epoch_yields_the_same_remaining_batches(ran):
    result, _ = ran
    whole, resumed = result["dp2"], result["resumed"]
    assert resumed["resumed_at"] == 1
    assert resumed["batches"] == whole["batches"] and resumed["counts"] == whole["counts"]
    assert hf.max_rel_diff(resumed["weights"], whole["weights"]) == 0.0
    assert resumed["losses"][1:] == whole["losses"][1:]


def test_zero3_with_cp_ranks_declared_scales_the_loss_by_every_rank(ran):
    # Regression: ZeRO-3 divides gradients by all ranks, sequence-parallel ones included
    # (ZeRO-1/2 by DP only); scaled by DP, DP 1 x CP 2 gradients were exactly half (weights
    # off by 0.30 after 3 steps).
    result, ref = ran
    got = result["zero3_cp2"]
    assert got["sp"] == 2 and got["micro_batches"] == result["cp2"]["micro_batches"]
    first = abs(got["losses"][0] - ref["losses"][0]) / ref["losses"][0]
    weights = hf.max_rel_diff({k: v.double() for k, v in got["weights"].items()},
                              ref["weights"])
    print(f"\nraw loop, DP 1 x CP 2, ZeRO-3, float32: first loss {first:.1e}, weights vs "
          f"float64 reference {weights:.1e}")
    assert first < 1e-6 and weights < dsw.WEIGHTS_TOLERANCE


def test_the_example_trains_as_plain_deepspeed_does(ran):
    result, _ = ran
    out = result["example"]["stdout"]
    assert "DP 1 x CP 2, ZeRO-2" in out, out
    steps = re.findall(r"step (\d): loss ([\d.]+), \d+ micro-batches \(\[(\d+)\] per DP rank\), "
                       r"sharded (\d+) of 5", out)
    assert [s[0] for s in steps] == ["1", "2"], out
    assert sum(int(s[3]) for s in steps) > 0  # some sequence ran sharded over the CP ranks
    final = re.search(r"max relative weight difference vs plain deepspeed: (\S+)", out)
    assert final and float(final.group(1)) < dsw.WEIGHTS_TOLERANCE, out


def test_the_bench_times_steps_on_deepspeed_and_predicts_them_every_gpu(ran):
    from skrull.bench import _summarise
    from skrull.bench._predict import evaluate
    result, _ = ran
    opts, cli, spec = result["bench_context"]
    got = result["bench"]["result"]
    steps = spec["warmup"] + spec["steps"]
    assert len(got["records"]) == steps and len(got["all_step_s"]) == steps - 1
    assert got["micro_batches"] == spec["grad_accum"] and got["peak_memory_bytes"] > 0
    row = _summarise(opts, "balanced", got, cli)
    assert row["measured_step_s"] > 0 and row["predicted_step_s"] > 0
    timed = got["records"][spec["warmup"]]
    report = evaluate(cli, timed["plan"], got["cost_model"], sync="every-gpu")
    # ZeRO-2: every micro-batch waits for every GPU of the job: at least the slowest GPU of
    # each micro-batch index, summed (the evaluator's every-gpu composition).
    slowest: dict[int, float] = {}
    for m in report["micro_batches"]:
        slowest[m["index"]] = max(slowest.get(m["index"], 0.0), max(m["rank_times_s"]))
    assert row["predicted_step_s"] == pytest.approx(report["iteration_time_s"], rel=1e-12)
    assert row["predicted_step_s"] >= sum(slowest.values()) * (1 - 1e-9)
