"""The ``skrull`` command that ``pip install ./python`` ships: found by the profiler, and
``Plan.to_json()`` is byte for byte what its ``skrull plan --format json`` prints."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import skrull
from skrull.profile import find_cli

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = not Path(skrull.__file__).resolve().is_relative_to(ROOT / "python")


def _cli() -> str:
    cli = find_cli()
    if cli is None:
        pytest.skip("no skrull command (pip install ./python, or cargo build -p skrull-cli)")
    return cli


def test_the_installed_package_ships_the_command_next_to_python():
    if not INSTALLED:
        pytest.skip("testing the source tree, not an installed wheel")
    beside = Path(sysconfig.get_path("scripts")) / "skrull"
    assert beside.is_file(), "the wheel did not install the skrull command"
    assert find_cli() in (str(beside), str(Path(sys.executable).parent / "skrull"))
    out = subprocess.run([str(beside), "--help"], capture_output=True, text=True)
    assert "calibrate" in out.stdout + out.stderr


@pytest.mark.parametrize("kwargs,flags", [
    (dict(dp=2, cp=4, bucket_tokens=4096, policy="skrull"),
     ["--dp", "2", "--cp", "4", "--bucket", "4096", "--policy", "skrull"]),
    (dict(dp=2, cp=8, bucket_tokens=8192, lockstep=True, fill_empty=True, pad_multiple=32,
          shard_padding="zigzag"),
     ["--dp", "2", "--cp", "8", "--bucket", "8192", "--lockstep", "--fill-empty",
      "--pad-multiple", "32", "--shard-padding", "zigzag"]),
    (dict(dp=1, cp=4, bucket_tokens=4096, model="qwen2.5-7b", micro_batches=3,
          policy="packed"),
     ["--dp", "1", "--cp", "4", "--bucket", "4096", "--model", "qwen2.5-7b",
      "--micro-batches", "3", "--policy", "packed"]),
])
def test_to_json_is_what_the_command_prints(kwargs, flags, tmp_path):
    cli = _cli()
    lengths = [177, 423, 695, 3000, 954, 5398, 31, 2048, 7000, 12, 64, 900]
    (tmp_path / "lengths.txt").write_text("\n".join(map(str, lengths)) + "\n")
    run = subprocess.run([cli, "plan", "--lengths", str(tmp_path / "lengths.txt"), *flags,
                          "--format", "json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    plan = skrull.Scheduler(**kwargs).plan(lengths)
    assert plan.to_json() == run.stdout
    assert plan.to_dict() == json.loads(run.stdout)
