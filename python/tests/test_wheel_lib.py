"""What the wheel ships for C and C++ code: ``skrull.get_include()`` holds the header (the one
of this checkout, byte for byte) and ``skrull.get_lib()`` the static library, and a C program
built against those two folders alone plans a batch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import skrull

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(skrull.__file__).resolve().parent
INSTALLED = not PACKAGE.is_relative_to(ROOT / "python")


def test_the_folders_hold_the_header_and_the_static_library():
    include, lib = Path(skrull.get_include()), Path(skrull.get_lib())
    assert (include / "skrull.h").read_bytes() == (ROOT / "include" / "skrull.h").read_bytes()
    assert (lib / "libskrull.a").stat().st_size > 1_000_000
    if INSTALLED:
        assert include == PACKAGE / "include" and lib == PACKAGE / "lib"
    else:
        assert include == ROOT / "include"


def test_the_installed_static_library_has_no_debug_info_but_every_symbol():
    if not INSTALLED:
        pytest.skip("testing the source tree, not an installed wheel")
    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("no nm/readelf")
    lib = Path(skrull.get_lib()) / "libskrull.a"
    symbols = subprocess.run(["nm", "--defined-only", "-g", str(lib)], capture_output=True,
                             text=True, check=True).stdout
    for name in ("skrull_schedule_prepared", "skrull_setup_init", "skrull_layout_fill_many",
                 "skrull_status_str", "skrull_abi_version"):
        assert f" T {name}\n" in symbols, name
    sections = subprocess.run(["readelf", "-S", "-W", str(lib)], capture_output=True, text=True,
                              check=True).stdout
    assert ".debug_info" not in sections


def test_a_c_program_builds_against_the_two_folders_and_plans(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "snippet"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{skrull.get_include()}",
                    str(ROOT / "tests" / "c" / "snippet.c"), "-o", str(exe),
                    str(Path(skrull.get_lib()) / "libskrull.a"), "-lpthread", "-ldl", "-lm"],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    plan = skrull.Scheduler(dp=2, cp=4, bucket_tokens=24, policy="skrull", subgroups=False
                            ).plan([1, 2, 2, 3, 4, 6, 9, 14, 30, 5])
    lines = out.strip().splitlines()
    assert len(lines) == 10
    for i, line in enumerate(lines):
        assert line == (f"seq {i}: DP {plan.dp_rank[i]}, micro-batch {plan.micro_batch[i]}, "
                        f"CP {plan.cp_rank[i]}")
