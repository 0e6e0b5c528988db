"""The binding passes every option to C as the CLI does: same plans for the same settings."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import skrull

from conftest import ROOT

CLI = Path(os.environ.get("SKRULL_CLI", ROOT / "target" / "release" / "skrull"))
pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI binary at {CLI} (build it "
                                "with cargo build --release -p skrull-cli, or set SKRULL_CLI)")

CASES = [dict(policy=p, shard_padding=pad) for p in skrull.POLICIES for pad in ("none", "zigzag")]
CASES += [dict(policy="skrull", victim="longest"), dict(policy="balanced", flops="megatron"),
          dict(policy="skrull", max_micro_batches=40),
          dict(policy="balanced", model="qwen2.5-7b"),
          dict(policy="skrull", model=skrull.ModelShape(512, 128, 2048, 8, 32000, False))]


def _cli_plan(lengths: np.ndarray, dp: int, cp: int, bucket: int, opts: dict) -> dict:
    args = [str(CLI), "plan", "--lengths", "-", "--dp", str(dp), "--cp", str(cp), "--bucket",
            str(bucket), "--format", "json"]
    for key, value in opts.items():
        if isinstance(value, skrull.ModelShape):
            value = ("custom:" + ",".join(f"{k}={getattr(value, k)}" for k in (
                "hidden", "kv_hidden", "ffn", "layers", "vocab")) +
                f",swiglu={str(value.swiglu).lower()}")
        args += ["--" + key.replace("_", "-"), str(value)]
    text = "\n".join(map(str, lengths.tolist())) + "\n"
    return json.loads(subprocess.run(args, input=text, capture_output=True, text=True,
                                     check=True).stdout)


@pytest.mark.parametrize("opts", CASES, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_python_and_cli_plans_are_identical(opts):
    rng = np.random.default_rng(99)
    lengths = np.exp(rng.uniform(0, np.log(6000), 150)).astype(np.int64) + 1
    plan = skrull.Scheduler(2, 4, 2048, **opts).plan(lengths)
    cli = _cli_plan(lengths, 2, 4, 2048, opts)
    assert [(p["dp"], p["micro_batch"], p["cp"]) for p in cli["placements"]] == list(
        zip(plan.dp_rank.tolist(), plan.micro_batch.tolist(), plan.cp_rank.tolist()))
    assert cli["micro_batches_per_dp"] == plan.micro_batches_per_dp.tolist()
    assert [row for d in cli["rank_tokens"] for row in d] == plan.rank_tokens.tolist()
    s = plan.summary
    assert cli["summary"] == dict(sequences=s.sequences, total_tokens=s.total_tokens,
                                  micro_batches=s.micro_batches, sharded=s.sharded,
                                  rollbacks=s.rollbacks, peak_rank_tokens=s.peak_rank_tokens)
