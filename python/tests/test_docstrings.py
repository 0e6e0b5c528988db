"""The examples of the public docstrings run and print what they say (doctest), and every
public callable of the core package documents its parameters, results and errors."""

from __future__ import annotations

import doctest
import inspect

import pytest

import skrull
from skrull import _config, _cost, _errors, _layout, _plan, _scheduler, _window, profile
from skrull.profile import _shape

MODULES = [skrull, _config, _cost, _errors, _layout, _plan, _scheduler, _window, profile,
           _shape]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, module.__name__) if t.examples]
    for test in tests:
        runner.run(test)
    assert runner.failures == 0


def _public_callables() -> list[tuple[str, object]]:
    out = []
    for name in skrull.__all__:
        obj = getattr(skrull, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            out.append((name, obj))
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member)
                                                 or isinstance(member, classmethod)):
                    out.append((f"{name}.{attr}", getattr(obj, attr)))
        elif inspect.isfunction(obj):
            out.append((name, obj))
    return out


@pytest.mark.parametrize("name,obj", _public_callables(), ids=lambda x: str(x)[:40])
def test_public_callables_have_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert "Example" in doc and ">>>" in doc, name
    if inspect.isclass(obj):
        if name in ("Scheduler", "CostModel", "ModelShape", "Error"):  # made by the user
            assert "Parameters" in doc, name
        return
    takes = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    if takes:
        assert "Parameters" in doc, name
    if "raise " in inspect.getsource(obj) or "_check_" in inspect.getsource(obj):
        assert "Raises" in doc, name
