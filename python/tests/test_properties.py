"""Property tests of the Python binding (hypothesis), against an independent pure-Python
checker that reads nothing but the lengths, the configuration and what the binding returns.

- every sequence is placed exactly once, in the micro-batch the table lists it in;
- each sequence's per-GPU charge, recomputed with the padding rule of docs/layout.md, equals
  ``tokens_per_gpu``; the loads recomputed from those charges equal ``rank_tokens`` and stay
  within ``bucket_tokens``; the summary agrees; a refused batch is refused for the reason the
  checker finds first;
- the layouts of every GPU of a DP rank tile each sharded sequence exactly once over its
  group, hold each local sequence whole, and their gather indices cover every token of the DP
  rank's stream exactly once;
- a pickled plan (and scheduler) equals the original;
- bad inputs raise ``skrull.Error`` subclasses: never a crash, never another exception.

Profiles (``SKRULL_HYPOTHESIS_PROFILE``): ``ci`` (the default: 2,350 examples over the tests,
derandomized, well under 40 s on 2 cores), ``nightly`` (25 times as many, random), ``dev``
(a quick 10% of ``ci``). See docs/robustness.md.
"""

from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import skrull

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("nightly", **_COMMON)
settings.register_profile("dev", derandomize=True, database=None, **_COMMON)
PROFILE = os.environ.get("SKRULL_HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
#: Example counts per test under each profile (``ci`` sums to 2,350).
SCALE = {"ci": 1.0, "nightly": 25.0, "dev": 0.1}[PROFILE]


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)))


POLICY_NAMES = ["skrull", "deepspeed", "packed", "roundrobin", "balanced"]


@st.composite
def configs(draw: st.DrawFn) -> dict:
    cp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    policy = draw(st.sampled_from(POLICY_NAMES))
    return dict(
        dp=draw(st.integers(1, 4)),
        cp=cp,
        bucket_tokens=draw(st.one_of(st.integers(1, 64), st.integers(65, 1024))),
        policy=policy,
        victim=draw(st.sampled_from(["shortest", "longest"])),
        flops="paper" if policy == "balanced" else draw(st.sampled_from(["paper", "megatron"])),
        shard_padding=draw(st.sampled_from(["none", "zigzag"])),
        pad_multiple=draw(st.sampled_from([0, 1, 1, 2, 3, 4, 8, 16])),
        pad_local=draw(st.booleans()),
        lockstep=draw(st.booleans()),
        subgroups=draw(st.booleans()),
        max_micro_batches=draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
    )


@st.composite
def batches(draw: st.DrawFn, cfg: dict) -> list[int]:
    most = cfg["cp"] * cfg["bucket_tokens"]
    short = st.integers(1, max(1, cfg["bucket_tokens"]))
    long = st.integers(1, most + most // 4 + 1)  # a few too long once padded, or at all
    return draw(st.lists(st.one_of(short, long), min_size=0, max_size=40))


# ---- the independent checker ---------------------------------------------------------------

def pad_of(cfg: dict) -> int:
    return max(cfg["pad_multiple"], 1)


def sharded_charge(s: int, g: int, cfg: dict) -> int:
    """Tokens each of the ``g`` ranks holding a sequence of ``s`` tokens is charged
    (docs/layout.md, "Padding: the exact rule")."""
    m = pad_of(cfg)
    if g == 1:
        return m * -(-s // m)
    if cfg["shard_padding"] == "zigzag" or m > 1:
        u = math.lcm(2 * g, m)
        return u * -(-s // u) // g
    return -(-s // g)


def padded_length(s: int, g: int, cfg: dict) -> int:
    """``P``: the sharded sequence's length with its padding (over a group of ``g``)."""
    m = pad_of(cfg)
    if g == 1:
        return m * -(-s // m)
    if cfg["shard_padding"] == "zigzag" or m > 1:
        u = math.lcm(2 * g, m)
        return u * -(-s // u)
    return s


def local_charge(s: int, cfg: dict) -> int:
    m = pad_of(cfg)
    return m * -(-s // m) if cfg["pad_local"] else s


def valid_group(first: int, size: int, cfg: dict) -> bool:
    cp = cfg["cp"]
    if (first, size) == (0, cp):
        return True
    return (cfg["subgroups"] and 2 <= size < cp and size & (size - 1) == 0 and cp % size == 0
            and first % size == 0)


def check_plan(cfg: dict, lengths: list[int], plan: skrull.Plan) -> None:
    dp, cp, bucket = cfg["dp"], cfg["cp"], cfg["bucket_tokens"]
    n = len(lengths)
    assert list(plan.lengths) == lengths
    table = plan.micro_batch_table
    per_dp = [int(x) for x in plan.micro_batches_per_dp]
    assert len(per_dp) == dp
    # Every sequence listed exactly once, in the micro-batch its placement names.
    seen = [0] * n
    rows_of = [0] * dp
    for g, row in enumerate(table):
        d, m, first, count = (int(row[k]) for k in ("dp_rank", "index", "first", "count"))
        assert d < dp and m < per_dp[d] and count >= 1
        if g > 0:
            assert (int(table[g - 1]["dp_rank"]), int(table[g - 1]["index"])) < (d, m)
        rows_of[d] += 1
        for i in plan.members[first:first + count]:
            i = int(i)
            seen[i] += 1
            assert (int(plan.dp_rank[i]), int(plan.micro_batch[i])) == (d, m)
    assert seen == [1] * n
    for d in range(dp):
        if cfg["lockstep"]:
            assert per_dp[d] == max(rows_of, default=0)
        else:
            assert per_dp[d] == rows_of[d]
        if cfg["max_micro_batches"]:
            assert per_dp[d] <= cfg["max_micro_batches"]
    # Each sequence's group and charge.
    charges = []
    for i, s in enumerate(lengths):
        r, first, size = int(plan.cp_rank[i]), int(plan.cp_first[i]), int(plan.cp_size[i])
        if r == skrull.SHARDED:
            assert valid_group(first, size, cfg), (first, size)
            want = sharded_charge(s, size, cfg)
        else:
            assert 0 <= r < cp and (first, size) == (r, 1)
            want = local_charge(s, cfg)
        assert int(plan.tokens_per_gpu[i]) == want, (i, s, r, size)
        charges.append(want)
    # The loads, recomputed, equal rank_tokens and fit the budget.
    assert plan.rank_tokens.shape == (len(table), cp)
    for g, row in enumerate(table):
        load = [0] * cp
        first, count = int(row["first"]), int(row["count"])
        for i in plan.members[first:first + count]:
            i = int(i)
            lo, size = int(plan.cp_first[i]), int(plan.cp_size[i])
            for r in range(lo, lo + size):
                load[r] += charges[i]
        assert [int(x) for x in plan.rank_tokens[g]] == load
        assert max(load) <= bucket
    s = plan.summary
    assert (s.total_tokens, s.sequences, s.micro_batches) == (sum(lengths), n, len(table))
    assert s.sharded == int((plan.cp_rank == skrull.SHARDED).sum())
    assert s.peak_rank_tokens == int(plan.rank_tokens.max(initial=0))


def first_too_long(cfg: dict, lengths: list[int]) -> int | None:
    """The first sequence that cannot fit even sharded over the whole CP group."""
    for i, s in enumerate(lengths):
        if sharded_charge(s, cfg["cp"], cfg) > cfg["bucket_tokens"]:
            return i
    return None


def stream_order(plan: skrull.Plan, d: int) -> list[int]:
    """The DP rank's sequences in plan order, from the table and the members."""
    out = []
    for row in plan.micro_batch_table:
        if int(row["dp_rank"]) == d:
            first, count = int(row["first"]), int(row["count"])
            out += [int(i) for i in plan.members[first:first + count]]
    return out


def check_layouts(cfg: dict, lengths: list[int], plan: skrull.Plan, d: int) -> None:
    """Every GPU of DP rank ``d``: spans, charges, positions and the gather index."""
    cp = cfg["cp"]
    order = stream_order(plan, d)
    offset_of, total = {}, 0
    for i in order:
        offset_of[i] = total
        total += lengths[i]
    covered = np.zeros(total, np.int64)
    table_rows = {(int(r["dp_rank"]), int(r["index"])): g
                  for g, r in enumerate(plan.micro_batch_table)}
    for m in range(int(plan.micro_batches_per_dp[d])):
        g = table_rows.get((d, m))
        members = [] if g is None else [int(i) for i in plan.members_of(d, m)]
        chunks: dict[int, list[tuple[int, int, int, int]]] = {i: [] for i in members}
        for r in range(cp):
            lay = plan.layout(d, m, r)
            assert (lay.dp_rank, lay.micro_batch, lay.cp_rank) == (d, m, r)
            if g is None:
                assert lay.is_empty_micro_batch and lay.tokens == 0 and len(lay.spans) == 0
                continue
            assert lay.charged_tokens == int(plan.rank_tokens[g][r])
            assert lay.global_tokens == sum(lengths)
            buf = 0
            want_gather = []
            for sp in lay.spans:
                i, chunk, off, start, ln, pad = (int(sp[k]) for k in
                                                 ("seq", "chunk", "offset", "start", "len", "pad"))
                assert i in chunks and off == buf
                if chunk == -1:
                    assert int(plan.cp_rank[i]) == r
                    assert (start, ln, pad) == (0, lengths[i], local_charge(lengths[i], cfg)
                                                - lengths[i])
                else:
                    lo, size = int(plan.cp_first[i]), int(plan.cp_size[i])
                    assert int(plan.cp_rank[i]) == skrull.SHARDED and lo <= r < lo + size
                    j = r - lo
                    assert chunk in (j, 2 * size - 1 - j)
                    chunks[i].append((chunk, start, ln, pad))
                if lay.positions is not None and len(lay.positions):
                    assert list(lay.positions[off:off + ln + pad]) == list(
                        range(start, start + ln + pad))
                want_gather += [offset_of[i] + start + k for k in range(ln)] + [-1] * pad
                buf += ln + pad
            assert buf == lay.tokens
            assert list(lay.gather_index) == want_gather
            real = [x for x in want_gather if x >= 0]
            covered[real] += 1
        # Each sharded sequence: 2g chunks, tiling its padded length once.
        for i in members:
            if int(plan.cp_rank[i]) != skrull.SHARDED:
                assert chunks[i] == []
                continue
            size = int(plan.cp_size[i])
            got = sorted(chunks[i])
            assert [c for c, *_ in got] == list(range(2 * size))
            pos = 0
            for _, start, ln, pad in sorted(got, key=lambda c: c[1]):
                assert start == pos
                pos += ln + pad
            assert pos == padded_length(lengths[i], size, cfg)
            assert sum(ln for _, _, ln, _ in got) == lengths[i]
    assert (covered == 1).all(), "gather index does not cover every token exactly once"


def plan_or_reason(cfg: dict, lengths: list[int]) -> skrull.Plan | None:
    """Plans the batch; a refusal must be the one the checker expects, and gives None."""
    s = skrull.Scheduler(**cfg, max_sequences=64)
    try:
        return s.plan(lengths)
    except skrull.BatchError as e:
        first = first_too_long(cfg, lengths)
        if first is not None:
            assert (e.status, e.index) == ("SEQUENCE_TOO_LONG", first)
        else:
            assert e.status == "MICRO_BATCH_LIMIT" and cfg["max_micro_batches"] > 0, e
            assert e.value > e.limit == cfg["max_micro_batches"]
        return None


# ---- the properties ---------------------------------------------------------------------

@examples(1000)
@given(data=st.data())
def test_plans_place_every_sequence_once_within_the_budget(data: st.DataObject) -> None:
    cfg = data.draw(configs())
    lengths = data.draw(batches(cfg))
    plan = plan_or_reason(cfg, lengths)
    if plan is not None:
        check_plan(cfg, lengths, plan)


@examples(450)
@given(data=st.data())
def test_layouts_tile_every_sequence_and_gather_every_token_once(data: st.DataObject) -> None:
    cfg = data.draw(configs())
    cfg["max_micro_batches"] = 0
    lengths = data.draw(batches(cfg).filter(bool))
    plan = plan_or_reason(cfg, lengths)
    assume(plan is not None)
    check_plan(cfg, lengths, plan)
    d = data.draw(st.integers(0, cfg["dp"] - 1))
    check_layouts(cfg, lengths, plan, d)


@examples(200)
@given(data=st.data())
def test_pickled_plans_equal_the_original(data: st.DataObject) -> None:
    cfg = data.draw(configs())
    cfg["max_micro_batches"] = 0
    lengths = data.draw(batches(cfg))
    plan = plan_or_reason(cfg, lengths)
    assume(plan is not None)
    again = pickle.loads(pickle.dumps(plan))
    assert again.digest() == plan.digest()
    for name in ("lengths", "placements", "micro_batch_table", "members", "rank_tokens",
                 "micro_batches_per_dp", "cp_groups"):
        assert np.array_equal(getattr(again, name), getattr(plan, name)), name
    assert again.summary == plan.summary
    scheduler = pickle.loads(pickle.dumps(plan._scheduler))
    assert scheduler.plan(lengths).digest() == plan.digest()


ANY_VALUE = st.one_of(
    st.integers(), st.integers(-3, 300), st.none(), st.booleans(), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(POLICY_NAMES + ["h100", "h200", "zigzag", "none",
                                                          "qwen2.5-7b", "megatron"]),
)


@examples(400)
@given(fields=st.dictionaries(
    st.sampled_from(["dp", "cp", "bucket_tokens", "policy", "victim", "flops", "shard_padding",
                     "max_micro_batches", "pad_multiple", "pad_local", "lockstep",
                     "cost_model", "subgroups", "model", "max_sequences"]),
    ANY_VALUE, max_size=4))
def test_bad_configurations_raise_skrull_errors(fields: dict) -> None:
    if "max_sequences" in fields and isinstance(fields["max_sequences"], int):
        fields["max_sequences"] = min(fields["max_sequences"], 4096)
    try:
        skrull.Scheduler(**fields)
    except skrull.Error as e:
        assert isinstance(e, (skrull.ConfigError, skrull.BatchError, skrull.ArgumentError))
        assert e.status and e.code


@examples(300)
@given(cfg=configs(),
       lengths=st.one_of(
           st.lists(st.one_of(st.integers(), st.integers(-2, 100)), max_size=12),
           st.lists(ANY_VALUE, max_size=4),
           ANY_VALUE),
       gpu=st.tuples(st.integers(-2, 2**40), st.integers(-2, 9), st.one_of(
           st.integers(-2, 9), st.floats(), st.none())))
def test_bad_batches_and_gpus_raise_skrull_errors(cfg: dict, lengths: object,
                                                  gpu: tuple) -> None:
    s = skrull.Scheduler(**cfg, max_sequences=16)
    try:
        plan = s.plan(lengths)
    except skrull.Error as e:
        assert isinstance(e, (skrull.BatchError, skrull.ArgumentError)), e
        return
    try:
        plan.layout(*gpu)
    except skrull.Error as e:
        assert isinstance(e, (skrull.LayoutError, skrull.ArgumentError)), e


def test_no_such_gpu_names_the_coordinate() -> None:
    """``field``/``field_name`` of NO_SUCH_GPU say which coordinate is out of range (the C
    library's numbers: 1 dp_rank, 2 micro_batch, 3 cp_rank), ``index`` the DP rank where it
    applies, ``limit`` how many there are (docs/python.md)."""
    plan = skrull.Scheduler(dp=2, cp=4, bucket_tokens=24, policy="skrull").plan(
        [1, 2, 2, 3, 4, 6, 9, 14, 30, 5])
    runs = int(plan.micro_batches_per_dp[1])
    for gpu, field, name, index, limit in [((5, 0, 0), 1, "dp_rank", None, 2),
                                           ((1, runs, 0), 2, "micro_batch", 1, runs),
                                           ((1, 0, 4), 3, "cp_rank", 1, 4)]:
        with pytest.raises(skrull.LayoutError) as err:
            plan.layout(*gpu)
        e = err.value
        assert (e.status, e.field, e.field_name, e.index, e.limit) == (
            "NO_SUCH_GPU", field, name, index, limit), gpu


def test_the_ci_profile_runs_at_least_2000_examples() -> None:
    if PROFILE != "ci":
        pytest.skip(f"profile {PROFILE}")
    assert 1000 + 450 + 200 + 400 + 300 >= 2000
