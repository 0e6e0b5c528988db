"""The ctypes mirror against include/skrull.h and the loaded library."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import pytest

import skrull
from skrull import _ffi
from skrull._config import FLOPS, POLICIES, PRESETS, SHARD_PADDINGS, VICTIMS

from conftest import HEADER

_DEFINES = {**{f"SKRULL_POLICY_{k.upper()}": v for k, v in POLICIES.items()},
            **{f"SKRULL_VICTIM_{k.upper()}": v for k, v in VICTIMS.items()},
            **{f"SKRULL_FLOPS_{k.upper()}": v for k, v in FLOPS.items()},
            **{f"SKRULL_SHARD_PADDING_{k.upper()}": v for k, v in SHARD_PADDINGS.items()},
            **{"SKRULL_PRESET_" + k.upper().replace(".", "_").replace("-", "_"): v
               for k, v in PRESETS.items()},
            **{f"SKRULL_STATUS_{s.name}": int(s) for s in skrull.Status},
            "SKRULL_ABI_VERSION": skrull.ABI_VERSION, "SKRULL_SHARDED": skrull.SHARDED,
            "SKRULL_MAX_STRUCT_SIZE": _ffi.MAX_STRUCT_SIZE}


def _c_program() -> str:
    """A C program printing sizeof/offsetof of every field the ctypes classes declare, and
    every constant the package mirrors."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "skrull.h"',
             "int main(void) {"]
    for cls in _ffi.STRUCTS:
        t = cls.__name__
        lines.append(f'printf("{t} %zu\\n", sizeof({t}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{t}.{field} %zu %zu\\n", offsetof({t}, {field}), '
                         f'sizeof((({t} *)0)->{field}));')
    for name in _DEFINES:
        lines.append(f'printf("{name} %lld\\n", (long long)({name}));')
    return "\n".join(lines + ["return 0; }"])


def _python_side() -> dict[str, int | tuple[int, int]]:
    out: dict[str, int | tuple[int, int]] = dict(_DEFINES)
    for cls in _ffi.STRUCTS:
        out[cls.__name__] = ctypes.sizeof(cls)
        for field, ftype in cls._fields_:
            out[f"{cls.__name__}.{field}"] = (getattr(cls, field).offset, ctypes.sizeof(ftype))
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_every_struct_field_and_constant_matches_the_header(tmp_path):
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text(_c_program())
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{HEADER.parent}", str(src), "-o",
                    str(exe)], check=True, capture_output=True)
    c_side: dict[str, int | tuple[int, int]] = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, *values = line.split()
        c_side[name] = (int(values[0]), int(values[1])) if len(values) == 2 else int(values[0])
    assert c_side == _python_side()


def test_the_binding_mirrors_every_struct_and_status_of_the_header():
    text = HEADER.read_text()
    assert set(re.findall(r"typedef struct (skrull_\w+) \{", text)) == \
        {cls.__name__ for cls in _ffi.STRUCTS}
    header_statuses = dict(re.findall(r"SKRULL_STATUS_(\w+) = (\d+),", text))
    assert {k: int(v) for k, v in header_statuses.items()} == \
        {s.name: int(s) for s in skrull.Status}


def test_library_abi_and_version_match_the_package():
    assert _ffi.lib.skrull_abi_version() == skrull.ABI_VERSION
    assert re.search(r"#define SKRULL_ABI_VERSION (\d+)", HEADER.read_text()).group(1) == \
        str(skrull.ABI_VERSION)
    assert skrull.library_version() == skrull.__version__


def test_import_refuses_a_library_with_another_abi(monkeypatch):
    monkeypatch.setattr(_ffi, "ABI_VERSION", skrull.ABI_VERSION + 1)
    with pytest.raises(ImportError, match="C ABI version"):
        _ffi._load()


def test_import_refuses_a_struct_of_the_wrong_size(monkeypatch):
    monkeypatch.setitem(_ffi.FROZEN_SIZES, _ffi.skrull_span, 20)
    with pytest.raises(ImportError, match="skrull_span"):
        _ffi._load()


def test_missing_library_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("SKRULL_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(OSError):
        _ffi._load()
    monkeypatch.delenv("SKRULL_LIBRARY")
    monkeypatch.setattr(_ffi, "__file__", str(tmp_path / "_ffi.py"))
    with pytest.raises(ImportError, match="pip install ./python"):
        _ffi.library_path()


def test_panic_guard_works():
    assert _ffi.lib.skrull_panic_selftest() == skrull.Status.PANIC


def test_config_preset_writes_the_struct_size_we_send():
    status, cfg = _ffi.preset_config(PRESETS["qwen2.5-7b"])
    assert status == 0 and cfg.struct_size == ctypes.sizeof(_ffi.skrull_config)
    assert (cfg.dp, cfg.cp, cfg.bucket_tokens) == (4, 8, 13312)
