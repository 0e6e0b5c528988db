"""Plans through the binding: contents, independence of later calls, digest, Megatron groups."""

from __future__ import annotations

import hashlib
import struct
import threading

import numpy as np
import pytest

import skrull

POLICIES = list(skrull.POLICIES)
GOLDEN_DIGEST = "19700a856f61995a41e999366cb2eddb7767ac7deed62b95b95bcde9afda839b"


def _random_batch(rng: np.random.Generator, n: int, longest: int) -> np.ndarray:
    return np.exp(rng.uniform(0, np.log(longest), n)).astype(np.int64) + 1


def test_paper_example_reproduces_the_readme_plan(paper_example):
    plan = skrull.Scheduler(dp=1, cp=4, bucket_tokens=24, policy="skrull").plan(paper_example)
    assert plan.summary == skrull.Summary(total_tokens=71, sequences=9, micro_batches=1,
                                          sharded=2, rollbacks=1, peak_rank_tokens=23)
    assert plan.cp_rank.tolist() == [0, 1, 2, -1, 0, 1, 2, 3, -1]
    assert plan.rank_tokens.tolist() == [[14, 17, 20, 23]]
    assert plan.micro_batches_per_dp.tolist() == [1]
    # The digest as docs/python.md defines it, recomputed field by field, and its golden value.
    placements = [w for i in range(9) for w in (
        0, 0, int(plan.cp_rank[i]) % 2**32, int(plan.tokens_per_gpu[i]))]
    words = [9, 1, 4] + placements + plan.members.tolist() + [1]
    expect = hashlib.sha256(struct.pack(f"<{len(words)}I", *words)).hexdigest()
    assert plan.digest() == expect == GOLDEN_DIGEST


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("padding", ["none", "zigzag"])
def test_plan_tables_agree_with_the_per_sequence_arrays(policy, padding):
    rng = np.random.default_rng(7)
    lengths = _random_batch(rng, 200, 4000)
    s = skrull.Scheduler(dp=3, cp=4, bucket_tokens=1024, policy=policy, shard_padding=padding)
    plan = s.plan(lengths)
    assert plan.lengths.tolist() == lengths.tolist()
    assert plan.summary.total_tokens == lengths.sum()
    assert plan.micro_batches_per_dp.sum() == plan.summary.micro_batches == len(
        plan.micro_batch_table)
    seen = np.zeros(len(lengths), int)
    for g, (d, m, first, count) in enumerate(plan.micro_batch_table.tolist()):
        members = plan.members_of(d, m)
        assert members.tolist() == plan.members[first:first + count].tolist()
        assert (plan.dp_rank[members] == d).all() and (plan.micro_batch[members] == m).all()
        seen[members] += 1
        loads = np.zeros(4, int)
        for i in members:
            if plan.cp_rank[i] < 0:
                loads += plan.tokens_per_gpu[i]
            else:
                loads[plan.cp_rank[i]] += lengths[i]
        assert loads.tolist() == plan.rank_tokens[g].tolist()
        assert loads.max() <= 1024
    assert (seen == 1).all()


def test_a_plan_is_unchanged_by_later_calls_on_the_same_scheduler():
    # Regression: the scheduler reuses its C buffers; a plan must own copies.
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=64, max_sequences=4)
    first = s.plan([60, 3, 9, 1, 200])
    snapshot = (first.digest(), first.cp_rank.copy(), first.layout(0, 0, 0).positions.copy())
    s.plan(np.full(1000, 7))  # grows the buffers
    s.plan([1, 2, 3])
    assert first.digest() == snapshot[0]
    assert (first.cp_rank == snapshot[1]).all()
    assert (first.layout(0, 0, 0).positions == snapshot[2]).all()
    with pytest.raises(ValueError):
        first.placements["cp_rank"][0] = 3  # read-only


def test_buffers_grow_and_inputs_of_every_integer_kind_are_accepted():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=512, max_sequences=1)
    ref = s.plan([5, 70, 300]).digest()
    for lengths in ([5, 70, 300], (5, 70, 300), range(0), np.array([5, 70, 300], np.uint16),
                    np.array([5, 70, 300], np.int64), (x for x in [5, 70, 300]),
                    np.array([5, 70, 300], dtype=object)):
        plan = s.plan(lengths)
        assert plan.digest() == ref or plan.summary.sequences == 0
    assert s.plan(np.arange(1, 5001) % 500 + 1).summary.sequences == 5000


def test_digest_agrees_across_schedulers_and_differs_between_plans():
    lengths = _random_batch(np.random.default_rng(3), 300, 20000)
    a = skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096).plan(lengths)
    b = skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096, max_sequences=1).plan(list(lengths))
    assert a.digest() == b.digest() and len(a.digest()) == 64
    assert skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096, policy="packed").plan(
        lengths).digest() != a.digest()
    assert skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096).plan(
        lengths[::-1]).digest() != a.digest()


def test_concurrent_calls_on_one_scheduler_give_the_same_plans():
    s = skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096, max_sequences=1)
    batches = [_random_batch(np.random.default_rng(k), 50 + 40 * k, 20000) for k in range(6)]
    want = [skrull.Scheduler(dp=4, cp=8, bucket_tokens=4096).plan(b).digest() for b in batches]
    got: dict[int, list[str]] = {}

    def work(t: int) -> None:
        got[t] = [s.plan(b).digest() for b in batches for _ in range(5)][::5]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(v == want for v in got.values()) and len(got) == 4


def test_megatron_groups_list_local_once_and_sharded_on_every_cp_rank():
    lengths = _random_batch(np.random.default_rng(11), 64, 2000)
    plan = skrull.Scheduler(dp=3, cp=4, bucket_tokens=512, policy="skrull").plan(lengths)
    assert plan.summary.sharded > 0 and plan.summary.sharded < 64
    ids = [f"sample-{i}" for i in range(64)]
    groups = plan.to_megatron_groups(ids)
    assert len(groups) == plan.num_micro_batches and all(len(g) == 12 for g in groups)
    where: dict[str, list[tuple[int, int]]] = {}
    for m, row in enumerate(groups):
        for gpu, members in enumerate(row):
            for sid in members:
                where.setdefault(sid, []).append((m, gpu))
    for i, sid in enumerate(ids):
        d, m, r = plan.dp_rank[i], plan.micro_batch[i], plan.cp_rank[i]
        expect = [(m, d * 4 + k) for k in range(4)] if r < 0 else [(m, d * 4 + r)]
        assert where[sid] == expect
    short = plan.micro_batches_per_dp.min()
    if short < plan.num_micro_batches:  # padded micro-batches of a short DP rank are empty
        d = int(plan.micro_batches_per_dp.argmin())
        assert groups[-1][d * 4:(d + 1) * 4] == [[], [], [], []]


def test_config_names_and_presets():
    s = skrull.Scheduler(model="qwen2.5-7b", policy="Packed", shard_padding=1)
    c = s.config
    assert (c.dp, c.cp, c.bucket_tokens, c.policy, c.shard_padding) == (4, 8, 13312, "packed",
                                                                        "zigzag")
    assert c.model.hidden == 3584 and c.model.swiglu is True
    custom = skrull.Scheduler(2, 2, 100, model=skrull.ModelShape(64, 16, 256, 2, 1000, False))
    assert custom.config.model == skrull.ModelShape(64, 16, 256, 2, 1000, False)
    assert skrull.Scheduler(model="qwen2.5-0.5b").config.policy == "balanced"


@pytest.mark.parametrize("empty", [[], range(0), np.array([], np.int64), ()])
def test_an_empty_batch_is_a_valid_empty_plan(empty):
    # Regression: np.asarray([]) is float64, which was rejected as non-integer lengths.
    plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=8).plan(empty)
    assert plan.summary.sequences == 0 and plan.num_micro_batches == 0
    assert plan.micro_batches_per_dp.tolist() == [0, 0]
    assert plan.rank_layouts(1, 1) == [] and plan.to_megatron_groups() == []
    assert len(plan.digest()) == 64


def test_a_plan_keeps_everything_its_c_calls_point_to_alive():
    # Regression (found in the benchmark): the buffer structs hold bare addresses, so whatever
    # they point to must be owned by a live Python object for as long as C may read it.
    import gc
    plan = skrull.Scheduler(dp=2, cp=4, bucket_tokens=64).plan([60, 3, 9, 1, 200, 17])
    first = plan.layout(0, 0, 0)
    gc.collect()
    junk = [np.full(4096, 0x5A, np.uint8) for _ in range(64)]  # reuse any freed memory
    again = plan.layout(0, 0, 0)
    assert again.positions.tolist() == first.positions.tolist() and junk
    assert again.spans.tolist() == first.spans.tolist()


def test_buffers_are_reused_until_a_larger_batch_grows_them():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=512, max_sequences=100)
    ws, placements = s._ws, s._placements
    for n in (1, 50, 100):
        s.plan(np.full(n, 7))
        assert s._ws is ws and s._placements is placements and s._capacity == 100
    s.plan(np.full(101, 7))
    assert s._capacity == 200 and s._ws is not ws  # doubled, not just n
    s.plan(np.full(5000, 7))
    assert s._capacity == 5000


@pytest.mark.parametrize("policy", POLICIES)
def test_lockstep_gives_every_dp_rank_the_same_count(policy):
    unequal = 0
    for n in (90, 3):  # with 3 sequences one of the 4 DP ranks gets none
        lengths = _random_batch(np.random.default_rng(21), n, 2000)
        free = skrull.Scheduler(dp=4, cp=2, bucket_tokens=1024, policy=policy).plan(lengths)
        step = skrull.Scheduler(dp=4, cp=2, bucket_tokens=1024, policy=policy,
                                lockstep=True).plan(lengths)
        counts = free.micro_batches_per_dp.tolist()
        unequal += len(set(counts)) > 1
        assert step.micro_batches_per_dp.tolist() == [max(counts)] * 4
        # The same placements; only the counts (and the digest, which hashes them) differ.
        assert step.placements.tolist() == free.placements.tolist()
        assert step.micro_batch_table.tolist() == free.micro_batch_table.tolist()
        assert step.summary.micro_batches == sum(counts) == len(step.micro_batch_table)
        assert step.num_micro_batches == free.num_micro_batches
        assert (step.digest() == free.digest()) == (len(set(counts)) == 1)
    assert unequal


def test_members_of_under_lockstep_skips_the_empty_micro_batches():
    # Regression: the table position was the prefix sum of micro_batches_per_dp, which under
    # lockstep counts the empty micro-batches of earlier ranks too.
    s = skrull.Scheduler(dp=3, cp=1, bucket_tokens=10, policy="deepspeed", lockstep=True)
    plan = s.plan([10, 10, 10, 10])  # one sequence per micro-batch: ranks run 2, 1, 1
    assert plan.micro_batches_per_dp.tolist() == [2, 2, 2]
    for d in range(3):
        for m in range(2):
            want = plan.members[(plan.dp_rank[plan.members] == d)
                                & (plan.micro_batch[plan.members] == m)]
            assert plan.members_of(d, m).tolist() == want.tolist()
    assert sum(plan.members_of(d, m).size for d in range(3) for m in range(2)) == 4


@pytest.mark.parametrize("lockstep", [False, True])
def test_dp_sequences_is_the_plan_order_of_each_rank(lockstep):
    lengths = _random_batch(np.random.default_rng(5), 120, 3000)
    plan = skrull.Scheduler(dp=3, cp=4, bucket_tokens=1024, policy="skrull",
                            lockstep=lockstep).plan(lengths)
    seen = []
    for d in range(3):
        order = plan.dp_sequences(d)
        want = [s for m in range(plan.micro_batches_per_dp[d])
                for s in plan.members_of(d, m).tolist()]
        assert order.tolist() == want
        # In table order the micro-batch index increases along the stream.
        assert (np.diff(plan.micro_batch[order]) >= 0).all()
        assert (plan.dp_rank[order] == d).all()
        offsets = plan.dp_stream_offsets(d)
        assert offsets.tolist() == [0] + np.cumsum(lengths[order]).tolist()
        seen += order.tolist()
    assert sorted(seen) == list(range(len(lengths)))
    with pytest.raises(skrull.LayoutError, match="NO_SUCH_GPU"):
        plan.dp_sequences(3)


def test_megatron_groups_under_lockstep_have_the_common_count_and_empty_rows():
    plan = skrull.Scheduler(dp=3, cp=2, bucket_tokens=10, policy="deepspeed",
                            lockstep=True).plan([10, 10, 10, 10, 3])
    groups = plan.to_megatron_groups()
    assert len(groups) == plan.num_micro_batches == plan.micro_batches_per_dp[0]
    for d in range(3):
        own = int((plan.micro_batch_table["dp_rank"] == d).sum())
        for m in range(len(groups)):
            row = groups[m][d * 2:(d + 1) * 2]
            if m >= own:
                assert row == [[], []]
            else:
                members = sorted(plan.members_of(d, m).tolist())
                assert sorted({s for r in row for s in r}) == members
