"""``python/examples/deepspeed_sft.py`` under torchrun, as the README launches it (DP 1 x CP 2,
ZeRO-2, 2 gloo processes, a small lengths file): a line per step and a final weight
difference against plain DeepSpeed at float32-master rounding."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
if importlib.util.find_spec("deepspeed") is None:  # not imported here: the ranks import it
    pytest.skip("DeepSpeed is not installed", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "deepspeed_sft.py"


def test_deepspeed_sft_example_matches_plain_deepspeed(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in [5, 120, 33, 64, 1, 90, 17, 128, 8, 47]))
    env = dict(os.environ, DS_ACCELERATOR="cpu",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--standalone", str(EXAMPLE), "--cp", "2", "--zero", "2", "--policy", "skrull",
         "--steps", "2", "--global-batch", "5", "--bucket", "64", "--lengths", str(lengths)],
        capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DP 1 x CP 2, ZeRO-2" in out.stdout
    steps = re.findall(r"step (\d): loss ([\d.]+), \d+ micro-batches \(\[(\d+)\] per DP rank\), "
                       r"sharded (\d+) of 5", out.stdout)
    assert [s[0] for s in steps] == ["1", "2"], out.stdout
    assert sum(int(s[3]) for s in steps) > 0  # some sequence ran sharded over the CP ranks
    final = re.search(r"max relative weight difference vs plain deepspeed: (\S+)", out.stdout)
    assert final and float(final.group(1)) < 1e-6, out.stdout
