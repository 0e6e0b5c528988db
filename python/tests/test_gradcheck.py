"""The multi-process gradient check: skrull plans on DP x CP gloo processes (float64) give the
logits and gradients of the unpacked single-process computation, for every policy and shard
padding. One process group per layout; every policy, padding and batch runs inside it."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as tmp  # noqa: E402

import _gradcheck_worker as worker  # noqa: E402

TOLERANCE = 1e-10


@pytest.fixture(scope="module", autouse=True)
def _forkserver_with_torch_loaded():
    # Children fork from a server that imported torch once, instead of importing it each.
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch.distributed", "skrull.torch", "_gradcheck_worker"])


@pytest.mark.parametrize("dp,cp", [(1, 2), (2, 2), (1, 4), (2, 4)], ids=lambda v: str(v))
def test_packed_training_step_equals_the_unpacked_reference(dp, cp, tmp_path):
    t0 = time.perf_counter()
    tmp.start_processes(worker.run, args=(dp, cp, f"file://{tmp_path}/rendezvous",
                                          str(tmp_path)), nprocs=dp * cp,
                        start_method="forkserver")
    result = json.loads((tmp_path / "result.json").read_text())
    err = result["max_rel_err"]
    print(f"\nDP {dp} x CP {cp}: {result['runs']} runs, max relative error logits "
          f"{err['logits']:.1e}, gradients {err['grads']:.1e}, loss {err['loss']:.1e} "
          f"({time.perf_counter() - t0:.1f} s); {result['features']}")
    assert result["runs"] == len(worker.batches()) * len(worker.POLICIES) * len(worker.PADDINGS)
    assert err["logits"] < TOLERANCE and err["grads"] < TOLERANCE and err["loss"] < TOLERANCE
    f = result["features"]
    assert f["sharded_shorter_than_2N"] and f["local_and_sharded_together"]
    assert f["zero_token_gpu_in_real_micro_batch"]
    if dp > 1:
        assert f["dp_rank_without_sequences"] and f["padding_micro_batches"]
