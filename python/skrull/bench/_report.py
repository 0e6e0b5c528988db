"""The bench's table, JSON and SVG chart."""

from __future__ import annotations

import json
from typing import Any

from ._delay import label

COLUMNS = ("policy", "measured_step_s", "predicted_step_s", "predicted_over_measured",
           "tokens_per_s", "speedup_vs_deepspeed", "peak_memory_bytes", "micro_batches")


def table(result: dict[str, Any]) -> str:
    """A Markdown table of ``result["policies"]``, with the configuration above it."""
    c = result["config"]
    lines = [f"DP {c['dp']} x CP {c['cp']} on {c['device']} ({c['dtype']}), model "
             f"{c['model']}, BucketSize {c['bucket']}, {c['batch']} sequences per step, "
             f"{c['warmup']} warm-up + {c['steps']} timed steps, calibrate {c['calibrate']}"
             + (f", DeepSpeed ZeRO-{c['zero']}" if c.get("engine") == "deepspeed" else ""),
             "",
             "| policy | measured s/step (spread) | predicted s/step | predicted / measured | "
             "micro-batches measured s | predicted | GPU pred/meas local, sharded | tokens/s | vs deepspeed | "
             "peak memory / rank | micro-batches / rank |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in result["policies"]:
        speed = p["speedup_vs_deepspeed"]
        lines.append(
            f"| {label(p)} | {p['measured_step_s']:.4f} ({p['measured_spread']:.0%}"
            f"{', noisy' if p['noisy'] else ''}) | {p['predicted_step_s']:.4f} | "
            f"{p['predicted_over_measured']:.3f} | {p['measured_compute_s']:.4f} | "
            f"{p['predicted_compute_s']:.4f} | {_pair(p['gpu_predicted_over_measured'])} | "
            f"{p['tokens_per_s']:,.0f} | "
            f"{'-' if speed is None else f'{speed:.2f}x'} | "
            f"{p['peak_memory_bytes'] / 2**20:,.0f} MiB | {p['micro_batches']} |")
    cal = result.get("calibration")
    if cal is not None:
        scaled = cal.get("slowed", 1.0)
        lines += ["", f"calibrated once before the policies: {cal.get('refit') or '-'}; "
                      + (f"predicting with the prior slowed x{scaled:.4g} (a uniform factor "
                         "is all the window told; plans unchanged); " if scaled != 1.0 else "")
                      + f"per-step cost {cal['iteration_fixed_s']:.4f} s/step (of it "
                      f"{cal.get('last_micro_batch_s', 0.0):.4f} s inside each rank's last "
                      "micro-batch)"]
    if c.get("outlier_delay"):
        lines += ["", "| policy | outlier delay | step mean s | step p95 s | speedup of the mean |",
                  "|---|---:|---:|---:|---:|"]
        plain = {p["policy"]: p for p in result["policies"] if not p.get("outlier_delay")}
        for p in result["policies"]:
            ref = plain.get(p["policy"])
            gain = ref["measured_mean_s"] / p["measured_mean_s"] if ref else float("nan")
            lines.append(f"| {p['policy']} | {p.get('outlier_delay', 0)} | "
                         f"{p['measured_mean_s']:.4f} | {p['measured_p95_s']:.4f} | "
                         f"{gain:.3f}x |")
    return "\n".join(lines) + "\n"


def _pair(r: dict[str, Any]) -> str:
    return ", ".join("-" if r[k] is None else f"{r[k]:.2f}" for k in ("local", "sharded"))


def to_json(result: dict[str, Any]) -> str:
    """The result as indented JSON."""
    return json.dumps(result, indent=1) + "\n"


def chart(result: dict[str, Any]) -> str:
    """An SVG bar chart: measured and predicted seconds per step for every policy."""
    rows = result["policies"]
    top = max([max(p["measured_step_s"], p["predicted_step_s"]) for p in rows] + [1e-9])
    width, height, left, bottom, bar = 120 + 110 * len(rows), 300, 60, 40, 36
    scale = (height - bottom - 30) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<text x="{left}" y="16">seconds per step: measured (dark) and predicted '
             f'(light), calibrate {result["config"]["calibrate"]}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" '
             f'y2="{height - bottom}" stroke="black"/>']
    for i, p in enumerate(rows):
        x = left + 20 + i * 110
        for j, (key, color) in enumerate((("measured_step_s", "#1f4e79"),
                                          ("predicted_step_s", "#9dc3e6"))):
            h = p[key] * scale
            parts.append(f'<rect x="{x + j * bar}" y="{height - bottom - h:.1f}" '
                         f'width="{bar - 4}" height="{h:.1f}" fill="{color}"/>')
            parts.append(f'<text x="{x + j * bar}" y="{height - bottom - h - 4:.1f}" '
                         f'font-size="10">{p[key]:.3g}</text>')
        parts.append(f'<text x="{x}" y="{height - bottom + 16}">{label(p)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
