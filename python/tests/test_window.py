"""``skrull.Window`` (the outlier-delay window over ``skrull_window_*``) and
``SkrullBatchSampler(outlier_delay=W)``: every sample once per epoch within W steps, the same
steps on every rank, bad input refused with statuses, and a sampler resumed from a
``state_dict`` taken mid-epoch yielding the same remaining samples with its queue intact."""

from __future__ import annotations

import numpy as np
import pytest

import skrull

BUCKET = 4096


def _batches(seed: int, steps: int, size: int) -> list[list[int]]:
    """Short sequences, and a long one in about every third batch."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        b = rng.integers(1, 200, size).tolist()
        if rng.random() < 0.35:
            b[int(rng.integers(size))] = int(rng.integers(2500, 4000))
        out.append(b)
    return out


def _epoch(window: skrull.Window, batches: list[list[int]], start: int = 0) -> list[list[int]]:
    steps, pushed = [], start
    for t in range(start, len(batches)):
        while pushed < len(batches) and pushed <= t + window.max_delay:
            window.push(batches[pushed])
            pushed += 1
        steps.append(window.step().positions.tolist())
    return steps


@pytest.mark.parametrize("dp,delay", [(2, 1), (2, 4), (4, 3), (1, 2)])
def test_every_sample_once_within_the_delay_and_the_same_steps_twice(dp, delay):
    scheduler = skrull.Scheduler(dp=dp, cp=1, bucket_tokens=BUCKET)
    batches = _batches(dp * 10 + delay, 30, 8)
    a = _epoch(skrull.Window(scheduler, delay, 8), batches)
    assert a == _epoch(skrull.Window(scheduler, delay, 8), batches)
    positions = [p for step in a for p in step]
    assert sorted(positions) == list(range(30 * 8))
    assert all(0 <= t - p // 8 <= delay for t, step in enumerate(a) for p in step)
    if dp > 1:
        assert any(p // 8 != t for t, step in enumerate(a) for p in step), "nothing deferred"


def test_a_window_rebuilt_from_its_queue_returns_the_same_remaining_steps():
    scheduler = skrull.Scheduler(dp=2, cp=1, bucket_tokens=BUCKET)
    batches = _batches(7, 24, 8)
    full = _epoch(skrull.Window(scheduler, 3, 8), batches)
    resumed_with_queue = False
    for at in range(1, 24):
        w = skrull.Window(scheduler, 3, 8)
        pushed = 0
        for t in range(at):
            while pushed < len(batches) and pushed <= t + 3:
                w.push(batches[pushed])
                pushed += 1
            assert w.step().positions.tolist() == full[t]
        queue = w.queue()
        resumed_with_queue |= bool(queue)
        again = skrull.Window(scheduler, 3, 8, first_step=at, first_position=8 * at, queue=queue)
        assert _epoch(again, batches, at) == full[at:], at
    assert resumed_with_queue


def test_bad_window_input_is_refused_with_its_status():
    scheduler = skrull.Scheduler(dp=2, cp=1, bucket_tokens=BUCKET)
    with pytest.raises(skrull.ConfigError) as e:
        skrull.Window(scheduler, 65, 8)
    assert e.value.status == "INVALID_WINDOW_PARAMS" and e.value.limit == 64
    with pytest.raises(skrull.ConfigError):
        skrull.Window(scheduler, 1, 0)
    with pytest.raises(skrull.ArgumentError):
        skrull.Window(scheduler, 1.5, 8)
    with pytest.raises(skrull.ArgumentError):
        skrull.Window("scheduler", 1, 8)  # type: ignore[arg-type]
    w = skrull.Window(scheduler, 1, 4)
    with pytest.raises(skrull.BatchError) as e:
        w.step()
    assert e.value.status == "WINDOW_EMPTY"
    with pytest.raises(skrull.BatchError) as e:
        w.push([1, 2, 3, 4, 5])
    assert (e.value.status, e.value.value, e.value.limit) == ("WINDOW_BATCH_TOO_LARGE", 5, 4)
    with pytest.raises(skrull.BatchError) as e:
        w.push([5, 0])
    assert (e.value.status, e.value.index) == ("EMPTY_SEQUENCE", 1)
    with pytest.raises(skrull.BatchError) as e:
        w.push([5, 2**40])
    assert (e.value.status, e.value.value) == ("LENGTH_OUT_OF_RANGE", 2**40)
    with pytest.raises(skrull.ArgumentError):
        w.push("12")
    w.push([3000, 1, 2])
    w.push([3000, 1, 2])
    with pytest.raises(skrull.BatchError) as e:
        w.push([1])
    assert e.value.status == "WINDOW_FULL"
    assert w.step().deferred == 1 and w.pending == 1
    with pytest.raises(skrull.BatchError) as e:
        w.requeue(w.queue())            # a batch is pushed: too late
    assert (e.value.status, e.value.index) == ("INVALID_DEFERRED", 0)
    with pytest.raises(skrull.ArgumentError):
        w.requeue([(1, 2)])
    with pytest.raises(TypeError, match="not pickled"):
        import pickle
        pickle.dumps(w)


# ---- the sampler --------------------------------------------------------------------------

pytest.importorskip("transformers")
from skrull.hf import SkrullBatchSampler  # noqa: E402

LENGTHS = [int(x) for x in np.random.default_rng(3).integers(1, 150, 240)]
for _i in range(0, 240, 17):
    LENGTHS[_i] = 1500 + 13 * _i   # long-tail: a long sequence in about every second batch


def _sampler(rank: int = 0, **kw) -> SkrullBatchSampler:
    return SkrullBatchSampler(LENGTHS, 12, 8192, 2, dp_size=2, rank=rank, outlier_delay=3, **kw)


def test_the_delayed_sampler_trains_every_sample_once_per_epoch_on_every_rank():
    per_rank = [[list(mb) for mb in _sampler(r)] for r in range(2)]
    assert all(len(mbs) == len(LENGTHS) // 12 * 2 for mbs in per_rank)
    assert sorted(i for mbs in per_rank for mb in mbs for i in mb) == list(range(len(LENGTHS)))
    plain = SkrullBatchSampler(LENGTHS, 12, 8192, 2, dp_size=2, rank=0)
    assert [list(mb) for mb in plain] != per_rank[0]      # something moved
    assert [list(mb) for mb in _sampler(0)] == per_rank[0]  # the same again
    assert plain.state_dict() == {"epoch": 0, "seed": 42}


@pytest.mark.parametrize("taken", [1, 2, 5, 8, 13, 30, 40])
def test_a_sampler_resumed_mid_epoch_yields_the_same_remaining_samples(taken):
    a = _sampler(seed=9)
    a.set_epoch(2)
    full = [list(mb) for mb in a]
    b = _sampler(seed=9)
    b.set_epoch(2)
    it = iter(b)
    got = [list(next(it)) for _ in range(taken)]
    assert got == full[:taken]
    state = b.state_dict()
    assert state["step"] == taken // 2      # 2 micro-batches per step
    c = _sampler(seed=0)
    c.load_state_dict(state)
    rest = [list(mb) for mb in c]
    redone = 0 if taken % 2 == 0 else 1     # a step partly out is yielded again
    assert rest == full[taken - redone:]
    assert c.state_dict()["step"] == len(full) // 2 and c.state_dict()["queue"] == []


def test_resuming_carries_the_queue():
    a = _sampler(seed=4)
    it = iter(a)
    saved = None
    for k in range(0, len(LENGTHS) // 12 * 2, 2):
        next(it), next(it)
        state = a.state_dict()
        if state["queue"]:
            saved = (k + 2, state)
            break
    assert saved is not None, "no step ended with a deferred sample"
    taken, state = saved
    full = [list(mb) for mb in _sampler(seed=4)]
    c = _sampler(seed=1)
    c.load_state_dict(state)
    assert [list(mb) for mb in c] == full[taken:]


def test_a_bad_delay_is_a_config_error():
    with pytest.raises(skrull.ConfigError):
        SkrullBatchSampler(LENGTHS, 12, 8192, 2, dp_size=2, rank=0, outlier_delay=65)
