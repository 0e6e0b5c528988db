"""Builds the wheel: the package, libskrull built from ../ffi and the ``skrull`` command built
from ../cli.

Why setuptools-rust with ``Binding.NoBinding``: the binding is ctypes over the C ABI, so the
wheel needs the crate's plain cdylib (no PyO3 module), copied into the package directory, and
that is exactly what NoBinding does. maturin has no mode for a bare cdylib loaded by ctypes
(its modes are pyo3, cffi, uniffi and bin). The library does not link libpython, so the wheel is
tagged ``py3-none-<platform>``: one wheel per platform serves every Python 3.

The same cargo call also builds the crate's static library (``--crate-type cdylib
--crate-type staticlib``): the wheel ships it as ``skrull/lib/libskrull.a`` (debug info
stripped, symbols kept) with the header as ``skrull/include/skrull.h``, so that C and C++ code
(``skrull.ops``, a C++ trainer; ``skrull.get_lib()``, ``skrull.get_include()``) builds against
the installed package without Rust.

``RustBin`` builds the ``skrull`` binary of the ``skrull-cli`` crate and installs it as a
script, so ``pip install ./python`` puts the ``skrull`` command (``skrull calibrate``,
``skrull plan``, ...) on the environment's ``bin/``, next to ``python``: the profiler
(``python -m skrull.profile``) runs ``skrull calibrate`` from there.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools_rust import Binding, RustBin, RustExtension, Strip
from setuptools_rust.build import build_rust

HEADER = Path(__file__).resolve().parent.parent / "include" / "skrull.h"


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: platform-specific, Python-version-neutral."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class BuildRustWithStaticLib(build_rust):  # type: ignore[misc]
    """Copies the static library and the header into the package next to the shared one."""

    def install_extension(self, ext: Any, dylib_paths: Any, build_artifact_dir: Any) -> None:
        super().install_extension(ext, dylib_paths, build_artifact_dir)
        if ext.name != "skrull._libskrull":
            return
        built = Path(dylib_paths[0].path)
        static = built.with_name("libskrull.a")
        if not static.is_file():
            raise FileNotFoundError(f"cargo built {built} but no {static.name} beside it")
        package = Path(self.get_dylib_ext_path(ext, ext.name)).parent
        (package / "lib").mkdir(parents=True, exist_ok=True)
        (package / "include").mkdir(parents=True, exist_ok=True)
        target = package / "lib" / "libskrull.a"
        shutil.copyfile(static, target)
        # The release profile keeps debug info (25 MB); symbols stay, a linker needs them.
        if shutil.which("strip"):
            subprocess.run(["strip", "--strip-debug", str(target)], check=True)
        shutil.copyfile(HEADER, package / "include" / "skrull.h")


setup(
    rust_extensions=[
        RustExtension(
            "skrull._libskrull",
            path="../ffi/Cargo.toml",
            binding=Binding.NoBinding,
            py_limited_api=True,  # names the file _libskrull.abi3.so, not per-Python-version
            cargo_manifest_args=["--locked"],
            # Both library kinds in one cargo call (the class above ships the static one).
            args=["--crate-type", "cdylib", "--crate-type", "staticlib"],
            strip=Strip.All,  # the release profile keeps debug info; the wheel need not
        ),
        RustBin(
            "skrull",  # the [[bin]] of cli/Cargo.toml (crate skrull-cli)
            path="../cli/Cargo.toml",
            cargo_manifest_args=["--locked"],
            strip=Strip.All,
        ),
    ],
    cmdclass={"bdist_wheel": PlatformWheel, "build_rust": BuildRustWithStaticLib},
    zip_safe=False,
)
