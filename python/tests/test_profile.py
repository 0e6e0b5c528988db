"""Offline profiling on CPU: ``python -m skrull.profile --quick`` on a tiny model, end to end
(samples CSV, ``skrull calibrate``, BucketSize, a plan that the calibrated model changes),
and the profiler's parts (shapes, saved-activation memory, model states)."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import skrull

from conftest import ROOT

torch = pytest.importorskip("torch")

from skrull.profile import PRESETS, ProfileShape, from_hf_config, parse_bytes  # noqa: E402
from skrull.profile._measure import (Workload, cpu_memory, micro_batch_memory,  # noqa: E402
                                     model_states)
from skrull.profile._model import sdpa_varlen  # noqa: E402

CLI = Path(os.environ.get("SKRULL_CLI", ROOT / "target" / "release" / "skrull"))
needs_cli = pytest.mark.skipif(not CLI.exists(), reason=f"no CLI binary at {CLI} (build it "
                               "with cargo build --release -p skrull-cli, or set SKRULL_CLI)")

TINY = ProfileShape(hidden=256, ffn=1024, layers=2, heads=4, kv_heads=2, vocab=1024)
TINY_FLAGS = ["--hidden", "256", "--ffn", "1024", "--layers", "2", "--heads", "4", "--kv-heads",
              "2", "--vocab", "1024"]
LIMIT = 1 << 30


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    assert rows[0] == ["kind", "size", "value", "extra"]
    return rows[1:]


def _calibrate(samples: Path, *extra: str) -> dict:
    run = subprocess.run([str(CLI), "calibrate", "--samples", str(samples), "--model",
                          TINY.model_arg(), *extra], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> tuple[Path, str, float]:
    """One quick CPU profile of the toy model, collectives on 4 forked processes as 2
    nodes: its CSV, its standard output and its wall time."""
    out = tmp_path_factory.mktemp("profile") / "tiny.csv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(skrull.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "skrull.profile", "--quick", "--device", "cpu",
                          "--threads", "1", *TINY_FLAGS, "--procs", "4", "--nodes", "2",
                          "--memory-limit", str(LIMIT), "--memory-margin", "0",
                          "--out", str(out), "--skrull", str(CLI)],
                         capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - t0
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert re.search(r"\] +15/15 ", run.stderr)  # the progress bar reached its end
    print(f"\nquick CPU profile: {wall:.1f} s\n{run.stdout}")
    return out, run.stdout, wall


@needs_cli
def test_quick_cpu_profile_writes_every_kind_of_sample(profiled):
    out, _, _ = profiled
    rows = _rows(out)
    kinds: dict[str, list[list[str]]] = {}
    for r in rows:
        kinds.setdefault(r[0], []).append(r)
    assert [int(r[1]) for r in kinds["layer"]] == [128, 256, 512]
    assert [int(r[1]) for r in kinds["head"]] == [128, 256, 512]
    assert [(int(r[1]), int(r[3])) for r in kinds["attention"]] == [(128, 4), (256, 2),
                                                                     (512, 1)]
    assert all(float(r[2]) > 0 for k in ("layer", "head", "attention") for r in kinds[k])
    assert [(r[3], r[4]) for r in kinds["collective"]] == [("2", "intra")] * 3 + \
        [("4", "inter")] * 3
    mem = {(int(r[1]), r[3]): int(r[2]) for r in kinds["memory"]}
    assert sorted(mem) == [(n, m) for n in (128, 256, 512) for m in ("checkpoint", "plain")]
    for n in (128, 256, 512):
        assert mem[n, "checkpoint"] < mem[n, "plain"]
    for m in ("plain", "checkpoint"):  # saved activations grow linearly with tokens
        assert mem[512, m] - mem[256, m] == 2 * (mem[256, m] - mem[128, m]) > 0
    # The executor's sharded attention on each node's ring of 2 (4 processes as 2 nodes),
    # 1 to 8 sequences of 32 tokens per rank; the optimizer step over the layer's, the
    # head's and both parameter counts.
    assert [(int(r[1]), r[3], r[4]) for r in kinds["sharded"]] == \
        [(n, "64", "2") for n in (1, 2, 4, 8)]
    assert all(float(r[2]) > 0 for r in kinds["sharded"] + kinds["step"])
    # The attention kernel's cost per call: 1, 8 and 64 whole sequences of 16 tokens.
    assert [(int(r[1]), r[3]) for r in kinds["local"]] == [(n, "16") for n in (1, 8, 64)]
    assert all(float(r[2]) > 0 for r in kinds["local"])
    layer, head, both = (int(r[1]) for r in kinds["step"])
    assert layer + head == both and layer > 0 and head > 0


@needs_cli
def test_quick_cpu_profile_fits_and_reports_a_monotone_bucket(profiled):
    out, stdout, wall = profiled
    model = json.loads(out.with_suffix(".json").read_text())
    assert "compute fit (3 whole-model samples" in model["_comment"]
    assert "inter-node collective fit on 4 GPUs" in model["_comment"]
    assert "per sharded sequence: " in model["_comment"] and "per step: " in model["_comment"]
    assert model["sharded_sequence_s"] >= 0 and model["iteration_fixed_s"] > 0
    # The CPU executor calls the attention kernel once per sequence: a cost per call.
    assert "per whole sequence: " in model["_comment"] and model["local_sequence_s"] > 0
    h100 = skrull.CostModel("h100", model=skrull.ModelShape(**TINY.model_fields()))
    assert model["attention"]["seqlen"] == [128, 256, 512, 1024, 2048, 4096]
    assert model["gemm_efficiency"] != h100.gemm_efficiency
    assert model["ring_step_latency_s"] != h100.ring_step_latency_s
    assert model["inter_node_bandwidth"] != h100.inter_node_bandwidth
    plain, ckpt = model["_memory"]["plain"], model["_memory"]["checkpoint"]
    assert model["_memory"]["limit_bytes"] == LIMIT
    assert 0 < plain["bucket_tokens"] <= ckpt["bucket_tokens"]
    assert f"BucketSize: {plain['bucket_tokens']} tokens per GPU; " \
        f"{ckpt['bucket_tokens']} with activation checkpointing" in stdout
    # BucketSize is the most tokens whose fitted memory fits, and never falls as the limit
    # grows.
    buckets = []
    for limit in np.geomspace(32 << 20, 64 << 30, 9).astype(int):
        mem = _calibrate(out, "--memory-limit", str(limit))["_memory"]["plain"]
        a, b, c = mem["fixed_bytes"], mem["bytes_per_token"], mem["bucket_tokens"]
        assert c == 0 or a + b * c <= limit
        assert a + b * (c + 1) > limit
        buckets.append(c)
    assert buckets == sorted(buckets) and buckets[0] < buckets[-1]
    assert wall < 120  # the quick grid is a smoke run (about 10 s on two busy cores)


@needs_cli
def test_profile_csv_calibrates_into_a_model_that_changes_a_balanced_plan(profiled, tmp_path):
    out, _, _ = profiled
    fitted = tmp_path / "fitted.json"
    model = _calibrate(out)
    fitted.write_text(json.dumps(model))
    shape = skrull.ModelShape(**TINY.model_fields())
    m = skrull.CostModel.from_json(fitted, model=shape)
    rng = np.random.default_rng(15)
    lengths = np.exp(rng.uniform(np.log(16), np.log(12000), 96)).astype(np.int64)
    plan = skrull.Scheduler(2, 8, 16384, model=shape, policy="balanced",
                            cost_model=m).plan(lengths)
    default = skrull.Scheduler(2, 8, 16384, model=shape, policy="balanced").plan(lengths)
    assert plan.digest() != default.digest()
    cli = subprocess.run([str(CLI), "plan", "--lengths", "-", "--dp", "2", "--cp", "8",
                          "--bucket", "16384", "--model", TINY.model_arg(), "--format", "json",
                          "--cost-model", str(fitted)], input="\n".join(map(str, lengths)),
                         capture_output=True, text=True, check=True)
    placements = json.loads(cli.stdout)["placements"]
    assert [(p["dp"], p["micro_batch"], p["cp"]) for p in placements] == list(
        zip(plan.dp_rank.tolist(), plan.micro_batch.tolist(), plan.cp_rank.tolist()))


def test_presets_match_the_library_and_a_hugging_face_config(tmp_path):
    for name, shape in PRESETS.items():
        lib = skrull.Scheduler(1, 1, 1024, model=name).config.model
        assert skrull.ModelShape(**shape.model_fields()) == lib
        assert shape.model_arg() == name
    cfg = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
           "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
           "vocab_size": 151936, "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    hf = from_hf_config(path)
    assert hf.model_arg() == "qwen2.5-0.5b" and hf.head_dim == 64 and hf.qkv_bias
    # Qwen2.5-0.5B has 494 M parameters (its embedding shared with the head).
    assert round(hf.params() / 1e6) == 494
    assert from_hf_config(path, {"layers": 2}).model_arg().startswith("custom:hidden=896,")
    del cfg["vocab_size"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="vocab_size"):
        from_hf_config(path)
    with pytest.raises(ValueError, match="multiple"):
        ProfileShape(hidden=64, ffn=64, layers=1, heads=4, kv_heads=3, vocab=0)


def test_saved_activation_memory_is_linear_and_checkpointing_keeps_the_input():
    w = Workload(TINY, sdpa_varlen, torch.device("cpu"), torch.float32)
    small, large = cpu_memory(w, 128), cpu_memory(w, 256)
    assert small["layer-checkpoint"].retained == 128 * 256 * 4  # the layer's input only
    for part in ("layer", "layer-checkpoint"):
        assert large[part].retained == 2 * small[part].retained
    # The loss keeps a few scalars besides its per-token tensors.
    assert 0 <= 2 * small["head"].retained - large["head"].retained <= 16
    assert small["layer"].retained > 10 * small["layer-checkpoint"].retained
    static, how = model_states(TINY, torch.bfloat16, 0, 1)
    assert static == 16 * TINY.params() and "ZeRO stage 0" in how
    assert model_states(TINY, torch.float32, 0, 1)[0] == 16 * TINY.params()
    assert model_states(TINY, torch.bfloat16, 3, 4)[0] == 4 * TINY.params()
    z2 = model_states(TINY, torch.bfloat16, 2, 8)[0]
    assert z2 == 2 * TINY.params() + 2 * TINY.params() // 8 + 12 * TINY.params() // 8
    plain = micro_batch_memory(TINY, static, small, recompute=False)
    assert plain == static + 2 * small["layer"].retained + small["head"].retained + max(
        small["layer"].transient, small["head"].transient)


def test_byte_counts_read_like_the_cli():
    assert parse_bytes("80G") == parse_bytes("80GiB") == parse_bytes("80GB") == 80 << 30
    assert parse_bytes("1.5K") == 1536 and parse_bytes("123") == 123
    for bad in ("", "G", "-1", "eighty"):
        with pytest.raises(Exception, match="byte count"):
            parse_bytes(bad)
