"""The ctypes mirror against include/skrull.h and the loaded library."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import pytest

import skrull
from skrull import _config, _ffi
from skrull._config import FLOPS, POLICIES, SHARD_PADDINGS, SYNCS, VICTIMS
from skrull._shape import PRESETS

from conftest import HEADER

_DEFINES = {**{f"SKRULL_POLICY_{k.upper()}": v for k, v in POLICIES.items()},
            **{f"SKRULL_VICTIM_{k.upper()}": v for k, v in VICTIMS.items()},
            **{f"SKRULL_FLOPS_{k.upper()}": v for k, v in FLOPS.items()},
            **{f"SKRULL_SHARD_PADDING_{k.upper()}": v for k, v in SHARD_PADDINGS.items()},
            **{"SKRULL_SYNC_" + k.upper().replace("-", "_"): v for k, v in SYNCS.items()},
            **{"SKRULL_PRESET_" + k.upper().replace(".", "_").replace("-", "_"): v
               for k, v in PRESETS.items()},
            **{f"SKRULL_STATUS_{s.name}": int(s) for s in skrull.Status},
            **{f"SKRULL_GPU_{k.upper()}": v for k, v in skrull.GPUS.items()},
            **{"SKRULL_OVERLAP_" + k.upper().replace("-", "_"): v
               for k, v in skrull.OVERLAPS.items()},
            "SKRULL_ABI_VERSION": skrull.ABI_VERSION, "SKRULL_SHARDED": skrull.SHARDED,
            "SKRULL_CHUNKED": skrull.CHUNKED,
            "SKRULL_MAX_STRUCT_SIZE": _ffi.MAX_STRUCT_SIZE,
            "SKRULL_CONFIG_SIZE_V1": _ffi.CONFIG_SIZE_V1,
            "SKRULL_MAX_PAD_MULTIPLE": skrull.MAX_PAD_MULTIPLE,
            "SKRULL_ATTENTION_POINTS": _ffi.ATTENTION_POINTS,
            "SKRULL_COST_MODEL_SIZE_V1": _ffi.COST_MODEL_SIZE_V1,
            "SKRULL_NO_MICRO_BATCH": skrull.NO_MICRO_BATCH,
            "SKRULL_MAX_RINGS": skrull.MAX_RINGS,
            "SKRULL_WHOLE_CHUNK": _ffi.WHOLE_CHUNK,
            "SKRULL_REFIT_COEFFICIENTS": len(_ffi.REFIT_COEFFICIENTS),
            **{f"SKRULL_REFIT_{name.upper()}": i for i, name in enumerate(_ffi.REFIT_COEFFICIENTS)},
            "SKRULL_REFIT_MAX_WINDOW": _ffi.REFIT_MAX_WINDOW,
            "SKRULL_REFIT_KEEP_OVERLAP": _ffi.REFIT_KEEP_OVERLAP,
            "SKRULL_REFIT_PARAMS_SIZE_V1": _ffi.REFIT_PARAMS_SIZE_V1,
            "SKRULL_REFIT_REPORT_SIZE_V1": _ffi.REFIT_REPORT_SIZE_V1,
            "SKRULL_COST_MODEL_SIZE_V2": _ffi.COST_MODEL_SIZE_V2,
            "SKRULL_REFIT_PARAMS_SIZE_V2": _ffi.REFIT_PARAMS_SIZE_V2,
            "SKRULL_REFIT_REPORT_SIZE_V2": _ffi.REFIT_REPORT_SIZE_V2,
            "SKRULL_REFIT_SHARDED_SEQUENCE": len(_ffi.REFIT_COEFFICIENTS),
            "SKRULL_REFIT_LAST_MICRO_BATCH": len(_ffi.REFIT_COEFFICIENTS) + 1,
            "SKRULL_REFIT_LOCAL_SEQUENCE": len(_ffi.REFIT_COEFFICIENTS) + 2,
            "SKRULL_COST_MODEL_SIZE_V3": _ffi.COST_MODEL_SIZE_V3,
            "SKRULL_REFIT_REPORT_SIZE_V3": _ffi.REFIT_REPORT_SIZE_V3,
            **{"SKRULL_REFIT_" + v.upper().replace("-", "_"): i
               for i, v in enumerate(_ffi.REFIT_VERDICTS)},
            "SKRULL_DETAIL_VALUE": _ffi.DETAIL_VALUE, "SKRULL_DETAIL_LIMIT": _ffi.DETAIL_LIMIT,
            "SKRULL_WINDOW_MAX_DELAY": _ffi.WINDOW_MAX_DELAY,
            "SKRULL_WINDOW_PARAMS_SIZE_V1": _ffi.WINDOW_PARAMS_SIZE_V1}


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
    # Opaque types (pointers only, no fields to compare) are mirrored by name.
    assert set(re.findall(r"typedef struct (skrull_\w+) \1;", text)) == \
        {cls.__name__ for cls in _ffi.OPAQUE}
    header_statuses = dict(re.findall(r"SKRULL_STATUS_(\w+) = (\d+),", text))
    assert {k: int(v) for k, v in header_statuses.items()} == \
        {s.name: int(s) for s in skrull.Status}
    # Every constant the header defines is mirrored (and compared by the test above).
    assert set(re.findall(r"#define (SKRULL_\w+) ", text)) == \
        {k for k in _DEFINES if not k.startswith("SKRULL_STATUS_")}


# C scalar types of the header and the ctypes type a prototype must use for them.
_C_SCALARS = {"uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32, "size_t": ctypes.c_size_t,
              "uint64_t": ctypes.c_uint64, "skrull_status": ctypes.c_uint32,
              "double": ctypes.c_double}


def _header_prototypes() -> dict[str, tuple[str, list[str]]]:
    """name: (return type, parameter types) of every function the header declares, each type
    without ``const``, ``struct`` and the parameter name (``"skrull_setup**"``)."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = {}
    for ret, name, params in re.findall(r"^([\w \*]+?)\s*\b(skrull_\w+)\(([^)]*)\);", text,
                                        flags=re.M):
        types = []
        for p in params.split(","):
            words = p.replace("*", " * ").replace("const", " ").replace("struct", " ").split()
            if words and words != ["void"]:
                stars = words.count("*")
                base = [w for w in words if w != "*"]
                types.append(base[0] + "*" * stars)
        out[name] = (ret.replace("const", "").replace(" ", ""), types)
    return out


def _matches(c: str, py: object) -> bool:
    """Whether a ctypes argument or return type passes what the C type says."""
    if c.endswith("*"):
        if py is ctypes.c_void_p:  # an address: any data pointer
            return True
        if py is ctypes.c_char_p:
            return c == "char*"
        pointee = getattr(py, "_type_", None)
        return isinstance(py, type) and issubclass(py, ctypes._Pointer) and \
            _matches(c[:-1], pointee)
    if c in _C_SCALARS:
        return py is _C_SCALARS[c]
    return isinstance(py, type) and issubclass(py, ctypes.Structure) and py.__name__ == c


def test_every_prototype_matches_its_header_declaration():
    header = _header_prototypes()
    assert {"skrull_config_check", "skrull_setup_size", "skrull_setup_init",
            "skrull_schedule_prepared"} <= set(_ffi._PROTOTYPES)
    for name, (restype, argtypes) in _ffi._PROTOTYPES.items():
        assert name in header, name
        ret, params = header[name]
        assert _matches(ret, restype), (name, ret, restype)
        assert len(params) == len(argtypes), (name, params, argtypes)
        for i, (c, py) in enumerate(zip(params, argtypes)):
            assert _matches(c, py), (name, i, c, py)


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
    assert status == 0 and cfg.struct_size == ctypes.sizeof(_ffi.skrull_config) > 60
    assert (cfg.dp, cfg.cp, cfg.bucket_tokens) == (4, 8, 13312)
    assert (cfg.pad_multiple, cfg.pad_local, cfg.lockstep, cfg.cost_model) == (1, 0, 0, None)


@pytest.mark.parametrize("size", [_ffi.CONFIG_SIZE_V1, 64, ctypes.sizeof(_ffi.skrull_config)])
def test_sized_initialisers_never_write_past_the_size_given(size):
    # The binding relies on this instead of the old 4096-byte scratch buffer.
    buf = (ctypes.c_uint8 * 256)(*([0xAB] * 256))
    assert _ffi.lib.skrull_config_preset_init(0, ctypes.cast(buf, ctypes.POINTER(
        _ffi.skrull_config)), size) == 0
    assert bytes(buf[size:]) == b"\xab" * (256 - size)
    assert int.from_bytes(bytes(buf[:4]), "little") == size
    cost = (ctypes.c_uint8 * 512)(*([0xAB] * 512))
    assert _ffi.lib.skrull_cost_model_preset(1, None, ctypes.cast(cost, ctypes.POINTER(
        _ffi.skrull_cost_model)), _ffi.COST_MODEL_SIZE_V1) == 0
    assert bytes(cost[_ffi.COST_MODEL_SIZE_V1:]) == b"\xab" * (512 - _ffi.COST_MODEL_SIZE_V1)


@pytest.mark.parametrize("size", [_ffi.CONFIG_SIZE_V1, 64, ctypes.sizeof(_ffi.skrull_config)])
def test_the_recommended_initialiser_never_writes_past_the_size_given(size):
    buf = (ctypes.c_uint8 * 256)(*([0xAB] * 256))
    assert _ffi.lib.skrull_config_recommended_init(1, ctypes.cast(buf, ctypes.POINTER(
        _ffi.skrull_config)), size) == 0
    assert bytes(buf[size:]) == b"\xab" * (256 - size)
    assert int.from_bytes(bytes(buf[:4]), "little") == size


def test_scheduler_defaults_are_the_recommended_preset():
    # One definition (the core's Config::recommended): the C preset, the Scheduler's
    # defaults and the CLI's agree; the plain C initialiser keeps skrull without sub-groups.
    status, rec = _ffi.recommended_config(skrull.PRESETS["qwen2.5-7b"])
    assert status == 0
    assert (rec.dp, rec.cp, rec.bucket_tokens) == (4, 8, 13312)
    assert (rec.policy, rec.subgroups) == (skrull.POLICIES["balanced"], 1)
    status, plain = _ffi.preset_config(skrull.PRESETS["qwen2.5-7b"])
    assert (plain.policy, plain.subgroups) == (skrull.POLICIES["skrull"], 0)
    c = skrull.Scheduler(2, 4, 4096).config
    assert (c.policy, c.subgroups) == ("balanced", True)
    assert _config.RECOMMENDED_POLICY == "balanced" and _config.RECOMMENDED_SUBGROUPS is True
    assert skrull.Scheduler(2, 4, 4096, subgroups=False).config.subgroups is False


def test_the_schedulers_config_carries_the_fields_added_after_version_1():
    # Regression: with the version-1 initialiser (struct_size = 60) the library ignores
    # pad_multiple, pad_local, lockstep and cost_model without a word.
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=24, policy="skrull", pad_multiple=16,
                         lockstep=True, cost_model="h200")
    c = s._c_config
    assert c.struct_size == ctypes.sizeof(_ffi.skrull_config)
    assert (c.pad_multiple, c.lockstep) == (16, 1)
    assert c.cost_model == ctypes.addressof(s.config.cost_model._c)
    plan = s.plan([40])  # sharded over CP 2 with M = 16: padded to 48, 24 per GPU (not 20)
    assert plan.cp_rank.tolist() == [-1] and plan.tokens_per_gpu.tolist() == [24]
    assert plan.micro_batches_per_dp.tolist() == [1, 1]  # lockstep: not [1, 0]


def test_status_names_are_the_librarys():
    """Regression: the status names were written three times (the core, this binding, the
    torch op); the library now names them (``skrull_status_name``) and the binding's enum must
    spell every one of them, and no other."""
    for status in skrull.Status:
        assert _ffi.lib.skrull_status_name(int(status)).decode() == status.name
    assert _ffi.lib.skrull_status_name(77) is None
    known = {n for n in range(256) if _ffi.lib.skrull_status_name(n) is not None}
    assert known == {int(s) for s in skrull.Status}


# ---- the documented struct sizes --------------------------------------------------------------

DOCS_C_API = HEADER.parent.parent / "docs" / "c_api.md"


def _header_fields(struct: str) -> list[str]:
    """The field names of a header struct, in order."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    body = re.search(r"typedef struct " + struct + r" \{(.*?)\} " + struct + ";", text, re.S)
    assert body, struct
    return re.findall(r"(\w+)(?:\[\w+\])?;", body.group(1))


def _docs_size_table() -> dict[str, tuple[int, int, list[int], list[str]]]:
    """struct: (version 1 size, size now, accepted sizes, appended fields) from docs/c_api.md."""
    text = DOCS_C_API.read_text()
    start = text.index("<!-- struct sizes:")
    rows = {}
    for line in text[start:].splitlines()[3:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            break
        name = cells[0].strip("`")
        sizes = [int(x) for x in cells[3].split(",")]
        fields = [f.strip().strip("`") for f in cells[4].split(",") if f.strip()]
        rows[name] = (int(cells[1]), int(cells[2]), sizes, fields)
    return rows


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_the_documented_struct_sizes_are_the_headers_and_the_librarys(tmp_path):
    """Regression: docs/c_api.md's accepted sizes stopped at 88 bytes for ``skrull_config``
    and 168 for ``skrull_layout_buffers`` (the header had 104 and 192) and its list of
    appended fields missed ``chunk_passes``. The table must name every field the header has
    past version 1, the size it has now, and exactly the sizes the library accepts: each end
    of an appended field (a pointer with its ``_len`` as one), probed through the library for
    the structs a call reads first."""
    table = _docs_size_table()
    assert set(table) == {"skrull_config", "skrull_plan_buffers", "skrull_layout_buffers",
                          "skrull_cost_model"}
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "skrull.h"',
             "int main(void) {"]
    for struct in table:
        lines.append(f'printf("{struct} %zu\\n", sizeof({struct}));')
        for f in _header_fields(struct):
            lines.append(f'printf("{struct}.{f} %zu\\n", offsetof({struct}, {f}));')
    src, exe = tmp_path / "sizes.c", tmp_path / "sizes"
    src.write_text("\n".join(lines + ["return 0; }"]))
    subprocess.run(["cc", "-std=c11", f"-I{HEADER.parent}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    offsets = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True).stdout.splitlines())
    for struct, (v1, now, sizes, appended) in table.items():
        fields = _header_fields(struct)
        assert int(offsets[struct]) == now, struct
        past_v1 = [f for f in fields if int(offsets[f"{struct}.{f}"]) >= v1]
        assert appended == past_v1, struct
        ends = {v1, now} | {int(offsets[f"{struct}.{f}"]) for f in past_v1
                            if not (f.endswith("_len") and f[:-4] in fields)}
        assert sizes == sorted(ends), struct
    # The library accepts exactly those sizes (a configuration and a plan struct are read
    # first by skrull_config_check and skrull_schedule).
    v1, now, sizes, _ = table["skrull_config"]
    status, c = _ffi.preset_config(0)
    accepted = []
    for size in range(v1, now + 1, 4):
        c.struct_size = size
        if _ffi.lib.skrull_config_check(ctypes.byref(c), None) != skrull.Status.BAD_STRUCT_SIZE:
            accepted.append(size)
    assert accepted == sizes
    status, c = _ffi.preset_config(0)
    v1, now, sizes, _ = table["skrull_plan_buffers"]
    accepted = []
    for size in range(v1, now + 1, 4):
        out = _ffi.skrull_plan_buffers(struct_size=size)
        got = _ffi.lib.skrull_schedule(ctypes.byref(c), None, 0, None, 0, ctypes.byref(out))
        if got != skrull.Status.BAD_STRUCT_SIZE:
            accepted.append(size)
    assert accepted == sizes


def test_the_version_1_initialiser_names_every_field_it_does_not_write():
    """Regression: ``skrull_config_default()``'s comment listed the fields a version-1 caller
    does not get up to ``subgroups`` and stopped there."""
    text = HEADER.read_text()
    doc = text[:text.index("skrull_status skrull_config_default(")]
    doc = doc[doc.rindex("/**"):]
    _, _, _, appended = _docs_size_table()["skrull_config"]
    missing = [f for f in appended if not f.startswith("_") and f"`{f}`" not in doc]
    assert not missing, missing
