"""``torch.ops.skrull.schedule`` (``skrull.ops``, a torch C++ op linking libskrull.a): the same
arrays as the ctypes binding for every policy and option on random batches, the binding's
messages for every refused batch and configuration, and the op under torch.compile,
TorchScript and a TorchScript file loaded again."""

from __future__ import annotations

import doctest

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


def test_the_op_reads_every_integer_dtype_and_a_list():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256)
    lengths = [30, 20, 100, 10, 200, 3]
    plan = s.plan(lengths)
    for dtype in (torch.int16, torch.int32, torch.int64, torch.uint8):
        _assert_same(ops.schedule(torch.tensor(lengths, dtype=dtype), s), plan)
    _assert_same(ops.schedule(lengths, s), plan)
    _assert_same(ops.schedule(torch.tensor(lengths), ops.config_text(s)), plan)
    # A non-contiguous view is read as its values.
    spread = torch.tensor(lengths).repeat_interleave(2)[::2]
    _assert_same(ops.schedule(spread, s), plan)


def test_an_empty_batch_is_an_empty_plan():
    s = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256)
    _assert_same(ops.schedule(torch.empty(0, dtype=torch.int64), s), s.plan([]))


def test_a_hand_written_text_plans_like_the_scheduler_of_the_same_arguments():
    lengths = [177, 423, 695, 3000, 954, 5398, 31, 2048, 7000, 12, 64, 900]
    cases = [
        ("dp=2 cp=4 bucket_tokens=4096", dict(dp=2, cp=4, bucket_tokens=4096)),
        ("dp=2,cp=4,bucket_tokens=4096,policy=SKRULL,victim=longest",
         dict(dp=2, cp=4, bucket_tokens=4096, policy="skrull", victim="longest")),
        ("model=qwen2.5-7b cp=4 policy=2", dict(model="qwen2.5-7b", cp=4, policy="packed")),
        ("dp=1 cp=8 bucket_tokens=2048 policy=chunkflow",
         dict(dp=1, cp=8, bucket_tokens=2048, policy="chunkflow")),
        ("dp=2 cp=4 bucket_tokens=4096 cost_model=h200 cost_model.gpus_per_node=2",
         dict(dp=2, cp=4, bucket_tokens=4096, cost_model=skrull.CostModel("h200",
                                                                          gpus_per_node=2))),
        ("dp=2 cp=2 bucket_tokens=8192 lockstep=true fill_empty=TRUE subgroups=0 "
         "model.hidden=1024 model.kv_hidden=256 model.ffn=3000 model.layers=4 model.vocab=0 "
         "model.swiglu=false",
         dict(dp=2, cp=2, bucket_tokens=8192, lockstep=True, fill_empty=True, subgroups=False,
              model=skrull.ModelShape(1024, 256, 3000, 4, 0, False))),
    ]
    for text, kwargs in cases:
        _assert_same(ops.schedule(torch.tensor(lengths), text),
                     skrull.Scheduler(**kwargs).plan(lengths))


def test_config_text_carries_every_cost_model_field_bit_for_bit():
    m = skrull.CostModel("h100", gemm_efficiency=0.1 + 0.2, kernel_launch_s=3.3e-6,
                         attention_seqlen=(64, 512, 2048, 8192, 32768, 131072),
                         overlap="all-attention")
    s = skrull.Scheduler(dp=2, cp=8, bucket_tokens=8192, cost_model=m)
    text = ops.config_text(s)
    assert "cost_model.gemm_efficiency=0.30000000000000004" in text
    assert "cost_model.overlap=all-attention" in text
    rng = np.random.default_rng(5)
    for _ in range(5):
        lengths = _batch(rng, 200, 30000)
        _assert_same(ops.schedule(torch.from_numpy(lengths), text), s.plan(lengths))


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


BAD_CONFIGS = [
    ("dp=0 cp=2 bucket_tokens=64", dict(dp=0, cp=2, bucket_tokens=64)),
    ("dp=2 cp=300 bucket_tokens=64", dict(dp=2, cp=300, bucket_tokens=64)),
    ("dp=2 cp=2 bucket_tokens=0", dict(dp=2, cp=2, bucket_tokens=0)),
    ("dp=2 cp=2 bucket_tokens=2147483648", dict(dp=2, cp=2, bucket_tokens=2**31)),
    ("dp=2 cp=2 bucket_tokens=64 pad_multiple=70000",
     dict(dp=2, cp=2, bucket_tokens=64, pad_multiple=70000)),
    ("dp=2 cp=2 bucket_tokens=64 policy=fastest",
     dict(dp=2, cp=2, bucket_tokens=64, policy="fastest")),
    ("dp=2 cp=2 bucket_tokens=64 policy=9", dict(dp=2, cp=2, bucket_tokens=64, policy=9)),
    ("dp=2 cp=2 bucket_tokens=64 shard_padding=Zig",
     dict(dp=2, cp=2, bucket_tokens=64, shard_padding="Zig")),
    ("dp=2 cp=2 bucket_tokens=64 lockstep=2", dict(dp=2, cp=2, bucket_tokens=64, lockstep=2)),
    ("dp=2 cp=2 bucket_tokens=64 chunk_keep=0", dict(dp=2, cp=2, bucket_tokens=64, chunk_keep=0)),
    ("dp=2 cp=2 bucket_tokens=64 chunk_size=64 chunk_state_permille=2000",
     dict(dp=2, cp=2, bucket_tokens=64, chunk_size=64, chunk_state_permille=2000)),
    ("dp=2 cp=2 bucket_tokens=64 max_micro_batches=2 micro_batches=3",
     dict(dp=2, cp=2, bucket_tokens=64, max_micro_batches=2, micro_batches=3)),
    ("dp=2 cp=2 bucket_tokens=64 flops=megatron",
     dict(dp=2, cp=2, bucket_tokens=64, flops="megatron")),
    ("dp=2 cp=2 bucket_tokens=64 policy=chunkflow chunk_size=0",
     dict(dp=2, cp=2, bucket_tokens=64, policy="chunkflow", chunk_size=0)),
    ("dp=2 cp=2 bucket_tokens=64 model.hidden=896 model.kv_hidden=128 model.ffn=0 "
     "model.layers=24 model.vocab=0 model.swiglu=1",
     dict(dp=2, cp=2, bucket_tokens=64, model=skrull.ModelShape(896, 128, 0, 24))),
    ("dp=2 cp=2 bucket_tokens=64 model.hidden=4294967296",
     dict(dp=2, cp=2, bucket_tokens=64, model=skrull.ModelShape(2**32, 128, 4864, 24))),
    ("dp=2 cp=2 bucket_tokens=64 cost_model=a100",
     dict(dp=2, cp=2, bucket_tokens=64, cost_model="a100")),
]


@pytest.mark.parametrize("text,kwargs", BAD_CONFIGS, ids=[t for t, _ in BAD_CONFIGS])
def test_a_refused_configuration_raises_the_schedulers_message(text, kwargs):
    with pytest.raises(skrull.Error) as binding:
        skrull.Scheduler(**kwargs)
    kind = TypeError if isinstance(binding.value, TypeError) else ValueError
    with pytest.raises(kind) as op:
        ops.schedule(torch.tensor([10, 20]), text)
    assert str(op.value) == str(binding.value)


def test_a_cost_model_the_library_refuses_raises_the_schedulers_message():
    bad = skrull.CostModel("h100")
    bad.gemm_efficiency = 1.5
    with pytest.raises(skrull.ConfigError) as binding:
        skrull.Scheduler(dp=2, cp=2, bucket_tokens=64, cost_model=bad)
    good = ops.config_text(skrull.Scheduler(dp=2, cp=2, bucket_tokens=64,
                                            cost_model=skrull.CostModel("h100")))
    text = " ".join("cost_model.gemm_efficiency=1.5" if item.startswith(
        "cost_model.gemm_efficiency=") else item for item in good.split())
    with pytest.raises(ValueError) as op:
        ops.schedule(torch.tensor([10, 20]), text)
    assert str(op.value) == str(binding.value)
    assert str(op.value).endswith("[INVALID_COST_MODEL]")


@pytest.mark.parametrize("text,fragment", [
    ("dp=2 cp=2 bucket_tokens=64 speed=fast", "unknown key 'speed'"),
    ("dp=2 dp=3", "'dp' is given twice"),
    ("dp=2 cp", "'cp' is not a key=value item"),
    ("dp=2 cp=2 bucket_tokens=64 cost_model.attention_seqlen=1:2:3", "must hold 6 values"),
    ("dp=2 cp=2 bucket_tokens=64 cost_model.peak_flops=fast", "must be a number"),
    ("dp=2 cp=2 bucket_tokens=64 model=llama", "'llama' is not a preset"),
])
def test_a_malformed_text_names_the_item(text, fragment):
    with pytest.raises((ValueError, TypeError)) as e:
        ops.schedule(torch.tensor([10, 20]), text)
    assert fragment in str(e.value)


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

def _summarise(lengths: torch.Tensor, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    placements, table, members, rank_tokens, per_dp, groups, summary = \
        torch.ops.skrull.schedule(lengths, text)
    # Uses the data-dependent micro-batch count k (table and rank_tokens rows).
    load = rank_tokens.sum(dim=1).to(torch.int64)
    return torch.stack([placements[:, 3].to(torch.int64).sum(), load.sum(),
                        table[:, 3].to(torch.int64).sum(), per_dp.sum(), summary[0]]), members


def test_the_op_compiles_with_a_fake_implementation():
    s = skrull.Scheduler(dp=2, cp=4, bucket_tokens=4096)
    text = ops.config_text(s)
    compiled = torch.compile(_summarise, fullgraph=True, backend="inductor")
    rng = np.random.default_rng(3)
    for n in (40, 41, 300):  # new sizes recompile or stay dynamic; either must be right
        lengths = torch.from_numpy(_batch(rng, n, 8000))
        want = _summarise(lengths, text)
        got = compiled(lengths, text)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_opcheck_finds_the_fake_implementation_consistent():
    text = "dp=2 cp=2 bucket_tokens=256"
    lengths = torch.tensor([30, 20, 100, 10, 200, 3, 400])
    torch.library.opcheck(torch.ops.skrull.schedule.default, (lengths, text),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_calls_the_op_and_survives_a_save_and_load(tmp_path):
    @torch.jit.script
    def plan_members(lengths: torch.Tensor) -> torch.Tensor:
        out = torch.ops.skrull.schedule(lengths, "dp=2 cp=2 bucket_tokens=256 policy=skrull")
        return out[2]

    lengths = torch.tensor([30, 20, 100, 10, 200, 3, 400])
    want = skrull.Scheduler(dp=2, cp=2, bucket_tokens=256, policy="skrull").plan(lengths).members
    assert np.array_equal(plan_members(lengths).numpy(), want)
    path = tmp_path / "plan_members.pt"
    plan_members.save(str(path))
    loaded = torch.jit.load(str(path))
    assert np.array_equal(loaded(lengths).numpy(), want)
    with pytest.raises(Exception, match=r"SEQUENCE_TOO_LONG"):
        loaded(torch.tensor([10, 600]))


def test_many_threads_plan_at_once():
    from concurrent.futures import ThreadPoolExecutor
    s = skrull.Scheduler(dp=4, cp=8, bucket_tokens=8192)
    text = ops.config_text(s)
    rng = np.random.default_rng(9)
    batches = [_batch(rng, 256, 30000) for _ in range(16)]
    plans = [s.plan(b) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda b: ops.schedule(torch.from_numpy(b), text), batches))
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
