"""Every bad input raises the right class with a message a Python user can act on, and the
table of them in docs/python.md is the one these messages make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import skrull

import _bad_inputs as cases  # python/tests is on sys.path (rootdir conftest)

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
_NS: dict[str, Any] = {}


def _ns() -> dict[str, Any]:
    if not _NS:
        _NS.update(cases.namespace())
    return _NS


def test_there_are_at_least_60_cases():
    assert len(cases.CASES) >= 60
    assert len({expr for expr, *_ in cases.CASES}) == len(cases.CASES)


@pytest.mark.parametrize("expr,cls,status,fragments", cases.CASES,
                         ids=[c[0] for c in cases.CASES])
def test_bad_input_raises_class_status_and_message(expr, cls, status, fragments):
    e = cases.raised(expr, _ns())
    assert type(e) is cls, (expr, type(e), e)
    assert isinstance(e, skrull.Error) and e.status == status
    assert isinstance(e, TypeError if cls is skrull.ArgumentError else ValueError)
    text = str(e)
    for fragment in fragments:
        assert fragment in text, (expr, fragment, text)
    assert text.endswith(f"[{status}]")
    for word in cases.C_WORDS:
        assert word not in text, (expr, word, text)
    if e.field_name is not None and status not in ("INVALID_COST_MODEL", "INVALID_MODEL"):
        assert e.field_name.split(".")[-1] in text.replace("'", "")
    if status in ("INVALID_DP", "INVALID_CP", "INVALID_BUCKET", "INVALID_PAD_MULTIPLE",
                  "NO_SUCH_GPU", "TOO_MANY_SEQUENCES", "SEQUENCE_TOO_LONG",
                  "MICRO_BATCH_LIMIT", "MICRO_BATCH_COUNT"):
        assert e.value is not None and e.limit is not None, expr
        assert str(e.value) in text
    if isinstance(e, skrull.ConfigError) and status == "INVALID_ARG":
        assert (e.value, e.limit) != (None, None) and e.field_name in text


def test_the_docs_table_is_the_one_the_messages_make():
    doc = DOC.read_text(encoding="utf-8")
    assert cases.current(doc) == cases.table(), (
        "docs/python.md is stale: run python python/tests/_bad_inputs.py --write "
        "docs/python.md")


def test_members_of_and_layout_agree_on_every_index():
    plan = skrull.Scheduler(dp=2, cp=2, bucket_tokens=32, policy="deepspeed",
                            lockstep=True).plan([32, 32, 32])  # ranks run 2 and 1 (+1 empty)
    assert plan.micro_batches_per_dp.tolist() == [2, 2]
    for d in range(-1, 4):
        for m in range(-1, 4):
            outcomes = []
            for call in (lambda: plan.members_of(d, m), lambda: plan.layout(d, m, 0)):
                try:
                    call()
                    outcomes.append(None)
                except skrull.LayoutError as e:
                    outcomes.append((e.status, e.field_name, e.value, e.limit, str(e)))
            assert outcomes[0] == outcomes[1], (d, m, outcomes)
            assert (outcomes[0] is None) == (0 <= d < 2 and 0 <= m < 2)
    assert plan.members_of(1, 1).size == 0 and plan.layout(1, 1, 0).is_empty_micro_batch


class _FakeCudaTensor:
    """What a torch tensor on a GPU offers: ``detach``, ``cpu`` (numpy() refuses the GPU)."""

    device = "cuda:0"

    def __init__(self, values: list[int]) -> None:
        self.values = values

    def detach(self) -> _FakeCudaTensor:
        return self

    def cpu(self) -> Any:
        return _FakeCpuTensor(self.values)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


class _FakeCpuTensor(_FakeCudaTensor):
    device = "cpu"

    def numpy(self) -> np.ndarray:
        return np.asarray(self.values, np.int64)


def test_lengths_on_a_gpu_are_copied_to_the_cpu():
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
    assert s.plan(_FakeCudaTensor([30, 100])) == s.plan([30, 100])
    torch = pytest.importorskip("torch")
    assert s.plan(torch.tensor([30, 100])) == s.plan([30, 100])
    with pytest.raises(skrull.ArgumentError, match=r"lengths\[0\] is True \(bool\)"):
        s.plan(torch.tensor([True, False]))
    if torch.cuda.is_available():
        assert s.plan(torch.tensor([30, 100], device="cuda")) == s.plan([30, 100])


def test_a_preset_model_gives_its_layout_and_hf_keys_name_a_shape():
    s = skrull.Scheduler(model="qwen2.5-7b")
    assert (s.config.dp, s.config.cp, s.config.bucket_tokens) == (4, 8, 13312)
    hf = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
          "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
          "model_type": "qwen2"}
    preset = skrull.Scheduler(4, 8, 4096, model="qwen2.5-0.5b").config.model
    assert skrull.ModelShape.from_hf_config(hf) == preset
    assert skrull.Scheduler(4, 8, 4096, model=hf).config.model == preset
    assert skrull.ModelShape.from_hf_config({"text_config": hf}) == preset
    with pytest.raises(skrull.ArgumentError, match="needs dp, cp, bucket_tokens"):
        skrull.Scheduler(model=hf)  # a shape has no paper layout


def test_hf_config_files_and_directories(tmp_path):
    import json
    cfg = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
           "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    want = skrull.ModelShape(64, 64, 256, 2, 1000, True)
    assert skrull.ModelShape.from_hf_config(tmp_path / "config.json") == want
    assert skrull.ModelShape.from_hf_config(str(tmp_path)) == want
    assert skrull.Scheduler(1, 2, 64, model=str(tmp_path)).config.model == want
    with pytest.raises(skrull.ArgumentError, match="cannot read"):
        skrull.ModelShape.from_hf_config(tmp_path / "missing.json")
