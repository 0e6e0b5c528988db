"""DeepSpeed ZeRO-2 at DP 2 x CP 2 (four gloo processes, one launch): the raw loop through
``skrull.deepspeed`` (CP ranks declared to DeepSpeed as sequence-parallel ranks) and
``SkrullTrainer(deepspeed=...)`` against plain DeepSpeed on the same global batches (DP 4,
every sequence on its own micro-batch) and the float64 per-sequence reference, as
test_deepspeed.py does at DP 2 and DP 1 x CP 2."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("transformers")
if importlib.util.find_spec("deepspeed") is None:  # not imported here: the ranks import it
    pytest.skip("DeepSpeed is not installed", allow_module_level=True)

import skrull  # noqa: E402

import _deepspeed_worker as dsw  # noqa: E402
import _hf_worker as hf  # noqa: E402

G = 3  # what the batches need at DP 2 x CP 2, BucketSize 64 (the raw loop's "auto" finds it)

JOBS = [
    ("raw", "raw", dsw.job_spec(cp=2, bucket=dsw.BUCKET_CP)),
    ("plain", "plain", dsw.job_spec(batches=dsw.batches())),
    ("trainer", "trainer", dsw.job_spec(cp=2, bucket=dsw.BUCKET_CP, grad_accum=G,
                                        use_cpu=False)),
]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    result = dsw.launch(4, JOBS, str(tmp_path_factory.mktemp("deepspeed_cp")))
    print(f"\nseconds per job: {result['seconds']}")
    return result, dsw.sgd_reference(dsw.batches())


def test_plans_shard_some_sequences_and_keep_others_whole():
    lengths = dsw.lengths()
    sched = skrull.Scheduler(2, 2, dsw.BUCKET_CP, micro_batches=G, shard_padding="zigzag")
    plans = [sched.plan([lengths[i] for i in b]) for b in dsw.batches()]
    sharded = sum(p.summary.sharded for p in plans)
    assert 0 < sharded < sum(p.summary.sequences for p in plans)


def test_raw_loop_at_dp2_cp2_equals_plain_deepspeed_and_the_reference(ran):
    result, ref = ran
    got = result["raw"]
    assert got["micro_batches"] == G and got["sp"] == 2 and got["train_batch_size"] == G * 2
    assert got["batches"] == dsw.batches()
    dsw.check(got, ref, result["plain"], "raw loop, DP 2 x CP 2, ZeRO-2")


def test_trainer_at_dp2_cp2_equals_plain_deepspeed_and_the_reference(ran):
    result, ref = ran
    got = result["trainer"]
    assert got["engine"] == "DeepSpeedEngine" and got["world_size"] == 4
    dsw.check(got, ref, result["plain"], "SkrullTrainer, DP 2 x CP 2, ZeRO-2")
    assert hf.max_rel_diff(got["weights"], result["raw"]["weights"]) < 1e-12
