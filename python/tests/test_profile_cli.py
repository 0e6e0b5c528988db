"""``python -m skrull.profile``: ``--help`` says what is required, a missing model fails at
once with the usage, and a run ends with the ``skrull plan`` line and the Python line that
plan with the fitted model (the Python line runs as printed)."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import pytest

import skrull
from skrull import profile
from skrull.profile import find_cli


def test_help_states_what_is_required():
    run = subprocess.run([sys.executable, "-m", "skrull.profile", "--help"],
                         capture_output=True, text=True)
    assert run.returncode == 0
    assert "Required: the model" in run.stdout
    assert "--model PRESET | --hf-config FILE" in run.stdout


def test_a_missing_model_is_a_usage_error_before_any_measurement(capsys):
    with pytest.raises(SystemExit) as exit_:
        profile.main(["--device", "cpu", "--quick", "--hidden", "64"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "the model is required" in err and "--ffn, --layers, --heads, --vocab" in err
    with pytest.raises(SystemExit):
        profile.main(["--model", "qwen2.5-0.5b", "--hf-config", "config.json"])


def test_a_toy_run_prints_the_cli_and_the_python_line_and_both_plan(tmp_path):
    pytest.importorskip("torch")
    cli = find_cli()
    if cli is None:
        pytest.skip("no skrull command")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = profile.main([
            "--hidden", "64", "--ffn", "128", "--layers", "2", "--heads", "4", "--vocab",
            "256", "--device", "cpu", "--quick", "--quiet", "--threads", "1",
            "--tokens", "64,128,256", "--attention-lengths", "64,128,256", "--warmup", "0",
            "--repeats", "1", "--memory-limit", "1G", "--out", str(tmp_path / "p.csv"),
            "--skrull", cli])
    text = out.getvalue()
    assert code == 0, text
    bucket = int(re.search(r"BucketSize: (\d+) tokens per GPU", text).group(1))
    assert "skrull plan --model custom:hidden=64" in text and f"--bucket {bucket}" in text
    line = re.search(r"in Python: +(.*)", text).group(1)
    assert line.startswith("cost = skrull.CostModel.from_json(")
    ns: dict[str, object] = {"skrull": skrull, "dp": 2, "cp": 2}
    exec(line.replace("; skrull.Scheduler(", "\nscheduler = skrull.Scheduler("), ns)  # noqa: S102
    scheduler = ns["scheduler"]
    assert isinstance(scheduler, skrull.Scheduler)
    assert scheduler.config.bucket_tokens == bucket
    assert scheduler.config.cost_model == ns["cost"]
    assert scheduler.plan([100, 200, 50]).summary.sequences == 3
