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
CASES += [dict(policy="skrull", victim="longest"), dict(policy="skrull", flops="megatron"),
          dict(policy="skrull", max_micro_batches=40),
          dict(policy="balanced", model="qwen2.5-7b"),
          dict(policy="skrull", model=skrull.ModelShape(512, 128, 2048, 8, 32000, False)),
          dict(policy="skrull", pad_multiple=16), dict(policy="balanced", pad_multiple=24),
          dict(policy="packed", pad_multiple=16, pad_local=True, shard_padding="zigzag"),
          dict(policy="skrull", lockstep=True), dict(policy="deepspeed", lockstep=True),
          dict(policy="balanced", lockstep=True, pad_multiple=8, pad_local=True),
          dict(policy="balanced", cost_model="h200", model="qwen2.5-7b"),
          dict(policy="chunkflow", chunk_size=1024, chunk_keep=2),
          dict(policy="balanced", chunk_size=1024, chunk_state_permille=100),
          dict(policy="balanced", cost_model=skrull.CostModel("h100", gpus_per_node=4,
                                                               inter_node_bandwidth=2e9))]


def _cli_plan(lengths: np.ndarray, dp: int, cp: int, bucket: int, opts: dict,
              tmp_path: Path, extra: tuple[str, ...] = ()) -> dict:
    args = [str(CLI), "plan", "--lengths", "-", "--dp", str(dp), "--cp", str(cp), "--bucket",
            str(bucket), "--format", "json", *extra]
    for key, value in opts.items():
        if isinstance(value, skrull.ModelShape):
            value = ("custom:" + ",".join(f"{k}={getattr(value, k)}" for k in (
                "hidden", "kv_hidden", "ffn", "layers", "vocab")) +
                f",swiglu={str(value.swiglu).lower()}")
        if isinstance(value, bool):  # switches
            args += ["--" + key.replace("_", "-")] if value else []
        elif key == "cost_model" and isinstance(value, str):
            args += ["--gpu", value]
        elif key == "cost_model":
            path = tmp_path / "cost.json"
            value.to_json(path)
            args += ["--gpu", value.gpu, "--cost-model", str(path)]
        else:
            args += ["--" + key.replace("_", "-"), str(value)]
    text = "\n".join(map(str, lengths.tolist())) + "\n"
    return json.loads(subprocess.run(args, input=text, capture_output=True, text=True,
                                     check=True).stdout)


def _assert_same(plan: skrull.Plan, cli: dict) -> None:
    assert [(p["dp"], p["micro_batch"], p["cp"]) for p in cli["placements"]] == list(
        zip(plan.dp_rank.tolist(), plan.micro_batch.tolist(), plan.cp_rank.tolist()))
    assert cli["micro_batches_per_dp"] == plan.micro_batches_per_dp.tolist()
    assert [row for d in cli["rank_tokens"] for row in d] == plan.rank_tokens.tolist()
    s = plan.summary
    want = dict(sequences=s.sequences, total_tokens=s.total_tokens,
                micro_batches=s.micro_batches, sharded=s.sharded, rollbacks=s.rollbacks,
                peak_rank_tokens=s.peak_rank_tokens)
    if plan.config.chunking:  # the chunked count, with chunking on only
        want["chunked"] = s.chunked
    assert cli["summary"] == want == plan.to_dict()["summary"]
    # Chunked placements carry their kind and chunk count, as the binding exports them.
    assert cli["placements"] == plan.to_dict()["placements"]
    assert cli["config"] == plan.to_dict()["config"]


@pytest.mark.parametrize("opts", CASES, ids=lambda o: "-".join(
    type(v).__name__ if isinstance(v, skrull.CostModel) else str(v) for v in o.values()))
def test_python_and_cli_plans_are_identical(opts, tmp_path):
    rng = np.random.default_rng(99)
    lengths = np.exp(rng.uniform(0, np.log(6000), 150)).astype(np.int64) + 1
    plan = skrull.Scheduler(2, 4, 2048, **opts).plan(lengths)
    cli = _cli_plan(lengths, 2, 4, 2048, opts, tmp_path)
    _assert_same(plan, cli)
    assert cli["config"]["lockstep"] == plan.config.lockstep
    assert cli["config"]["pad_multiple"] == plan.config.pad_multiple


def test_a_calibrated_cost_model_file_plans_as_in_the_cli(tmp_path):
    samples = tmp_path / "samples.csv"
    samples.write_text("length,seconds\n1024,0.9\n2048,1.9\n4096,4.2\n8192,9.5\n"
                       "collective,1e6,6e-5\ncollective,1e8,8e-4\n")
    text = subprocess.run([str(CLI), "calibrate", "--samples", str(samples)],
                          capture_output=True, text=True, check=True).stdout
    path = tmp_path / "calibrated.json"
    path.write_text(text)
    m = skrull.CostModel.from_json(path)
    assert m.gemm_efficiency == json.loads(text)["gemm_efficiency"] != \
        skrull.CostModel("h100").gemm_efficiency
    assert m.to_dict() == {k: v for k, v in json.loads(text).items() if k != "_comment"}
    rng = np.random.default_rng(7)
    lengths = np.exp(rng.uniform(np.log(16), np.log(20000), 64)).astype(np.int64)
    plan = skrull.Scheduler(2, 16, 26624, policy="balanced", cost_model=m).plan(lengths)
    default = skrull.Scheduler(2, 16, 26624, policy="balanced").plan(lengths)
    args = [str(CLI), "plan", "--lengths", "-", "--dp", "2", "--cp", "16", "--bucket", "26624",
            "--format", "json", "--cost-model", str(path)]
    cli = json.loads(subprocess.run(args, input="\n".join(map(str, lengths.tolist())),
                                    capture_output=True, text=True, check=True).stdout)
    _assert_same(plan, cli)
    assert plan.digest() != default.digest()  # the calibration changed the plan


@pytest.mark.parametrize("opts", [dict(policy="chunkflow", chunk_size=1024, chunk_keep=2),
                                  dict(policy="balanced", chunk_size=2048,
                                       cost_model="h100-slow")])
def test_chunked_layouts_are_the_clis(opts, tmp_path):
    """A GPU's chunk passes and spans from Plan.layout equal skrull plan --layout's."""
    opts = dict(opts)
    if opts.get("cost_model") == "h100-slow":  # slow links: balanced chunks on one GPU
        opts["cost_model"] = skrull.CostModel("h100", intra_node_bandwidth=4e8,
                                              inter_node_bandwidth=4e8)
    rng = np.random.default_rng(11)
    lengths = np.exp(rng.uniform(np.log(50), np.log(40_000), 32)).astype(np.int64)
    plan = skrull.Scheduler(2, 4, 16384, **opts).plan(lengths)
    assert plan.summary.chunked > 0
    gpus = {(int(plan.dp_rank[s]), int(plan.micro_batch[s]), int(plan.cp_first[s]))
            for s in np.flatnonzero(plan.chunked)}
    for d, m, r in sorted(gpus):
        lay = plan.layout(d, m, r)
        cli = _cli_plan(lengths, 2, 4, 16384, opts, tmp_path, ("--layout", f"{d},{m},{r}"))
        assert [p["seq"] for p in cli["chunked"]["passes"]] == lay.chunk_passes["seq"].tolist()
        for name in skrull.CHUNK_PASS_DTYPE.names:
            assert [p[name] for p in cli["chunked"]["passes"]] == \
                lay.chunk_passes[name].tolist(), name
        for name in ("seq", "chunk", "offset", "start", "len", "pad"):
            assert [sp[name] for sp in cli["spans"]] == lay.spans[name].tolist(), name
        assert cli["tokens"]["chunked"] == lay.chunked_tokens > 0
        assert cli["chunked"]["max_pass_tokens"] == lay.chunk_max_tokens
