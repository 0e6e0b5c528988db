"""Shared fixtures. The tests import the *installed* ``skrull`` (``pip install ./python``), or
the source tree with ``PYTHONPATH=python SKRULL_LIBRARY=target/release/libskrull.so``."""

from __future__ import annotations

from pathlib import Path

import pytest

import skrull

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "include" / "skrull.h"


def pytest_report_header(config: pytest.Config) -> str:
    return (f"skrull {skrull.__version__} from {Path(skrull.__file__).parent}, "
            f"library {skrull.library_path()}")


@pytest.fixture
def paper_example() -> list[int]:
    """The paper's worked example (README): DP 1, CP 4, BucketSize 24."""
    return [1, 2, 2, 3, 4, 6, 9, 14, 30]
