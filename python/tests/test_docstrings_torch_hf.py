"""The docstring examples of ``skrull.torch``, ``skrull.hf`` and ``skrull.megatron`` run and
print what they say (doctest), and every public callable of those modules documents its
parameters, results and errors with an example (as test_docstrings.py does for the core)."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import skrull.hf  # noqa: E402
import skrull.megatron  # noqa: E402
import skrull.torch  # noqa: E402
import skrull.torch.attention  # noqa: E402


def _with_submodules(package) -> list:
    return [package] + [importlib.import_module(f"{package.__name__}.{info.name}")
                        for info in pkgutil.iter_modules(package.__path__)]


MODULES = (_with_submodules(skrull.torch) + _with_submodules(skrull.torch.attention)
           + _with_submodules(skrull.hf) + [skrull.megatron])


@pytest.fixture
def _quiet_torch(tmp_path, monkeypatch):
    """One thread (the examples are tiny), the RNG restored afterwards, and a scratch
    working directory (the Trainer examples name an output directory). DeepSpeed, where
    installed, picks its accelerator here, outside the examples: transformers imports it on
    the first Trainer, and its one-time "Setting accelerator to CPU" line would otherwise land
    in that example's output."""
    monkeypatch.chdir(tmp_path)
    try:
        from deepspeed.accelerator import get_accelerator
    except ImportError:
        pass
    else:
        get_accelerator()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.random.fork_rng():
        yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module, _quiet_torch):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, module.__name__) if t.examples]
    for test in tests:
        runner.run(test)
    assert runner.failures == 0
    assert runner.tries > 0 or not tests


def _members(name: str, cls: type) -> list[tuple[str, object]]:
    out = []
    for attr, member in vars(cls).items():
        if not attr.startswith("_") and (inspect.isfunction(member)
                                         or isinstance(member, (classmethod, staticmethod))):
            out.append((f"{name}.{attr}", getattr(cls, attr)))
    return out


def _public_callables() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for module in (skrull.torch, skrull.torch.attention, skrull.hf):
        for name in module.__all__:
            obj = getattr(module, name)
            qualified = f"{module.__name__}.{name}"
            if inspect.isclass(obj):
                out.append((qualified, obj))
                out.extend(_members(qualified, obj))
            elif inspect.isfunction(obj):
                out.append((qualified, obj))
    cls = skrull.megatron.SkrullPackingScheduler
    out.append(("skrull.megatron.SkrullPackingScheduler", cls))
    out.extend(_members("skrull.megatron.SkrullPackingScheduler", cls))
    return out


CALLABLES = _public_callables()


def test_every_listed_callable_is_collected():
    names = {n for n, _ in CALLABLES}
    for name in ("GlobalBatch", "MicroBatch", "MicroBatch.to", "PackedAttention",
                 "SkrullLoader", "SkrullLoader.set_epoch", "TinyTransformer",
                 "TinyTransformer.forward_packed", "TinyTransformer.forward_sequence",
                 "all_gather_varlen", "apply_rope", "collate", "cp_group", "cp_ring_groups",
                 "default_label_tokens", "gather_sizes", "packed_loss", "require_lockstep",
                 "MicroBatchTimer", "MicroBatchTimer.time", "MicroBatchTimer.collect",
                 "gather_times", "OnlineCalibration", "OnlineCalibration.step",
                 "OnlineCalibration.disable"):
        assert f"skrull.torch.{name}" in names, name
    for name in ("SkrullBatchSampler.plan", "SkrullBatchSampler.state_dict",
                 "SkrullTrainerMixin.compute_loss", "SkrullTrainerMixin.get_train_dataloader",
                 "SkrullTrainerMixin.training_step",
                 "SkrullCollator", "skrull_attention_forward"):
        assert f"skrull.hf.{name}" in names, name
    for name in ("CpAttention", "attention_schedule", "local_schedule", "pick_backend",
                 "AttentionSchedule", "RingSchedule.gathered_metadata"):
        assert f"skrull.torch.attention.{name}" in names, name
    assert "skrull.megatron.SkrullPackingScheduler.get_groups_and_subsamples" in names


def _takes_arguments(obj) -> bool:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # a builtin base without a signature: assume it does
        return True
    return any(p not in ("self", "cls") for p in params)


def _returns_a_value(obj) -> bool:
    annotation = inspect.signature(obj).return_annotation
    if annotation in (inspect.Signature.empty, None, "None", "NoReturn"):
        return False
    return re.search(r"^\s*(return\s+\S|yield\b)", inspect.getsource(obj), re.M) is not None


@pytest.mark.parametrize("name,obj", CALLABLES, ids=[n for n, _ in CALLABLES])
def test_public_callables_have_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert "Example" in doc and ">>>" in doc, name
    if _takes_arguments(obj):
        assert "Parameters" in doc, name
    if inspect.isclass(obj):
        return
    if _returns_a_value(obj):
        assert "Returns" in doc or "Yields" in doc, name
    if "raise " in inspect.getsource(obj):
        assert "Raises" in doc, name
