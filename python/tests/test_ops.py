"""``torch.ops.skrull.schedule`` (``skrull.ops``, a torch C++ op linking libskrull.a): the same
arrays as the ctypes binding for every policy and option on random batches, the binding's
messages for every refused batch and configuration (both ask the library for the words), the
configuration tensors (a Scheduler's C structs as bytes) and their refusals, and the op under
torch.compile, TorchScript and a TorchScript file loaded again."""

from __future__ import annotations

import ctypes
import doctest
import sys

import numpy as np
import pytest

import skrull

torch = pytest.importorskip("torch")
ops = pytest.importorskip("skrull.ops")

POLICIES = ["skrull", "deepspeed", "packed", "roundrobin", "balanced", "chunkflow"]


def _ctypes_arrays(plan: skrull.Plan) -> list[np.ndarray]:
    """The plan's arrays in the op's order and dtypes (every value fits)."""
    s = plan.summary
    return [plan.placements.view(np.int32).reshape(-1, 4).astype(np.int64),
            plan.micro_batch_table.view(np.int32).reshape(-1, 4).astype(np.int64),
            plan.members, plan.rank_tokens.astype(np.int64),
            plan.micro_batches_per_dp.astype(np.int64),
            plan.cp_groups.view(np.int32).reshape(-1, 2).astype(np.int64),
            np.array([s.total_tokens, s.sequences, s.micro_batches, s.sharded, s.rollbacks,
                      s.peak_rank_tokens, s.chunked], np.int64)]


def _assert_same(out: ops.PlanTensors, plan: skrull.Plan) -> None:
    expected = _ctypes_arrays(plan)
    assert [t.dtype for t in out] == [torch.int32, torch.int32, torch.int64, torch.int32,
                                      torch.int64, torch.int32, torch.int64]
    for name, got, want in zip(ops.PlanTensors._fields, out, expected):
        assert got.device.type == "cpu"
        assert got.numpy().astype(np.int64).shape == want.shape, name
        assert np.array_equal(got.numpy().astype(np.int64), want), name
    # Signed views of the unsigned fields read back what the binding reads.
    assert np.array_equal(out.placements[:, 2].numpy(), plan.cp_rank)
    assert np.array_equal(out.placements[:, 3].numpy(), plan.tokens_per_gpu)


def _batch(rng: np.random.Generator, n: int, longest: int) -> np.ndarray:
    """A long-tail batch: mostly short sequences, a few near the longest the layout takes."""
    short = rng.integers(1, max(2, longest // 16), n)
    long = rng.integers(1, longest + 1, n)
    return np.where(rng.random(n) < 0.15, long, short).astype(np.int64)


OPTIONS = [
    dict(),
    dict(lockstep=True),
    dict(lockstep=True, fill_empty=True),
    dict(micro_batches=12),
    dict(pad_multiple=32, shard_padding="zigzag"),
    dict(pad_multiple=16, pad_local=True),
    dict(subgroups=False, victim="longest"),
    dict(model="qwen2.5-7b", cost_model="h200"),
    dict(cost_model=skrull.CostModel("h100", gpus_per_node=4, gemm_efficiency=0.61)),
    dict(max_micro_batches=64),
    dict(chunk_size=1024, chunk_keep=2),
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(sorted(o)) for o in OPTIONS])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_op_returns_the_bindings_arrays(policy, options):
    rng = np.random.default_rng(hash((policy, str(sorted(options)))) & 0xFFFF)
    if policy != "balanced" and "chunk_size" in options:
        options = dict(options, chunk_size=0)
    if policy == "chunkflow":
        options = {k: v for k, v in options.items() if k != "chunk_size"}
    flops = dict(flops="megatron") if policy == "skrull" and not options else {}
    for dp, cp, bucket in ((1, 1, 2048), (2, 4, 4096), (4, 8, 8192), (3, 2, 1000)):
        s = skrull.Scheduler(dp=dp, cp=cp, bucket_tokens=bucket, policy=policy, **options,
                             **flops)
        for n in (1, 7, 64, 300):
            lengths = _batch(rng, n, bucket * cp // 2)
            try:
                plan = s.plan(lengths)
            except skrull.BatchError as e:  # a fixed count or limit this batch exceeds
                with pytest.raises(ValueError) as op_error:
                    ops.schedule(torch.from_numpy(lengths), s)
                assert str(op_error.value) == str(e)
                continue
            _assert_same(ops.schedule(torch.from_numpy(lengths), s), plan)


def test_chunkflow_default_plans_at_dp2_cp16_through_the_op():
    """Regression: chunkflow refused its own default ChunkSize at DP 2 x CP 16 (it was sized
    for one GPU); the op plans with the Scheduler's configuration, default included, and a
    sequence too long to fit sharded runs chunked."""
    for model, bucket in (("qwen2.5-7b", 13312), ("qwen2.5-0.5b", 26624)):
        s = skrull.Scheduler(dp=2, cp=16, bucket_tokens=bucket, model=model,
                             policy="chunkflow")
        lengths = np.array([100, 60_000, 5_000, 230_000, 700])
        plan = s.plan(lengths)
        assert plan.kind[3] == "chunked"
        _assert_same(ops.schedule(torch.from_numpy(lengths), s), plan)


def test_the_op_reads_every_integer_dtype_and_a_list():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256)
    lengths = [30, 20, 100, 10, 200, 3]
    plan = s.plan(lengths)
    for dtype in (torch.int16, torch.int32, torch.int64, torch.uint8):
        _assert_same(ops.schedule(torch.tensor(lengths, dtype=dtype), s), plan)
    _assert_same(ops.schedule(lengths, s), plan)
    _assert_same(ops.schedule(lengths, s.config), plan)
    _assert_same(ops.schedule(torch.tensor(lengths), ops.config_tensors(s)), plan)
    # A non-contiguous view is read as its values.
    spread = torch.tensor(lengths).repeat_interleave(2)[::2]
    _assert_same(ops.schedule(spread, s), plan)


def test_an_empty_batch_is_an_empty_plan():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256)
    _assert_same(ops.schedule(torch.empty(0, dtype=torch.int64), s), s.plan([]))


# ---- the configuration tensors ----------------------------------------------------------

_POINTER = skrull._ffi.skrull_config.cost_model


def _without_pointer(raw: bytes) -> bytes:
    return raw[:_POINTER.offset] + raw[_POINTER.offset + _POINTER.size:]


def test_config_tensors_hold_the_schedulers_structs_byte_for_byte():
    m = skrull.CostModel("h100", gemm_efficiency=0.1 + 0.2, kernel_launch_s=3.3e-6,
                         attention_seqlen=(64, 512, 2048, 8192, 32768, 131072),
                         overlap="all-attention")
    s = skrull.Scheduler(dp=2, cp=8, bucket_tokens=8192, cost_model=m, lockstep=True)
    config, cost = ops.config_tensors(s)
    assert config.dtype == cost.dtype == torch.uint8 and config.dim() == cost.dim() == 1
    assert bytes(config.numpy()) == bytes(s._c_config)
    assert bytes(cost.numpy()) == bytes(s.config.cost_model._c)
    # From the Config alone: the same bytes but the pointer (to a copy of the cost model).
    config2, cost2 = ops.config_tensors(s.config)
    assert _without_pointer(bytes(config2.numpy())) == _without_pointer(bytes(config.numpy()))
    assert torch.equal(cost2, cost)
    # No cost model: the library's preset, an empty tensor.
    assert ops.config_tensors(skrull.Scheduler(dp=2, cp=2, bucket_tokens=64))[1].numel() == 0
    rng = np.random.default_rng(5)
    for _ in range(5):
        lengths = _batch(rng, 200, 30000)
        _assert_same(ops.schedule(torch.from_numpy(lengths), (config2, cost2)), s.plan(lengths))
    with pytest.raises(TypeError, match="skrull.Scheduler or skrull.Config"):
        ops.config_tensors("dp=2 cp=4")


def test_config_tensors_follow_a_refit():
    """After a refit the scheduler plans with the refitted model: so do its tensors."""
    from test_refit import FIXED_S, GEMM_S_PER_TOKEN, _batch, _feed, _scheduler
    s = _scheduler()
    before = ops.config_tensors(s)
    _feed(s, 4, fixed=20 * FIXED_S, per_token=0.2 * GEMM_S_PER_TOKEN)
    assert s.refit().changed
    after = ops.config_tensors(s)
    assert bytes(after[1].numpy()) == bytes(s.config.cost_model._c)
    assert not torch.equal(after[1], before[1])
    for k in range(10, 14):
        lengths = torch.from_numpy(np.asarray(_batch(k), dtype=np.int64))
        _assert_same(ops.schedule(lengths, after), s.plan(lengths.numpy()))


def test_a_version_1_config_plans_as_the_library_reads_it():
    """A 60-byte skrull_config (the first version): the library gives every field appended
    since its default; the op passes struct_size on as it came."""
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096, policy="skrull", subgroups=False)
    raw = bytearray(bytes(s._c_config)[:60])
    raw[:4] = (60).to_bytes(4, sys.byteorder)
    v1 = torch.frombuffer(raw, dtype=torch.uint8)
    empty = torch.empty(0, dtype=torch.uint8)
    lengths = [177, 423, 695, 3000, 954, 5398, 31, 2048, 7000, 12, 64, 900]
    _assert_same(ops.schedule(torch.tensor(lengths), (v1, empty)), s.plan(lengths))
    # A cost model needs the config's cost_model field.
    cost = ops.config_tensors(skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096,
                                               cost_model="h100"))[1]
    with pytest.raises(ValueError, match="config of 60 bytes, which ends before its cost_model"):
        ops.schedule(torch.tensor(lengths), (v1, cost))


def test_a_config_tensor_of_the_wrong_form_is_refused():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, cost_model="h100")
    config, cost = ops.config_tensors(s)
    lengths = torch.tensor([10, 20])
    n = config.numel()
    cases = [
        ((config.to(torch.int32), cost), TypeError,
         "config must be a uint8 tensor holding the bytes of a skrull_config"),
        ((config, cost.to(torch.float64)), TypeError,
         "cost_model must be a uint8 tensor holding the bytes of a skrull_cost_model"),
        ((config, torch.empty(0)), TypeError, "got dtype Float"),
        ((config.view(2, -1), cost), ValueError, r"config must be one-dimensional .* shape \(2, "),
        ((config[:-4], cost), ValueError,
         f"config holds {n - 4} bytes, but its struct_size field \\(the first 4 bytes\\) says {n}"),
        ((torch.cat([config, config]), cost), ValueError, f"holds {2 * n} bytes"),
        ((config[:3], cost), ValueError, "config holds 3 bytes"),
        ((torch.empty(0, dtype=torch.uint8), cost), ValueError, "config holds 0 bytes"),
        ((config, cost[:8]), ValueError, "cost_model holds 8 bytes"),
    ]
    for args, kind, message in cases:
        with pytest.raises(kind, match=message):
            ops.schedule(lengths, args)
    # Not CPU: refused before any byte is read.
    with pytest.raises(ValueError, match="config must be a CPU tensor"):
        torch.ops.skrull.schedule(lengths, config.to("meta"), cost)


# ---- refusals: the binding's message, word for word -------------------------------------

BAD_BATCHES = [
    (dict(dp=2, cp=2, bucket_tokens=64), [10, 0, 5]),                       # EMPTY_SEQUENCE
    (dict(dp=2, cp=2, bucket_tokens=64), [10, -7, 5]),                      # negative
    (dict(dp=2, cp=2, bucket_tokens=64), [10, 2**40, 5]),                   # past uint32
    (dict(dp=2, cp=2, bucket_tokens=64), [10, 2**31 + 5, 5]),               # past 2^31 - 1
    (dict(dp=2, cp=2, bucket_tokens=64), [10, 129, 5]),                     # SEQUENCE_TOO_LONG
    (dict(dp=1, cp=4, bucket_tokens=64, shard_padding="zigzag"), [3, 260]),  # padded share
    (dict(dp=1, cp=1, bucket_tokens=64), [1] * 65537),                      # TOO_MANY_SEQUENCES
    (dict(dp=1, cp=1, bucket_tokens=64, max_micro_batches=2), [60, 60, 60]),  # LIMIT
    (dict(dp=1, cp=1, bucket_tokens=64, micro_batches=2), [60, 60, 60]),     # COUNT
    (dict(dp=1, cp=2, bucket_tokens=100, chunk_size=128, chunk_keep=2, policy="chunkflow"),
     [200, 10]),                                                            # CHUNK_OVER_BUDGET
]


@pytest.mark.parametrize("kwargs,lengths", BAD_BATCHES, ids=lambda x: str(x)[:50])
def test_a_refused_batch_raises_the_bindings_message(kwargs, lengths):
    s = skrull.Scheduler(**kwargs)
    with pytest.raises(skrull.BatchError) as binding:
        s.plan(lengths)
    with pytest.raises(ValueError) as op:
        ops.schedule(torch.tensor(lengths, dtype=torch.int64), s)
    assert str(op.value) == str(binding.value)
    assert str(op.value).endswith(f"[{binding.value.status}]")


def _bad_cost_model() -> skrull.CostModel:
    bad = skrull.CostModel("h100")
    bad.gemm_efficiency = 1.5  # a CostModel checks fields when a call reads them
    return bad


def _set(**fields):
    def apply(c, cost):
        for name, value in fields.items():
            target = cost if name.startswith("cost.") else c.model if name.startswith(
                "model.") else c
            setattr(target, name.split(".")[-1], value)
    return apply


# Configurations the library refuses, as bytes a Scheduler's struct would hold with one field
# changed, and the Scheduler arguments that reach the library with the same fault (None where
# the binding's own argument checks refuse them first, in their own words).
BAD_CONFIGS = [
    ("dp=0", _set(dp=0), dict(dp=0)),
    ("cp=300", _set(cp=300), None),
    ("bucket_tokens=0", _set(bucket_tokens=0), dict(bucket_tokens=0)),
    ("bucket_tokens=2^31", _set(bucket_tokens=2**31), dict(bucket_tokens=2**31)),
    ("pad_multiple=70000", _set(pad_multiple=70000), None),
    ("policy=9", _set(policy=9), None),
    ("shard_padding=7", _set(shard_padding=7), None),
    ("lockstep=2", _set(lockstep=2), None),
    ("subgroups=3", _set(subgroups=3), None),
    ("chunk_keep=0", _set(chunk_size=64, chunk_keep=0), None),
    ("chunk_state_permille=2000", _set(chunk_size=64, chunk_state_permille=2000), None),
    ("chunkflow without chunk_size", _set(policy=5, chunk_size=0),
     dict(policy="chunkflow", chunk_size=0)),
    ("micro_batches over max", _set(max_micro_batches=2, micro_batches=3), None),
    ("flops=megatron with balanced", _set(flops=1), dict(flops="megatron")),
    ("model.ffn=0", _set(**{"model.ffn": 0}), dict(model=skrull.ModelShape(896, 128, 0, 24))),
    ("model.kv_hidden over hidden", _set(**{"model.kv_hidden": 1024}),
     dict(model=skrull.ModelShape(896, 1024, 4864, 24))),
    ("cost.gemm_efficiency=1.5", _set(**{"cost.gemm_efficiency": 1.5}),
     lambda: dict(cost_model=_bad_cost_model())),
    ("cost.gpus_per_node=0", _set(**{"cost.gpus_per_node": 0}), None),
    ("struct_size=62", _set(struct_size=62), None),
    ("cost.struct_size=100", _set(**{"cost.struct_size": 100}), None),
]


def _refused_by_the_binding(mutate):
    """The struct of ``Scheduler(dp=2, cp=2, bucket_tokens=64, cost_model="h100")`` changed by
    ``mutate``, the binding's exception for it (its check of a built configuration), and the
    op's tensors of the same bytes."""
    from skrull import _args, _ffi
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, cost_model="h100")
    c = _ffi.skrull_config.from_buffer_copy(s._c_config)
    cost = _ffi.skrull_cost_model.from_buffer_copy(s.config.cost_model._c)
    c.cost_model = ctypes.addressof(cost)
    mutate(c, cost)
    with pytest.raises(skrull.Error) as binding:
        _args.check_config(c)
    config_bytes, cost_bytes = ops._struct_bytes(c)
    return binding.value, (torch.frombuffer(bytearray(config_bytes), dtype=torch.uint8),
                           torch.frombuffer(bytearray(cost_bytes), dtype=torch.uint8))


@pytest.mark.parametrize("name,mutate,kwargs", BAD_CONFIGS, ids=[n for n, _, _ in BAD_CONFIGS])
def test_a_refused_configuration_raises_the_bindings_message(name, mutate, kwargs):
    binding, tensors = _refused_by_the_binding(mutate)
    kind = next(k for k in (TypeError, ValueError, RuntimeError) if isinstance(binding, k))
    with pytest.raises(kind) as op:
        ops.schedule(torch.tensor([10, 20]), tensors)
    assert str(op.value) == str(binding)
    assert str(op.value).endswith(f"[{binding.status}]")
    if kwargs is not None:  # the Scheduler's arguments reach the library: the same words
        kwargs = kwargs() if callable(kwargs) else kwargs
        with pytest.raises(skrull.Error) as scheduler:
            skrull.Scheduler(**dict(dict(dp=2, cp=2, bucket_tokens=64), **kwargs))
        assert str(scheduler.value) == str(op.value)


def test_the_refused_configurations_cover_every_configuration_status():
    seen = {_refused_by_the_binding(mutate)[0].status for _, mutate, _ in BAD_CONFIGS}
    assert seen == {"INVALID_DP", "INVALID_CP", "INVALID_BUCKET", "INVALID_PAD_MULTIPLE",
                    "INVALID_ENUM", "INVALID_CHUNKING", "MICRO_BATCH_LIMIT",
                    "UNSUPPORTED_OPTION", "INVALID_MODEL", "INVALID_COST_MODEL",
                    "BAD_STRUCT_SIZE"}


def test_lengths_that_are_not_one_dimensional_integers_raise_type_error():
    s = skrull.Scheduler(dp=1, cp=2, bucket_tokens=64)
    grid = [[1, 2, 3], [4, 5, 6]]
    with pytest.raises(skrull.ArgumentError) as binding:
        s.plan(np.array(grid))
    with pytest.raises(TypeError) as op:
        ops.schedule(torch.tensor(grid), s)
    assert str(op.value) == str(binding.value)
    with pytest.raises(TypeError, match="integer numbers of tokens"):
        ops.schedule(torch.tensor([1.0, 2.0]), s)
    with pytest.raises(TypeError, match="dtype"):
        ops.schedule(torch.tensor([True, False]), s)


# ---- torch.compile, TorchScript ---------------------------------------------------------

def _summarise(lengths: torch.Tensor, config: torch.Tensor,
               cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    placements, table, members, rank_tokens, per_dp, groups, summary = \
        torch.ops.skrull.schedule(lengths, config, cost)
    # Uses the data-dependent sizes: k (table and rank_tokens rows), cp and dp.
    load = rank_tokens.sum(dim=1).to(torch.int64)
    return torch.stack([placements[:, 3].to(torch.int64).sum(), load.sum(),
                        table[:, 3].to(torch.int64).sum(), per_dp.sum(), summary[0],
                        rank_tokens.amax(dim=0).to(torch.int64).sum()]), members


def test_the_op_compiles_with_a_fake_implementation():
    compiled = torch.compile(_summarise, fullgraph=True, backend="inductor")
    rng = np.random.default_rng(3)
    # New sizes and new layouts (dp and cp come from the bytes) recompile or stay dynamic;
    # either must be right.
    for dp, cp, n in ((2, 4, 40), (2, 4, 41), (3, 2, 300), (1, 8, 40)):
        config, cost = ops.config_tensors(skrull.Scheduler(dp=dp, cp=cp, bucket_tokens=4096,
                                                           cost_model="h200"))
        lengths = torch.from_numpy(_batch(rng, n, 8000))
        want = _summarise(lengths, config, cost)
        got = compiled(lengths, config, cost)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_opcheck_finds_the_fake_implementation_consistent():
    lengths = torch.tensor([30, 20, 100, 10, 200, 3, 400])
    for s in (skrull.Scheduler(dp=2, cp=2, bucket_tokens=256),
              skrull.Scheduler(dp=3, cp=4, bucket_tokens=256, cost_model="h100")):
        torch.library.opcheck(torch.ops.skrull.schedule.default,
                              (lengths, *ops.config_tensors(s)),
                              test_utils=("test_schema", "test_faketensor"))


def test_the_fake_implementation_refuses_what_the_op_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    config, cost = ops.config_tensors(skrull.Scheduler(dp=2, cp=2, bucket_tokens=256))
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        lengths = mode.from_tensor(torch.tensor([30, 20]))
        fake_config, fake_cost = mode.from_tensor(config), mode.from_tensor(cost)
        with pytest.raises(TypeError, match="config must be a uint8 tensor"):
            torch.ops.skrull.schedule(lengths, fake_config.to(torch.int32), fake_cost)
        with pytest.raises(ValueError, match=r"cost_model must be one-dimensional .* \(1, 0\)"):
            torch.ops.skrull.schedule(lengths, fake_config, fake_cost.view(1, 0))
        out = torch.ops.skrull.schedule(lengths, fake_config, fake_cost)
        assert out[0].shape == (2, 4)


class _PlanMembers(torch.nn.Module):
    """A module that plans with a scheduler's configuration, held as buffers."""

    def __init__(self, scheduler: skrull.Scheduler) -> None:
        super().__init__()
        config, cost = ops.config_tensors(scheduler)
        self.register_buffer("config", config)
        self.register_buffer("cost_model", cost)

    def forward(self, lengths: torch.Tensor) -> torch.Tensor:
        return torch.ops.skrull.schedule(lengths, self.config, self.cost_model)[2]


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_calls_the_op_and_survives_a_save_and_load(tmp_path):
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256, policy="skrull", cost_model="h200")
    scripted = torch.jit.script(_PlanMembers(s))
    lengths = torch.tensor([30, 20, 100, 10, 200, 3, 400])
    want = s.plan(lengths).members
    assert np.array_equal(scripted(lengths).numpy(), want)
    path = tmp_path / "plan_members.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    assert np.array_equal(loaded(lengths).numpy(), want)
    with pytest.raises(Exception, match=r"SEQUENCE_TOO_LONG"):
        loaded(torch.tensor([10, 600]))


def test_many_threads_plan_at_once():
    from concurrent.futures import ThreadPoolExecutor
    s = skrull.Scheduler(dp=4, cp=8, bucket_tokens=8192, cost_model="h100")
    tensors = ops.config_tensors(s)
    rng = np.random.default_rng(9)
    batches = [_batch(rng, 256, 30000) for _ in range(16)]
    plans = [s.plan(b) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda b: ops.schedule(torch.from_numpy(b), tensors), batches))
    for out, plan in zip(outs, plans):
        _assert_same(out, plan)


def test_the_docstring_examples_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(ops, ops.__name__) if t.examples]
    assert len(tests) >= 4
    for test in tests:
        runner.run(test)
    assert runner.failures == 0


def test_the_python_blocks_of_docs_cpp_run_as_written():
    from pathlib import Path

    from test_docs_snippets import blocks  # python/tests is on sys.path (rootdir conftest)

    doc = Path(__file__).resolve().parents[2] / "docs" / "cpp.md"
    code = [c for lang, c, _ in blocks(doc.read_text(encoding="utf-8")) if lang == "python"]
    assert code
    ns: dict[str, object] = {"__name__": "__doc_snippet__"}
    for n, block in enumerate(code):
        exec(compile(block, f"docs/cpp.md python block {n + 1}", "exec"), ns)  # noqa: S102
    out = ns["out"]
    assert isinstance(out, tuple) and len(out) == 7
