"""skrull.CostModel: the C presets, the cost-model file, the library's checks, and the plans
``balanced`` makes with it."""

from __future__ import annotations

import copy
import ctypes
import gc
import json
import math
import pickle

import numpy as np
import pytest

import skrull
from skrull import _cost, _ffi

# The H100 preset for Qwen2.5-7B as docs/cost_model.md prints it (15 significant digits).
DOC_FILE = """{
  "_comment": "what this is",
  "peak_flops": 9.894e14, "gemm_efficiency": 0.41, "hbm_bandwidth": 3.35e12,
  "weight_bytes": 2, "weight_passes": 3,
  "attention": {"seqlen": [512, 1024, 2048, 4096, 8192, 16384],
                "fwd_flops": [2.92e14, 4.23e14, 5.21e14, 5.79e14, 6.02e14, 6.16e14],
                "bwd_flops": [3.16e14, 4.24e14, 5.01e14, 5.42e14, 5.59e14, 5.61e14]},
  "attention_tile": 128, "attention_bwd_ratio": 2.5,
  "kv_element_bytes": 2, "comm_passes": 3,
  "ring_step_latency_s": 6.27285714285714e-6, "intra_node_bandwidth": 1.3378750e11,
  "inter_node_bandwidth": 4.5e10, "gpus_per_node": 8, "overlap": "local-attention",
  "kernels_per_layer": 120, "kernel_launch_s": 5e-6,
  "micro_batch_extra_s": 0, "iteration_fixed_s": 0
}"""


def _lmsys_like(seed: int, n: int, longest: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(16), np.log(longest), n)).astype(np.int64)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "qwen2.5-7b"])
def test_presets_are_the_librarys(gpu, model):
    m = skrull.CostModel(gpu, model=model)
    shape = skrull.Scheduler(model=model)._c_config.model
    status, raw = _ffi.preset_cost_model(skrull.GPUS[gpu], shape)
    assert status == 0 and raw.struct_size == ctypes.sizeof(raw) == _ffi.COST_MODEL_SIZE_V3
    assert bytes(m._c) == bytes(raw)
    assert m.gpu == gpu and m.overlap == "local-attention" and m.gpus_per_node == 8
    assert len(m.attention_fwd_flops) == 6 and isinstance(m.attention_seqlen, tuple)


def test_h200_is_h100_with_faster_hbm_and_the_shape_picks_the_attention_table():
    h100, h200 = skrull.CostModel("h100"), skrull.CostModel("h200")
    assert [k for k, v in h100 if v != getattr(h200, k)] == ["hbm_bandwidth"]
    assert h200.hbm_bandwidth == 4.8e12
    big = skrull.CostModel("h100", model="qwen2.5-7b")  # head dim 128, not 64
    assert big.attention_fwd_flops != h100.attention_fwd_flops
    assert big.peak_flops == h100.peak_flops


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_json_round_trip_is_exact(gpu, tmp_path):
    m = skrull.CostModel(gpu, model="qwen2.5-7b", gpus_per_node=4, overlap="all-attention",
                         iteration_fixed_s=0.123456789, kernel_launch_s=1 / 3)
    text = m.to_json(tmp_path / "m.json", comment='a "quoted" note')
    data = json.loads(text)
    assert list(data)[:3] == ["_comment", "peak_flops", "gemm_efficiency"]
    assert data["attention"]["seqlen"] == list(m.attention_seqlen)
    assert data["overlap"] == "all-attention" and data["gpus_per_node"] == 4
    back = skrull.CostModel.from_json(tmp_path / "m.json", gpu="h100", model="qwen2.5-7b")
    assert back == m and back.kernel_launch_s == 1 / 3  # every bit, whatever the base preset


def test_the_documented_file_reads_as_the_7b_h100_preset(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text(DOC_FILE)
    m = skrull.CostModel.from_json(path, model="qwen2.5-7b")
    preset = skrull.CostModel("h100", model="qwen2.5-7b")
    for key, value in preset:
        if isinstance(value, float):  # the file rounds to 15 significant digits
            assert math.isclose(getattr(m, key), value, rel_tol=1e-14), key
        else:
            assert getattr(m, key) == value, key


def test_a_partial_file_keeps_the_base_preset(tmp_path):
    path = tmp_path / "partial.json"
    path.write_text('{"_note": 1, "gpus_per_node": 4, "inter_node_bandwidth": 1e9}')
    m = skrull.CostModel.from_json(path, gpu="h200")
    assert (m.gpus_per_node, m.inter_node_bandwidth) == (4, 1e9)
    assert m == skrull.CostModel("h200", gpus_per_node=4, inter_node_bandwidth=1e9)


@pytest.mark.parametrize("text,field", [
    ('{"gemm_eficiency": 0.5}', "gemm_eficiency"),  # unknown field
    ('{"gpus_per_node": 8.5}', "gpus_per_node"),  # not a whole number
    ('{"gpus_per_node": -1}', "gpus_per_node"),
    ('{"peak_flops": "fast"}', "peak_flops"),
    ('{"peak_flops": true}', "peak_flops"),
    ('{"overlap": "some"}', "overlap"),
    ('{"attention": {"fwd_flops": [1, 2]}}', "attention.fwd_flops"),
    ('{"attention": {"seqlen": [1, 2, 3, 4, 5, 6.5]}}', "attention.seqlen"),
    ('{"attention": {"speed": [1, 2, 3, 4, 5, 6]}}', "attention.speed"),
    ('{"attention": [1]}', "attention"),
    # In range for the parser, out of range for the library, which names the field:
    ('{"gemm_efficiency": 2}', "gemm_efficiency"),
    ('{"gpus_per_node": 0}', "gpus_per_node"),
    ('{"inter_node_bandwidth": 0}', "inter_node_bandwidth"),
    ('{"attention": {"seqlen": [1, 2, 3, 3, 5, 6]}}', "attention_seqlen"),
])
def test_bad_files_name_the_field(text, field, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(skrull.ConfigError) as err:
        skrull.CostModel.from_json(path)
    assert err.value.status == "INVALID_COST_MODEL" and err.value.field_name == field
    assert field in str(err.value)


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path):
    for text in ("{nope", "[1, 2]"):
        (tmp_path / "x.json").write_text(text)
        with pytest.raises(skrull.ConfigError, match="INVALID_COST_MODEL"):
            skrull.CostModel.from_json(tmp_path / "x.json")


def _break(m: skrull.CostModel, name: str) -> None:
    if name == "attention_seqlen":
        m.attention_seqlen = (512, 512, 2048, 4096, 8192, 16384)  # not increasing
    elif name in ("attention_fwd_flops", "attention_bwd_flops"):
        setattr(m, name, (1e14, -1.0, 1e14, 1e14, 1e14, 1e14))
    elif name in ("attention_tile", "gpus_per_node"):
        setattr(m, name, 0)
    elif name == "gemm_efficiency":
        m.gemm_efficiency = 1.5
    else:
        setattr(m, name, float("nan"))


@pytest.mark.parametrize("name", [f for f in _cost.FIELDS if f != "overlap"])
def test_every_invalid_value_is_a_named_config_error(name):
    m = skrull.CostModel("h100")
    _break(m, name)
    with pytest.raises(skrull.ConfigError) as err:
        skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096, cost_model=m)
    e = err.value
    assert (e.status, e.code) == ("INVALID_COST_MODEL", 21)
    assert e.field_name == name and e.field == _cost.FIELDS.index(name) + 1
    with pytest.raises(skrull.ConfigError) as again:
        m.validate()
    assert (again.value.field, again.value.field_name) == (e.field, e.field_name)


def test_an_unknown_overlap_number_is_invalid_enum():
    m = skrull.CostModel("h100")
    m.overlap = 7
    assert m.overlap == 7
    with pytest.raises(skrull.ConfigError, match="INVALID_ENUM"):
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, cost_model=m)
    with pytest.raises(skrull.ConfigError) as err:
        m.overlap = "sometimes"
    assert err.value.field_name == "overlap"


def test_cost_model_field_numbers_follow_the_header():
    """Regression: the library once numbered the fields after `overlap` one low and reported a
    bad attention_bwd_flops with attention_fwd_flops's number. Each field, broken alone, must
    come back as its own position after `struct_size`, and `field_name` must name it."""
    from skrull._args import config_error_info
    for number, name in enumerate(_cost.FIELDS, start=1):
        if name == "overlap":  # an enum: an unknown value is INVALID_ENUM, without a field
            continue
        m = skrull.CostModel("h100")
        if name == "attention_seqlen":
            m._c.attention_seqlen[2] = m._c.attention_seqlen[1]
        elif name in ("attention_fwd_flops", "attention_bwd_flops"):
            getattr(m._c, name)[3] = -1.0
        elif name in ("attention_tile", "gpus_per_node"):
            setattr(m._c, name, 0)
        else:
            setattr(m._c, name, -1.0)
        status, cfg = _ffi.preset_config(0)
        cfg.cost_model = ctypes.addressof(m._c)
        status, info = config_error_info(cfg)
        assert status == info.status == skrull.Status.INVALID_COST_MODEL, name
        assert info.field == number, name
        assert skrull._errors.field_name(info.status, info.field) == name


def test_setting_fields_checks_types_and_never_wraps():
    m = skrull.CostModel("h100")
    m.gpus_per_node = 4
    m.inter_node_bandwidth = 2 * 10**9  # an int is a number
    assert (m.gpus_per_node, m.inter_node_bandwidth) == (4, 2e9)
    with pytest.raises(skrull.ConfigError) as err:
        m.gpus_per_node = 2**32 + 8  # ctypes alone would store 8
    assert err.value.field_name == "gpus_per_node" and m.gpus_per_node == 4
    with pytest.raises(skrull.ConfigError):
        m.attention_tile = -1
    for name, bad in [("peak_flops", "1e15"), ("gpus_per_node", 4.0), ("peak_flops", True),
                      ("attention_seqlen", (1, 2, 3)), ("attention_fwd_flops", 5)]:
        with pytest.raises(skrull.ArgumentError):
            setattr(m, name, bad)
    with pytest.raises(AttributeError, match="no field"):
        m.gpus_per_nodes = 4
    with pytest.raises(AttributeError, match="no field"):
        m.bandwidth  # noqa: B018
    assert repr(m) == "CostModel('h100', inter_node_bandwidth=2000000000.0, gpus_per_node=4)"


def test_the_scheduler_keeps_its_own_read_only_copy_alive():
    lengths = _lmsys_like(0, 64, 20000)
    m = skrull.CostModel("h100", inter_node_bandwidth=1e9)
    s = skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy="balanced", cost_model=m)
    want = s.plan(lengths).digest()
    m.inter_node_bandwidth = 45e9  # the scheduler planned with a copy
    del m
    gc.collect()
    junk = [np.full(4096, 0xFF, np.uint8) for _ in range(64)]  # reuse any freed memory
    assert s.plan(lengths).digest() == want and junk
    assert s.config.cost_model.inter_node_bandwidth == 1e9
    with pytest.raises(AttributeError, match="read-only"):
        s.config.cost_model.gpus_per_node = 2
    copy = s.config.cost_model.copy()
    copy.gpus_per_node = 2  # a copy is mutable again
    assert hash(s.config) == hash(s.config)  # the config stays hashable
    with pytest.raises(TypeError):
        hash(copy)


def test_the_cost_model_changes_balanced_plans():
    lengths = _lmsys_like(0, 64, 20000)

    # Whole-group sharding only here; sub-groups: the test below.
    def plan(**fields):
        m = skrull.CostModel("h100", **fields)
        return skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy="balanced",
                                cost_model=m, subgroups=False).plan(lengths)
    default = skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy="balanced",
                               subgroups=False).plan(lengths)
    eight = plan(gpus_per_node=8)
    assert eight.digest() == default.digest()  # None is the H100 preset
    # CP 16 inside one 16-GPU node rides NVLink: sharding is cheap, so balanced shards more.
    one_node = plan(gpus_per_node=16)
    assert one_node.digest() != eight.digest()
    assert one_node.summary.sharded > eight.summary.sharded
    # With 4 or 8 GPUs per node the CP 16 group spans nodes either way: the model uses the
    # inter-node bandwidth for both (docs/cost_model.md), so the plans agree.
    assert plan(gpus_per_node=4).digest() == eight.digest()
    # A slow inter-node link makes sharding dearer: fewer sequences sharded.
    slow = plan(inter_node_bandwidth=1e9)
    assert slow.summary.sharded < eight.summary.sharded
    # The GPU preset by name uses the scheduler's model shape.
    h200 = skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy="balanced",
                            model="qwen2.5-7b", cost_model="h200")
    assert h200.config.cost_model == skrull.CostModel("h200", model="qwen2.5-7b")


def test_subgroups_where_the_cp_ring_crosses_nodes():
    lengths = _lmsys_like(0, 64, 20000)

    def plan(gpus_per_node, subgroups=True, policy="balanced"):
        m = skrull.CostModel("h100", gpus_per_node=gpus_per_node)
        return skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy=policy, cost_model=m,
                                subgroups=subgroups).plan(lengths)
    # CP 16 over two 8-GPU nodes: balanced keeps rings inside a node where that is faster.
    crossing = plan(8)
    assert crossing.subgroup_sharded > 0
    assert set(crossing.cp_size[(crossing.cp_size > 1)].tolist()) <= {2, 4, 8, 16}
    sub = (crossing.cp_size > 1) & (crossing.cp_size < 16)
    assert (crossing.cp_first[sub] % crossing.cp_size[sub] == 0).all()  # aligned blocks
    assert (crossing.cp_rank[sub] == skrull.SHARDED).all()
    assert crossing.digest() != plan(8, subgroups=False).digest()
    # The default is on, as in the CLI.
    assert skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624).config.subgroups
    # Inside one node the whole group's ring is already on NVLink: no sub-group is tried.
    one_node = plan(16)
    assert one_node.subgroup_sharded == 0
    assert one_node.digest() == plan(16, subgroups=False).digest()
    # The paper's policy keeps to 1 and N whatever the flag.
    assert plan(8, policy="skrull").subgroup_sharded == 0


@pytest.mark.parametrize("policy", ["skrull", "deepspeed", "packed", "roundrobin"])
def test_only_balanced_plans_with_the_cost_model(policy):
    lengths = _lmsys_like(1, 64, 20000)
    a = skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy=policy).plan(lengths)
    b = skrull.Scheduler(dp=2, cp=16, bucket_tokens=26624, policy=policy,
                         cost_model=skrull.CostModel("h100", inter_node_bandwidth=1e9,
                                                     gpus_per_node=16)).plan(lengths)
    assert a.digest() == b.digest()


def test_a_cost_model_pickles_and_copies_whole():
    m = skrull.CostModel("h200", model="qwen2.5-7b", gpus_per_node=2, kernel_launch_s=1 / 7)
    for back in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), m.copy()):
        assert back == m and back is not m and (back.gpu, back.model) == ("h200", m.model)
        back.gpus_per_node = 3  # a copy is mutable and independent
        assert m.gpus_per_node == 2
    frozen = skrull.Scheduler(2, 2, 64, cost_model=m).config.cost_model
    assert pickle.loads(pickle.dumps(frozen)) == m


def test_the_per_sharded_sequence_cost_round_trips_through_c_json_and_plans(tmp_path):
    m = skrull.CostModel("h100", model="qwen2.5-0.5b", sharded_sequence_s=0.004567891234)
    assert m.sharded_sequence_s == 0.004567891234
    assert m._c.struct_size == _ffi.COST_MODEL_SIZE_V3
    path = tmp_path / "m.json"
    m.to_json(path)
    back = skrull.CostModel.from_json(path)
    assert back.sharded_sequence_s == m.sharded_sequence_s and back == m
    assert "sharded_sequence_s" in m.to_dict()
    with pytest.raises(skrull.ConfigError) as err:
        skrull.CostModel(sharded_sequence_s=-1.0).validate()
    assert err.value.field_name == "sharded_sequence_s"
    # The library plans with it: a costly sharded sequence is kept whole.
    lengths = [17_000] + [900] * 24
    cheap = skrull.Scheduler(1, 8, 26 * 1024, model="qwen2.5-0.5b").plan(lengths)
    dear = skrull.Scheduler(1, 8, 26 * 1024, model="qwen2.5-0.5b",
                            cost_model=skrull.CostModel(sharded_sequence_s=1.0)).plan(lengths)
    assert cheap.placements["cp_rank"][0] == -1 and (dear.placements["cp_rank"] >= 0).all()


def test_the_per_whole_sequence_cost_round_trips_through_c_json_and_plans(tmp_path):
    m = skrull.CostModel("h100", model="qwen2.5-0.5b", local_sequence_s=0.000712345678)
    assert m.local_sequence_s == 0.000712345678 and skrull.CostModel().local_sequence_s == 0
    path = tmp_path / "m.json"
    m.to_json(path)
    back = skrull.CostModel.from_json(path)
    assert back.local_sequence_s == m.local_sequence_s and back == m
    assert back.slowed(2.0).local_sequence_s == 2 * m.local_sequence_s
    with pytest.raises(skrull.ConfigError) as err:
        skrull.CostModel(local_sequence_s=-1.0).validate()
    assert err.value.field_name == "local_sequence_s"
    # The library plans with it: where each whole sequence costs a kernel call of 50 ms,
    # `balanced` shards the short ones too (sharded, they cost no call).
    lengths = [900] * 24 + [5000]
    cheap = skrull.Scheduler(1, 8, 26 * 1024, model="qwen2.5-0.5b").plan(lengths)
    dear = skrull.Scheduler(1, 8, 26 * 1024, model="qwen2.5-0.5b",
                            cost_model=skrull.CostModel(local_sequence_s=0.05)).plan(lengths)
    assert (cheap.placements["cp_rank"] < 0).sum() == 1
    assert (dear.placements["cp_rank"] < 0).sum() > 12
