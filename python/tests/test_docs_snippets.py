"""Every ``python`` block of docs/python.md and README.md runs as written, in order, one
namespace per document; a ``text`` block right after a ``python`` block is its printed output."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["docs/python.md", "README.md", "python/README.md"]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(language, code, expected output or None) of each fenced block; the output is the
    ``text`` block that follows a ``python`` block with nothing but blank lines between."""
    found = list(_FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        expected = None
        if m.group(1) == "python" and i + 1 < len(found):
            nxt = found[i + 1]
            if nxt.group(1) == "text" and not text[m.end():nxt.start()].strip():
                expected = nxt.group(2)
        out.append((m.group(1), m.group(2), expected))
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_snippet_runs_as_written(doc, tmp_path, monkeypatch):
    code_blocks = [b for b in blocks((ROOT / doc).read_text(encoding="utf-8"))
                   if b[0] == "python"]
    assert code_blocks
    needs_torch = any("import torch" in code or "skrull.torch" in code
                      for _, code, _ in code_blocks)
    if needs_torch:
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)  # snippets may write files (calibrated.json)
    ns: dict[str, object] = {"__name__": "__doc_snippet__"}
    for n, (_, code, expected) in enumerate(code_blocks):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{doc} python block {n + 1}", "exec"), ns)  # noqa: S102
        if expected is not None:
            assert out.getvalue() == expected, f"{doc} block {n + 1} printed:\n{out.getvalue()}"
    assert not os.path.exists(ROOT / "calibrated.json")
