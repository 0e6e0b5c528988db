"""The example trains and matches its unpacked baseline (it exits non-zero otherwise)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("torch")


def test_train_tiny_matches_the_unpacked_baseline():
    run = subprocess.run([sys.executable, str(ROOT / "python" / "examples" / "train_tiny.py"),
                          "--steps", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 2
    for line in lines:
        ours, theirs = (float(part.split()[-1]) for part in line.split(" | ")[:2])
        assert ours == pytest.approx(theirs, rel=1e-9)
