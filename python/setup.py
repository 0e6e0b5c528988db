"""Builds the wheel: the package, libskrull built from ../ffi and the ``skrull`` command built
from ../cli.

Why setuptools-rust with ``Binding.NoBinding``: the binding is ctypes over the C ABI, so the
wheel needs the crate's plain cdylib (no PyO3 module), copied into the package directory, and
that is exactly what NoBinding does. maturin has no mode for a bare cdylib loaded by ctypes
(its modes are pyo3, cffi, uniffi and bin). The library does not link libpython, so the wheel is
tagged ``py3-none-<platform>``: one wheel per platform serves every Python 3.

``RustBin`` builds the ``skrull`` binary of the ``skrull-cli`` crate and installs it as a
script, so ``pip install ./python`` puts the ``skrull`` command (``skrull calibrate``,
``skrull plan``, ...) on the environment's ``bin/``, next to ``python``: the profiler
(``python -m skrull.profile``) runs ``skrull calibrate`` from there.
"""

from __future__ import annotations

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools_rust import Binding, RustBin, RustExtension, Strip


class PlatformWheel(bdist_wheel):
    """Tags the wheel py3-none-<platform>: platform-specific, Python-version-neutral."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    rust_extensions=[
        RustExtension(
            "skrull._libskrull",
            path="../ffi/Cargo.toml",
            binding=Binding.NoBinding,
            py_limited_api=True,  # names the file _libskrull.abi3.so, not per-Python-version
            cargo_manifest_args=["--locked"],
            strip=Strip.All,  # the release profile keeps debug info; the wheel need not
        ),
        RustBin(
            "skrull",  # the [[bin]] of cli/Cargo.toml (crate skrull-cli)
            path="../cli/Cargo.toml",
            cargo_manifest_args=["--locked"],
            strip=Strip.All,
        ),
    ],
    cmdclass={"bdist_wheel": PlatformWheel},
    zip_safe=False,
)
