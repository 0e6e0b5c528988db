"""``python/examples/hf_sft.py`` end to end (DP 1 x CP 2, 2 spawned gloo processes, a small
lengths file): it prints a line per step and a final weight difference below 1e-10."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hf_sft.py"


def test_hf_sft_example_matches_unpacked_training(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in [5, 120, 33, 64, 1, 90, 17, 128, 8, 47]))
    # The example imports skrull as this test does: the installed wheel, or the source tree
    # through the caller's PYTHONPATH and SKRULL_LIBRARY (a regression: prepending the source
    # tree made the example miss the library that only the installed wheel holds).
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--dp", "1", "--cp", "2", "--policy", "skrull",
         "--steps", "2", "--global-batch", "5", "--bucket", "64", "--lengths", str(lengths)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    steps = re.findall(r"step (\d): loss ([\d.]+), \d+ micro-batches .* sharded (\d+) of 5",
                       out.stdout)
    assert [s[0] for s in steps] == ["1", "2"], out.stdout
    final = re.search(r"max relative weight difference vs unpacked: (\S+)", out.stdout)
    assert final and float(final.group(1)) < 1e-10, out.stdout


def test_hf_sft_example_trains_chunkflow_chunks_like_unpacked_training(tmp_path):
    # --policy chunkflow --chunk-size: every sequence over 32 tokens runs as chunks over the
    # CP group (the 120- and 128-token ones as 4 chunks, K = 1: 3 recomputed).
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in [5, 120, 33, 64, 1, 90, 17, 128, 8, 47]))
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--dp", "1", "--cp", "2", "--policy", "chunkflow",
         "--chunk-size", "32", "--steps", "2", "--global-batch", "5", "--bucket", "64",
         "--lengths", str(lengths)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ChunkSize 32 K 1" in out.stdout, out.stdout
    chunked = [int(n) for n in re.findall(r"step \d: loss [\d.]+, .*, chunked (\d+)",
                                          out.stdout)]
    assert len(chunked) == 2 and sum(chunked) > 0, out.stdout
    final = re.search(r"max relative weight difference vs unpacked: (\S+)", out.stdout)
    assert final and float(final.group(1)) < 1e-10, out.stdout
