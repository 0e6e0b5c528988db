"""``skrull.deepspeed`` without processes: the ZeRO-stage mapping, the refusals, the config it
fills, the batches (the Trainer's), the label tokens, what ``backward`` asks of an engine (a
recording stand-in), checkpoint state round trips (refit included), the docstring examples;
and ``SkrullTrainer``'s CPU repair leaving arguments alone where none is needed."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import skrull  # noqa: E402
import skrull.deepspeed as sds  # noqa: E402
from skrull.deepspeed import Engine, SkrullDeepSpeed, scheduling_settings  # noqa: E402
from skrull.hf import SkrullBatchSampler, SkrullCollator  # noqa: E402
from skrull.hf._deepspeed_cpu import repair_cpu_deepspeed  # noqa: E402

LENGTHS = np.random.default_rng(3).integers(1, 89, 48).tolist()


def _data() -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(0, 128, n).tolist()} for n in LENGTHS]


def _run(config: dict | None = None, **kw) -> SkrullDeepSpeed:
    kw.setdefault("dp", 2)
    kw.setdefault("rank", 0)
    return SkrullDeepSpeed({"zero_optimization": {"stage": 2}} if config is None else config,
                           LENGTHS, 12, 128, **kw)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("managed", [True, False])
def test_the_engine_decides_what_plans_may_do(stage, managed):
    engine = Engine(stage, managed)
    unequal = stage <= 1 and not managed
    assert engine.allows_unequal_counts == unequal
    assert engine.sync == ("every-gpu" if stage >= 2 else "sharded")
    sync = {"sync": engine.sync}
    assert scheduling_settings(engine, 5) == {"micro_batches": 5, **sync}
    if unequal:
        assert scheduling_settings(engine) == sync == scheduling_settings(engine, "unequal")
    else:
        assert scheduling_settings(engine) == {"lockstep": True, "fill_empty": True, **sync}
        with pytest.raises(ValueError, match="micro_batches='unequal' needs ZeRO stage 0 or 1"):
            scheduling_settings(engine, "unequal")


@pytest.mark.parametrize("bad", [0, -1, True, "some", 2.0])
def test_bad_micro_batch_settings_are_refused(bad):
    with pytest.raises(ValueError, match="micro_batches"):
        scheduling_settings(Engine(2), bad)


@pytest.mark.parametrize("config, message", [
    ({"zero_optimization": {"stage": 4}}, "stage = 4"),
    ({"managed_gradient_accumulation": "no"}, "managed_gradient_accumulation"),
])
def test_bad_engine_configs_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        Engine.from_config(config)


def test_zero2_and_zero3_refuse_unequal_counts_before_any_step():
    for stage in (2, 3):
        with pytest.raises(ValueError, match="would leave the others waiting|hang"):
            _run({"zero_optimization": {"stage": stage}}, micro_batches="unequal")
    with pytest.raises(ValueError, match="managed accumulation"):
        _run({"zero_optimization": {"stage": 1}}, micro_batches="unequal")


def test_auto_gives_equal_counts_under_zero2_and_unequal_under_zero1_unmanaged():
    zero2 = _run(max_steps=3)
    lockstep = skrull.Scheduler(2, 1, 128, lockstep=True)
    need = max(lockstep.plan([LENGTHS[i] for i in s.indices]).num_micro_batches
               for s in _run(max_steps=3, micro_batches=10).steps(_data()))
    assert zero2.micro_batches == need and zero2.config["gradient_accumulation_steps"] == need
    assert zero2.config["train_batch_size"] == need * 2
    assert all((s.plan.micro_batches_per_dp == need).all() for s in zero2.steps(_data()))
    zero1 = _run({"zero_optimization": {"stage": 1}, "managed_gradient_accumulation": False},
                 max_steps=3)
    assert zero1.micro_batches is None and zero1.config["gradient_accumulation_steps"] == 1
    counts = [s.plan.micro_batches_per_dp.tolist() for s in zero1.steps(_data())]
    assert any(a != b for a, b in counts), counts


def test_zero3_without_reduce_scatter_is_refused_with_cp_ranks():
    config = {"zero_optimization": {"stage": 3, "reduce_scatter": False}}
    with pytest.raises(ValueError, match="keep reduce_scatter on"):
        SkrullDeepSpeed(config, LENGTHS, 12, 128, cp=2, dp=1, rank=0)
    assert _run(config, micro_batches=3).cp == 1  # without CP one divisor covers every bucket


def test_a_fixed_count_too_small_names_the_count_that_fits():
    run = _run(micro_batches=1)
    with pytest.raises(ValueError, match=r"needs \d+ micro-batches .* at least \d+"):
        next(iter(run.steps(_data())))


@pytest.mark.parametrize("config, message", [
    ({"gradient_accumulation_steps": 7}, r"gradient_accumulation_steps'\] = 7"),
    ({"train_micro_batch_size_per_gpu": 2}, "one packed micro-batch per GPU"),
    ({"train_batch_size": 5}, "train_batch_size"),
])
def test_contradicting_batch_keys_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        _run(config, micro_batches=3)


def test_auto_batch_keys_are_filled():
    run = _run({"train_batch_size": "auto", "gradient_accumulation_steps": "auto"},
               micro_batches=3)
    assert {k: run.config[k] for k in sds.BATCH_KEYS} == {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 3,
        "train_batch_size": 6}


@pytest.mark.parametrize("key", ["lockstep", "micro_batches", "dp", "fill_empty"])
def test_scheduler_settings_it_owns_are_refused(key):
    with pytest.raises(ValueError, match=f"sets {key} itself"):
        _run(scheduler={key: 1})


def test_steps_are_the_trainers_global_batches_and_micro_batches():
    run = _run(micro_batches=3, epochs=2)
    # The Trainer under ZeRO-2 plans for its synchronisation too (every GPU waits).
    sampler = SkrullBatchSampler(LENGTHS, 12, 128, 3, dp_size=2, rank=0, sync="every-gpu")
    want = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        want += [(list(mb), mb.batch_indices.tolist()) for mb in sampler]
    got = [(s.samples_of(m), s.indices.tolist()) for s in run.steps(_data())
           for m in range(len(s))]
    assert got == want


def test_micro_batches_are_the_trainers_collation_with_the_global_label_tokens():
    data = _data()
    data[5] = dict(data[5], labels=[-100] * 3 + data[5]["input_ids"][3:])
    run = _run(micro_batches=3)
    step = next(iter(run.steps(data)))
    want_labels = sum(len(data[i]["input_ids"]) - 1 for i in step.indices)
    if 5 in step.indices:
        want_labels -= 2
    assert step.label_tokens == want_labels
    for m, mb in enumerate(step):
        ref = SkrullCollator()([data[i] for i in step.samples_of(m)])
        assert mb["num_items_in_batch"] == want_labels and mb["use_cache"] is False
        for key, value in ref.items():
            assert torch.equal(torch.as_tensor(mb[key]), torch.as_tensor(value)), key
    assert sds.label_count({"input_ids": [1, 2, 3], "labels": [1, -100, 3]}) == 1


class _Engine:
    """Records what ``backward`` asks of a DeepSpeed engine."""

    def __init__(self, stage=2, managed=True, gas=3, sp=1, world=2):
        self.stage, self.managed, self.gas = stage, managed, gas
        self.sequence_parallel_size, self.seq_dp_world_size = sp, world
        self.calls: list = []
        self.saved: dict = {}

    def zero_optimization_stage(self):
        return self.stage

    def managed_gradient_accumulation(self):
        return self.managed

    def gradient_accumulation_steps(self):
        return self.gas

    def set_gradient_accumulation_boundary(self, flag):
        self.calls.append(("boundary", flag))

    def backward(self, loss, scale_wrt_gas=True):
        self.calls.append(("backward", float(loss.detach()), scale_wrt_gas))

    def step(self):
        self.calls.append(("step",))

    def save_checkpoint(self, save_dir, tag=None, client_state=None):
        self.saved[(save_dir, tag)] = client_state

    def load_checkpoint(self, load_dir, tag=None):
        state = self.saved.get((load_dir, tag))
        return (None, None) if state is None else (f"{load_dir}/{tag}", state)


def _backward_calls(run: SkrullDeepSpeed, engine: _Engine) -> list:
    step = next(iter(run.steps(_data())))
    for mb in step:
        out = run.backward(engine, torch.tensor(0.5, requires_grad=True), mb)
        assert float(out) == 0.5 and not out.requires_grad
    return engine.calls


def test_backward_under_managed_accumulation_marks_the_boundary_and_scales_by_dp():
    calls = _backward_calls(_run(micro_batches=3), _Engine(gas=3))
    # Loss x 2 (DeepSpeed divides by DP 2), no division by G, the boundary on the last.
    assert calls == [("boundary", False), ("backward", 1.0, False), ("step",),
                     ("boundary", False), ("backward", 1.0, False), ("step",),
                     ("boundary", True), ("backward", 1.0, False), ("step",)]


def test_backward_under_unmanaged_accumulation_steps_once():
    run = _run({"zero_optimization": {"stage": 1}, "managed_gradient_accumulation": False})
    step = next(iter(run.steps(_data())))
    calls = _backward_calls(run, _Engine(stage=1, managed=False, gas=1))
    assert calls == [("backward", 1.0, False)] * len(step) + [("step",)]


def test_loss_scale_is_what_deepspeed_divides_by():
    run = _run(micro_batches=3)
    assert run.loss_scale(_Engine(sp=2, world=4)) == 2.0   # ZeRO-2: DP ranks only
    assert run.loss_scale(_Engine(sp=1, world=4)) == 4.0
    zero3 = _run({"zero_optimization": {"stage": 3}}, micro_batches=3)
    assert zero3.loss_scale(_Engine(stage=3, sp=2, world=4)) == 4.0   # ZeRO-3: every rank


@pytest.mark.parametrize("engine, message", [
    (_Engine(stage=3), "ZeRO stage 3, the plans were made for stage 2"),
    (_Engine(managed=False), "managed_gradient_accumulation is False"),
    (_Engine(gas=4), "accumulates 4 micro-batches per step, the plans run 3"),
    (_Engine(sp=2), "sequence-parallel size is 2, cp is 1"),
])
def test_an_engine_built_from_another_config_is_refused(engine, message):
    run = _run(micro_batches=3)
    with pytest.raises(ValueError, match=message):
        _backward_calls(run, engine)
    assert engine.calls == []  # nothing reached the engine


def test_checkpoint_state_resumes_the_remaining_batches_and_the_refit():
    data = _data()
    first = _run(micro_batches=3, epochs=2, scheduler={"policy": "balanced"})
    whole = [s.indices.tolist() for s in _run(micro_batches=3, epochs=2).steps(data)]
    engine = _Engine()
    steps = first.steps(data)
    step = next(steps)
    for mb in step:
        first.backward(engine, torch.tensor(1.0), mb)
    plan = step.plan
    times = np.full((plan.num_micro_batches, 2, 1), 0.05)
    first.scheduler.observe(plan, times)
    first.scheduler.observe(plan, times * 1.5)
    assert first.scheduler.refit().changed
    first.save_checkpoint(engine, "ckpt", tag="a", client_state={"mine": 1})
    assert engine.saved[("ckpt", "a")]["mine"] == 1
    resumed = _run(micro_batches=3, epochs=2, scheduler={"policy": "balanced"})
    path, client = resumed.load_checkpoint(engine, "ckpt", tag="a")
    assert path == "ckpt/a" and client["mine"] == 1
    assert resumed.scheduler.cost_model == first.scheduler.cost_model
    # The remaining batches, and plans made with the refitted model: those the saved run
    # would have made.
    rest = [(s.indices.tolist(), s.plan) for s in resumed.steps(data)]
    assert [r[0] for r in rest] == whole[1:] and len(rest) == 7
    assert [r[1] for r in rest] == list(s.plan for s in first.steps(data))
    refitted = first.scheduler.cost_model
    assert refitted != _run(micro_batches=3).scheduler.cost_model
    assert all(plan.config.cost_model == refitted for _, plan in rest)


def test_a_checkpoint_of_another_run_is_refused():
    engine = _Engine()
    with pytest.raises(ValueError, match="no DeepSpeed checkpoint"):
        _run(micro_batches=3).load_checkpoint(engine, "nothing")
    _run(micro_batches=3).save_checkpoint(engine, "ckpt")
    with pytest.raises(ValueError, match="micro_batches is 3, this run's 4"):
        _run(micro_batches=4).load_checkpoint(engine, "ckpt")
    engine.saved[("plain", None)] = {"other": 1}
    with pytest.raises(ValueError, match="holds no skrull state"):
        _run(micro_batches=3).load_checkpoint(engine, "plain")


def test_sequence_parallel_groups_need_a_process_group():
    with pytest.raises(RuntimeError, match="init_distributed"):
        sds.SequenceParallelGroups(2)


def test_cpu_repair_leaves_other_arguments_alone(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for args in (types.SimpleNamespace(deepspeed=None, use_cpu=False, world_size=1),
                 types.SimpleNamespace(deepspeed={}, use_cpu=False, world_size=1),
                 types.SimpleNamespace(deepspeed={"a": 1}, use_cpu=True, world_size=1),
                 types.SimpleNamespace(deepspeed={"a": 1}, use_cpu=False, world_size=2)):
        assert repair_cpu_deepspeed(args) is False
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert repair_cpu_deepspeed(types.SimpleNamespace(deepspeed={"a": 1}, use_cpu=False,
                                                      world_size=1)) is False


MODULES = [sds] + [importlib.import_module(f"skrull.deepspeed.{m.name}")
                   for m in pkgutil.iter_modules(sds.__path__)]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test)
    assert runner.failures == 0


def _public() -> list[tuple[str, object]]:
    out = []
    for name in sds.__all__:
        obj = getattr(sds, name)
        if inspect.isclass(obj):
            out.append((name, obj))
            out += [(f"{name}.{a}", getattr(obj, a)) for a, m in vars(obj).items()
                    if not a.startswith("_")
                    and (inspect.isfunction(m) or isinstance(m, classmethod))]
        elif inspect.isfunction(obj):
            out.append((name, obj))
    return out


@pytest.mark.parametrize("name,obj", _public(), ids=[n for n, _ in _public()])
def test_public_callables_document_themselves(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert "Example" in doc and ">>>" in doc, name
    params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    if params:
        assert "Parameters" in doc, name
    if not inspect.isclass(obj) and "raise " in inspect.getsource(obj):
        assert "Raises" in doc, name
