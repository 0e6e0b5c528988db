"""The multi-process gradient check: skrull plans on DP x CP gloo processes (float64) give the
logits and gradients of the unpacked single-process computation, for every policy and shard
padding, with and without a pad multiple (and pad_local), lockstep on, inputs gathered through
the gather index; on CP 4, ``balanced`` plans with sub-groups too (a cost model whose CP ring
crosses nodes) and attention runs one call per ring over that ring's process group. One process
group per layout; every run of it happens inside that group."""

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
    print(f"\nDP {dp} x CP {cp}: {result['runs']} runs in {time.perf_counter() - t0:.1f} s; "
          + "; ".join(f"{kind}: max relative error logits {e['logits']:.1e}, gradients "
                      f"{e['grads']:.1e}, loss {e['loss']:.1e}" for kind, e in err.items())
          + f"; {result['features']}")
    per_pad = len(worker.batches()) * len(worker.PADDINGS)
    wide = len(worker.wide_batches())
    subgroup_runs = len(worker.PADDINGS) * (len(worker.batches()) + 3 * wide) if cp >= 4 else 0
    assert result["runs"] == len(worker.runs(cp)) == 2 * per_pad * len(worker.POLICIES) + \
        subgroup_runs
    for e in err.values():
        assert e["logits"] < TOLERANCE and e["grads"] < TOLERANCE and e["loss"] < TOLERANCE
    f = result["features"]
    assert f["sharded_shorter_than_2N"] and f["local_and_sharded_together"]
    assert f["zero_token_gpu_in_real_micro_batch"] and f["gathered_tokens"]
    assert f["padded_local_sequences"] and f["sharded_padding_under_pad_multiple"]
    if dp > 1:
        assert f["dp_rank_without_sequences"] and f["empty_lockstep_micro_batches"]
    if cp >= 4:
        assert f["subgroup_sharded_sequences"] and f["subgroup_rings"]
        assert f["whole_and_subgroup_rings_together"]
    else:
        assert f["subgroup_rings"] == 0


@pytest.mark.parametrize("dp,cp", [(2, 1), (2, 2)], ids=lambda v: str(v))
def test_chunked_training_step_equals_the_unpacked_reference(dp, cp, tmp_path):
    # ChunkFlow's schedule in the executor: chunks on one GPU and on a group of 2, n <= K and
    # n > K, chunks of one token, last chunks shorter, chunked beside local and sharded
    # sequences in one micro-batch (``balanced`` on slow links, CP 2), at DP 2 and DP 2 x CP 2.
    t0 = time.perf_counter()
    tmp.start_processes(worker.run_chunked, args=(dp, cp, f"file://{tmp_path}/rendezvous",
                                                  str(tmp_path)), nprocs=dp * cp,
                        start_method="forkserver")
    result = json.loads((tmp_path / "result.json").read_text())
    e = result["max_rel_err"]
    print(f"\nDP {dp} x CP {cp} chunked: {result['runs']} runs in "
          f"{time.perf_counter() - t0:.1f} s; max relative error logits {e['logits']:.1e}, "
          f"gradients {e['grads']:.1e}, loss {e['loss']:.1e}; {result['features']}")
    assert result["runs"] == len(worker.chunk_runs(cp))
    assert e["logits"] < TOLERANCE and e["grads"] < TOLERANCE and e["loss"] < TOLERANCE
    f = result["features"]
    assert f["chunks_recomputed"] and f["chunks_all_kept"] and f["chunks_of_one_token"]
    assert f["last_chunk_shorter"] and f["chunk_one_gpu"]
    if cp > 1:
        assert f["chunk_group"] and f["chunked_beside_local_and_sharded"]


def test_every_batch_meets_every_pad_variant_and_policy():
    for cp in (2, 4):
        runs = worker.runs(cp)
        assert len(set(runs)) == len(runs)
        variants = worker.pad_variants(cp)
        assert len({m for m, _ in variants}) == 2 and all(m > 1 for m, _ in variants)
        assert 2 * cp * 2 in {m for m, _ in variants}
        for k in range(len(worker.batches())):
            assert {(m, local) for b, _, _, m, local, sub in runs
                    if b == k and m > 1 and not sub} == set(variants)
        for p in worker.POLICIES:
            for pad in worker.PADDINGS:
                assert {(m, local) for _, q, r, m, local, sub in runs
                        if (q, r, sub) == (p, pad, False)} == {(1, False), *variants}
