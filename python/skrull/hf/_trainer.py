"""``SkrullTrainerMixin`` / ``SkrullTrainer``: skrull placement inside transformers' Trainer."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer

from ..torch.attention import MicroBatchPasses
from ._attention import ATTENTION_NAME, PassAttention, SkrullAttention
from ._collator import IGNORE_INDEX, SkrullCollator, collate_gpu_buffer, padding_batch
from ._deepspeed_cpu import repair_cpu_deepspeed
from ._loss import exact_causal_lm_loss
from ._sampler import PlannedMicroBatch, SkrullBatchSampler


@dataclass
class SkrullConfig:
    """How ``SkrullTrainer`` plans its global batches.

    Parameters
    ----------
    bucket_tokens : int
        The most tokens one GPU holds in one micro-batch.
    cp : int, optional
        CP ranks per DP rank (default 1); the world size must be a multiple (DP = world size
        // cp). With ``cp > 1`` the model must use ``attn_implementation="skrull"``.
    lengths : sequence of int, optional
        Token count of every training sample; default: ``len(sample["input_ids"])``
        (``infer_lengths``).
    global_batch_size : int, optional
        Samples per optimizer step; default: ``per_device_train_batch_size *
        gradient_accumulation_steps * DP``, as transformers' ``BatchRebalanceSampler``.
    exact : bool, optional
        Refuse bf16/fp16 mixed precision (TRL's ``SFTConfig`` turns ``bf16`` on by default)
        and compute the model's loss with ``exact_causal_lm_loss`` (no float32 cast of
        float64 logits).
    pad_token_id : int, optional
        Token id of the padding token of an empty micro-batch (and of zigzag padding).
    scheduler : dict, optional
        Further ``skrull.Scheduler`` arguments (``policy``, ``model``, ``cost_model``,
        ``shard_padding``, ``subgroups``, ``refit``...).
    calibrate_every : int, optional
        0 (default): off. ``k > 0``: the automatic mode (``skrull.torch.OnlineCalibration``):
        every micro-batch is timed, each step's times are all-gathered over the job, and the
        cost model is refitted every ``k`` steps, identically on every rank; later steps are
        planned with it.
    calibration_callback : callable, optional
        Called with the ``skrull.Refit`` whenever the model changes (it is logged too).

    Example
    -------
    >>> from skrull.hf import SkrullConfig
    >>> cfg = SkrullConfig(bucket_tokens=4096, cp=2, scheduler={"policy": "skrull"})
    >>> cfg.cp, cfg.exact, cfg.pad_token_id, cfg.scheduler
    (2, False, 0, {'policy': 'skrull'})
    """

    bucket_tokens: int
    cp: int = 1
    lengths: Sequence[int] | None = None
    global_batch_size: int | None = None
    exact: bool = False
    pad_token_id: int = 0
    scheduler: dict[str, Any] = field(default_factory=dict)
    calibrate_every: int = 0
    calibration_callback: Callable[[Any], Any] | None = None


class _EmptySafeCollator:
    """Wraps a collator so that an empty micro-batch becomes ``padding_batch`` instead of
    reaching a collator that fails on ``[]`` (TRL's and ``DataCollatorWithFlattening``)."""

    def __init__(self, inner: Any, pad_token_id: int) -> None:
        self.inner, self.pad_token_id = inner, pad_token_id

    def __call__(self, features: list[Any]) -> dict[str, Any]:
        if len(features) == 0:
            batch = padding_batch(self.pad_token_id)
            del batch["shift_labels"]  # the keys TRL's padding-free collator returns
            return batch
        out: dict[str, Any] = self.inner(features)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)


class _PerGpuDataset(Dataset):  # type: ignore[type-arg]
    """The training set seen by one (DP, CP) rank: fetching a ``PlannedMicroBatch`` returns
    this GPU's buffer for it (``collate_gpu_buffer``), loading only the samples it holds."""

    def __init__(self, dataset: Any, cp_rank: int, pad_token_id: int) -> None:
        self.dataset, self.cp_rank, self.pad_token_id = dataset, cp_rank, pad_token_id

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, planned: PlannedMicroBatch) -> list[dict[str, Any]]:
        layout = planned.plan.layout(planned.dp_rank, planned.micro_batch, self.cp_rank)
        wanted = {int(s) for s in layout.spans["seq"].tolist()}
        samples = {s: self.dataset[int(planned.batch_indices[s])] for s in wanted}
        return [collate_gpu_buffer(layout, samples, self.pad_token_id, plan=planned.plan)]


def _only(batch: list[Any]) -> Any:
    return batch[0]


def chunking_on(cfg: SkrullConfig) -> bool:
    """Whether ``cfg`` plans chunked placements: a ``chunk_size`` or the ``chunkflow``
    policy (whose ChunkSize defaults)."""
    return bool(cfg.scheduler.get("chunk_size")) or cfg.scheduler.get("policy") == "chunkflow"


#: The ``[1, T]`` inputs a pass takes its rows of.
_PER_TOKEN = ("input_ids", "position_ids", "labels", "shift_labels")


def _rows(inputs: dict[str, Any], start: int, stop: int, pad_token_id: int) -> dict[str, Any]:
    """``inputs`` cut to buffer rows ``[start, stop)`` (a new dict); no rows: one padding
    row, as an empty micro-batch runs."""
    out = {k: (v[:, start:stop] if k in _PER_TOKEN else v) for k, v in inputs.items()}
    if stop == start:
        out["input_ids"] = torch.full((1, 1), pad_token_id, dtype=torch.long)
        out["position_ids"] = torch.zeros((1, 1), dtype=torch.long)
        for key in ("labels", "shift_labels"):
            if key in inputs:
                out[key] = torch.full((1, 1), IGNORE_INDEX, dtype=torch.long)
        for key in _PER_TOKEN:
            if key in out and key in inputs:
                out[key] = out[key].to(inputs[key].device)
    return out


class _EpochDataLoader(DataLoader):  # type: ignore[type-arg]
    """A DataLoader whose ``set_epoch`` reaches its batch sampler (the Trainer calls it)."""

    def set_epoch(self, epoch: int) -> None:
        """Reshuffles the batch sampler for ``epoch``."""
        self.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]


def infer_lengths(dataset: Any) -> list[int]:
    """``len(sample["input_ids"])`` of every sample (a ``length`` column when present).

    Parameters
    ----------
    dataset : sequence of mappings or datasets.Dataset
        Samples with ``input_ids``; a ``datasets.Dataset`` with a ``length`` column is read
        from that column alone.

    Returns
    -------
    list of int
        One length per sample.

    Example
    -------
    >>> from skrull.hf import infer_lengths
    >>> infer_lengths([{"input_ids": [1, 2, 3]}, {"input_ids": [4]}])
    [3, 1]
    """
    names = getattr(dataset, "column_names", None) or []
    if "length" in names:
        return [int(n) for n in dataset["length"]]
    return [len(dataset[i]["input_ids"]) for i in range(len(dataset))]


class SkrullTrainerMixin:
    """Mix into ``Trainer`` or TRL's ``SFTTrainer`` (before it: ``class T(SkrullTrainerMixin,
    SFTTrainer)``) to train on skrull plans. Pass ``skrull=SkrullConfig(...)``.

    - ``_get_train_sampler`` returns a ``SkrullBatchSampler``: DP ranks and micro-batches come
      from the plan, exactly ``gradient_accumulation_steps`` per DP rank and step;
    - with ``cp > 1`` or chunking on, ``get_train_dataloader`` gives every (DP, CP) rank its
      own buffers (local sequences whole, sharded ones as zigzag chunks at their true
      positions, chunked ones chunk by chunk) and ``compute_loss`` hands the model each
      micro-batch's ``SkrullAttention``; a micro-batch with chunk passes runs one forward per
      pass (ChunkFlow's schedule: the chunks in order over a per-layer K/V state, the first
      ``count - K`` recomputed in the one backward); DDP runs over
      all DP x CP ranks and the Trainer's loss normalisation (label tokens of the global batch,
      ``average_tokens_across_devices``) keeps gradients equal to unpacked training;
    - guards: ``use_cache`` is forced off in every training forward (a KV cache silently
      disables transformers' packed-sequence detection), ``cp > 1`` refuses a model whose
      attention is not ``"skrull"`` (zigzag buffers would be mis-split by position jumps) and
      ``average_tokens_across_devices=False``, and ``SkrullConfig(exact=True)`` refuses
      bf16/fp16 (warned about otherwise when bf16 is on, TRL's default);
    - with ``TrainingArguments(deepspeed=...)`` on a machine without a GPU, the arguments'
      device set-up is redone with gloo (``repair_cpu_deepspeed``: transformers would count
      one process and DeepSpeed refuse the batch sizes).

    Parameters
    ----------
    *args, **kwargs
        The Trainer's own arguments (``model``, ``args``, ``train_dataset``,
        ``data_collator``...). A ``data_collator`` other than ``SkrullCollator`` is wrapped
        so that an empty micro-batch becomes ``padding_batch``.
    skrull : SkrullConfig
        How global batches are planned (keyword only).

    Raises
    ------
    ValueError
        A guard of ``check_training_setup``.

    Example
    -------
    >>> import transformers
    >>> from skrull.hf import SkrullConfig, SkrullTrainerMixin
    >>> class MyTrainer(SkrullTrainerMixin, transformers.Trainer):   # or TRL's SFTTrainer
    ...     pass
    >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...                                   num_hidden_layers=1, num_attention_heads=2,
    ...                                   use_cache=False, attn_implementation="skrull")
    >>> args = transformers.TrainingArguments("out", use_cpu=True, report_to=[])
    >>> trainer = MyTrainer(model=transformers.LlamaForCausalLM(config), args=args,
    ...                     train_dataset=[{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}],
    ...                     skrull=SkrullConfig(bucket_tokens=16))
    >>> trainer.skrull_dp
    1
    """

    if TYPE_CHECKING:  # what the Trainer it is mixed into provides
        model: Any
        args: Any
        train_dataset: Any
        data_collator: Any

    def __init__(self, *args: Any, skrull: SkrullConfig, **kwargs: Any) -> None:
        self.skrull = skrull
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if getattr(training_args, "deepspeed", None):
            repair_cpu_deepspeed(training_args)  # DeepSpeed on a CPU-only machine
        super().__init__(*args, **kwargs)
        check_training_setup(self.model, self.args, skrull)
        if skrull.exact and hasattr(self.model, "loss_function"):
            self.model.loss_function = exact_causal_lm_loss
        if self.data_collator is not None and not isinstance(self.data_collator,
                                                             SkrullCollator):
            self.data_collator = _EmptySafeCollator(self.data_collator, skrull.pad_token_id)
        self._ring_groups: dict[tuple[int, int], Any] | None = None
        self._sampler: SkrullBatchSampler | None = None
        self._online: Any = None  # skrull.torch.OnlineCalibration, once the sampler exists
        self._micro_batches_done = 0

    @property
    def skrull_dp(self) -> int:
        """DP ranks: world size // cp."""
        world: int = self.args.world_size
        return max(1, world) // self.skrull.cp

    @property
    def skrull_calibration(self) -> Any:
        """The ``skrull.torch.OnlineCalibration`` of ``SkrullConfig(calibrate_every=k)``
        (made with the training sampler), else None; ``disable()`` it on every rank to stop."""
        return self._online

    def _get_train_sampler(self, train_dataset: Any = None) -> SkrullBatchSampler:
        dataset = self.train_dataset if train_dataset is None else train_dataset
        cfg, args = self.skrull, self.args
        lengths = list(cfg.lengths) if cfg.lengths is not None else infer_lengths(dataset)
        dp = self.skrull_dp
        batch = cfg.global_batch_size or (args.per_device_train_batch_size
                                          * args.gradient_accumulation_steps * dp)
        scheduler = dict(cfg.scheduler)
        ds = getattr(args, "hf_deepspeed_config", None)
        if ds is not None and "sync" not in scheduler:
            # DeepSpeed's engine synchronises by its ZeRO stage (every GPU under ZeRO-2/3).
            from ..deepspeed._settings import Engine
            scheduler["sync"] = Engine.from_config(ds.config).sync
        sampler = SkrullBatchSampler(lengths, batch, cfg.bucket_tokens,
                                     args.gradient_accumulation_steps, dp_size=dp,
                                     rank=args.process_index // cfg.cp, cp=cfg.cp,
                                     seed=args.data_seed if args.data_seed is not None
                                     else args.seed, drop_last=True, **scheduler)
        if cfg.calibrate_every > 0:
            from ..torch import OnlineCalibration
            sampler.record_plans = True
            self._online = OnlineCalibration(sampler.scheduler, every=cfg.calibrate_every,
                                             callback=cfg.calibration_callback,
                                             device=args.device)
            self._micro_batches_done = 0
        self._sampler = sampler
        return sampler

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any],
                      *args: Any, **kwargs: Any) -> torch.Tensor:
        """The Trainer's ``training_step`` (forward and backward of one micro-batch); with
        ``SkrullConfig(calibrate_every=k)`` it is timed, and after a step's last micro-batch
        the step's times are all-gathered and observed (a collective: every rank does it),
        refitting every ``k`` steps.

        Parameters
        ----------
        model : torch.nn.Module
            The model (as the Trainer passes it).
        inputs : dict
            One micro-batch.
        *args, **kwargs
            Passed on (``num_items_in_batch``).

        Returns
        -------
        torch.Tensor
            What the Trainer's ``training_step`` returns (the detached loss).

        Raises
        ------
        RuntimeError
            A step ended with no plan recorded for it (a sampler other than
            ``SkrullBatchSampler``). Plans are matched to steps by epoch and global batch
            (``state.global_step``), so batches skipped when resuming are skipped here too.
        ValueError
            A rank timed another number of micro-batches than its DP rank runs
            (``skrull.torch.gather_times``, raised on every rank).

        Example
        -------
        ``train()`` calls it; skipped as a doctest (it needs a process group:
        python/tests/test_hf_calibration.py runs it).

        >>> from skrull.hf import SkrullConfig
        >>> cfg = SkrullConfig(bucket_tokens=16, calibrate_every=5)
        >>> trainer = SkrullTrainer(model=model, args=args, train_dataset=data,
        ...                         skrull=cfg)                     # doctest: +SKIP
        >>> trainer.train()                                       # doctest: +SKIP
        """
        online = self._online
        if online is None:
            out: torch.Tensor = super().training_step(  # type: ignore[misc]
                model, inputs, *args, **kwargs)
            return out
        with online.time():  # a no-op while disabled
            out = super().training_step(model, inputs, *args, **kwargs)  # type: ignore[misc]
        self._micro_batches_done += 1
        if self._micro_batches_done == self.args.gradient_accumulation_steps:
            self._micro_batches_done = 0
            online.step(self._step_plan())  # nothing while disabled
        return out

    def _step_plan(self) -> Any:
        """The plan of the step now ending: the sampler's plan of global batch
        ``global_step % batches per epoch`` of epoch ``global_step // batches per epoch``.
        Plans of batches the Trainer skipped (resuming mid-epoch) are dropped."""
        sampler = self._sampler
        per_epoch = sampler.num_global_batches if sampler is not None else 0
        if sampler is None or per_epoch <= 0:
            raise RuntimeError("SkrullTrainer: a step ended with no plan recorded for it "
                               "(calibrate_every needs the SkrullBatchSampler)")
        key = divmod(int(self.state.global_step), per_epoch)  # type: ignore[attr-defined]
        plans = sampler.plans
        while plans and (plans[0][0], plans[0][1]) < key:
            plans.popleft()
        if not plans or (plans[0][0], plans[0][1]) != key:
            raise RuntimeError(f"SkrullTrainer: no plan recorded for epoch {key[0]}, global "
                               f"batch {key[1]} (the step now ending)")
        return plans.popleft()[2]

    def get_train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        """The training ``DataLoader``, batched by a ``SkrullBatchSampler``.

        With ``cp == 1`` and chunking off it is the Trainer's own loader (it takes the
        sampler from ``_get_train_sampler``). With ``cp > 1`` or chunking on every (DP, CP)
        rank gets its own buffers (``collate_gpu_buffer``, loading only the samples it holds),
        and with ``cp > 1`` this rank's CP ring process groups are made on the first call
        (``cp_ring_groups``, a collective).

        Returns
        -------
        torch.utils.data.DataLoader
            One batch per micro-batch: ``gradient_accumulation_steps`` per step.

        Raises
        ------
        ValueError
            With ``cp > 1`` or chunking on, no ``train_dataset``.

        Example
        -------
        >>> import torch, transformers
        >>> from skrull.hf import SkrullConfig, SkrullTrainer
        >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...                                   num_hidden_layers=1, num_attention_heads=2,
        ...                                   use_cache=False, attn_implementation="skrull")
        >>> model = transformers.LlamaForCausalLM(config)
        >>> data = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 4, 6)]
        >>> args = transformers.TrainingArguments("out", use_cpu=True, report_to=[],
        ...                                       per_device_train_batch_size=2, max_steps=1)
        >>> trainer = SkrullTrainer(model=model, args=args, train_dataset=data,
        ...                         skrull=SkrullConfig(bucket_tokens=16))
        >>> batch = next(iter(trainer.get_train_dataloader()))
        >>> batch["input_ids"].shape[0], sorted(batch)[:3]         # one packed [1, T] row
        (1, ['cu_seq_lens_k', 'cu_seq_lens_q', 'input_ids'])
        """
        if self.skrull.cp == 1 and not chunking_on(self.skrull):
            loader: DataLoader = super().get_train_dataloader()  # type: ignore[misc, type-arg]
            return loader
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        if self._ring_groups is None and self.skrull.cp > 1:
            from ..torch import cp_ring_groups
            self._ring_groups = cp_ring_groups(self.skrull_dp, self.skrull.cp)
        sampler = self._get_train_sampler()
        args = self.args
        return _EpochDataLoader(
            _PerGpuDataset(self.train_dataset, args.process_index % self.skrull.cp,
                           self.skrull.pad_token_id),
            batch_sampler=sampler, collate_fn=_only, num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any],
                     *args: Any, **kwargs: Any) -> Any:
        """The Trainer's ``compute_loss`` with the cache off (``use_cache=False``) and, for a
        CP buffer, the micro-batch's ``SkrullAttention`` passed to the model as
        ``skrull_attention`` (built from the batch's ``skrull_layout``). A buffer with chunk
        passes runs pass by pass (one forward each) and returns their summed loss, one
        autograd graph for the Trainer's one backward.

        Parameters
        ----------
        model : torch.nn.Module
            The model (as the Trainer passes it).
        inputs : dict
            One batch of the training ``DataLoader``; it is copied, not changed.
        *args, **kwargs
            Passed on (``return_outputs``, ``num_items_in_batch``).

        Returns
        -------
        torch.Tensor or tuple
            What the Trainer's ``compute_loss`` returns.

        Example
        -------
        >>> import torch, transformers
        >>> from skrull.hf import SkrullConfig, SkrullTrainer
        >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...                                   num_hidden_layers=1, num_attention_heads=2,
        ...                                   use_cache=False, attn_implementation="skrull")
        >>> model = transformers.LlamaForCausalLM(config)
        >>> data = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 4, 6)]
        >>> args = transformers.TrainingArguments("out", use_cpu=True, report_to=[],
        ...                                       per_device_train_batch_size=2, max_steps=1)
        >>> trainer = SkrullTrainer(model=model, args=args, train_dataset=data,
        ...                         skrull=SkrullConfig(bucket_tokens=16))
        >>> batch = next(iter(trainer.get_train_dataloader()))
        >>> loss = trainer.compute_loss(trainer.model, batch)
        >>> loss.shape, bool(loss > 0)
        (torch.Size([]), True)
        """
        inputs = dict(inputs)
        inputs["use_cache"] = False
        gpu = inputs.pop("skrull_layout", None)
        if gpu is not None and gpu.schedule is not None and gpu.schedule.passes:
            return self._passes_loss(model, inputs, gpu, *args, **kwargs)
        if gpu is not None:
            inputs["skrull_attention"] = SkrullAttention(gpu, self._ring_groups)
        return super().compute_loss(model, inputs, *args, **kwargs)  # type: ignore[misc]

    def _passes_loss(self, model: torch.nn.Module, inputs: dict[str, Any], gpu: Any,
                     *args: Any, **kwargs: Any) -> Any:
        """A micro-batch with chunk passes: the Trainer's ``compute_loss`` of each pass's rows
        (the local and sharded rows, then every chunk pass), summed into one graph by
        ``MicroBatchPasses.loss`` (the first ``count - K`` chunk passes recomputed in the
        backward pass); the Trainer's one ``backward`` runs ChunkFlow's schedule."""
        if kwargs.get("return_outputs") or (args and args[0]):
            raise NotImplementedError("SkrullTrainer: a micro-batch with chunk passes has no "
                                      "single model output (return_outputs=True)")
        parent = super().compute_loss  # type: ignore[misc]
        schedule = gpu.schedule
        passes = MicroBatchPasses(schedule, self._ring_groups)
        pad = self.skrull.pad_token_id
        # DDP: the micro-batch's first forward goes through the DDP module (it prepares the
        # gradient reduction and broadcasts buffers over the job, once per micro-batch on
        # every rank); every other pass, and every recomputation in the backward pass, goes
        # to the module inside it, so no rank runs a job-wide collective the others do not.
        inner = model.module if isinstance(model, DistributedDataParallel) else model
        forwards = [model]

        def run(start: int, stop: int, attention: Any, layered: bool) -> torch.Tensor:
            part = _rows(inputs, start, stop, pad)
            part["skrull_attention"] = PassAttention(attention, stop - start, layered=layered)
            loss: torch.Tensor = parent(forwards.pop() if forwards else inner, part, *args,
                                        **kwargs)
            return loss
        return passes.loss(lambda att: run(0, schedule.tokens, att, False),
                           lambda p, att: run(p.offset, p.offset + p.tokens, att, True))


def check_training_setup(model: Any, args: Any, cfg: SkrullConfig) -> None:
    """The guards of ``SkrullTrainerMixin``: raises on a setup that would train wrongly,
    warns on one that trains less exactly.

    Parameters
    ----------
    model : Any
        The model (its ``config._attn_implementation`` is read).
    args : TrainingArguments
        Read: ``average_tokens_across_devices``, ``bf16``, ``fp16``, ``world_size``,
        ``use_cache``.
    cfg : SkrullConfig
        The skrull settings.

    Raises
    ------
    ValueError
        ``cp > 1`` or chunking on with an attention other than ``"skrull"``; ``cp > 1``
        with ``average_tokens_across_devices=False``; ``exact=True`` with bf16/fp16; a world size
        that is not a multiple of ``cp``; a negative ``calibrate_every``.

    Warns
    -----
    UserWarning
        ``bf16=True`` without ``exact``; ``use_cache=True`` (turned off in training).

    Example
    -------
    >>> from types import SimpleNamespace
    >>> from skrull.hf import SkrullConfig, check_training_setup
    >>> args = SimpleNamespace(average_tokens_across_devices=True, bf16=True, fp16=False,
    ...                        world_size=1, use_cache=False)
    >>> check_training_setup(None, args, SkrullConfig(bucket_tokens=64, exact=True))
    Traceback (most recent call last):
    ...
    ValueError: SkrullConfig(exact=True) with bf16/fp16 mixed precision: ...
    """
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if cfg.cp > 1 and attention != ATTENTION_NAME:
        raise ValueError(
            f"cp = {cfg.cp} needs the model built with attn_implementation='{ATTENTION_NAME}' "
            f"(it uses {attention!r}): a CP buffer holds zigzag chunks whose position jumps "
            "transformers' own attention would read as sequence starts")
    if chunking_on(cfg) and attention != ATTENTION_NAME:
        raise ValueError(
            f"chunking (chunk_size or the chunkflow policy) needs the model built with "
            f"attn_implementation='{ATTENTION_NAME}' (it uses {attention!r}): a chunk attends "
            "to the K/V state of the chunks before it, which only skrull's attention keeps")
    if cfg.cp > 1 and not args.average_tokens_across_devices:
        raise ValueError("cp > 1 needs average_tokens_across_devices=True: the loss is "
                         "normalised by the label tokens of all DP x CP ranks")
    half = bool(args.bf16 or args.fp16)
    if cfg.exact and half:
        raise ValueError("SkrullConfig(exact=True) with bf16/fp16 mixed precision: pass "
                         "bf16=False (TRL's SFTConfig defaults to bf16=True)")
    if args.bf16 and not cfg.exact:
        warnings.warn("bf16=True (TRL's SFTConfig default): losses differ from float32 "
                      "training by bf16 rounding; pass bf16=False for float exactness",
                      stacklevel=3)
    if isinstance(cfg.calibrate_every, bool) or not isinstance(cfg.calibrate_every, int) \
            or cfg.calibrate_every < 0:
        raise ValueError(f"SkrullConfig(calibrate_every={cfg.calibrate_every!r}): 0 (off) or "
                         "a positive number of steps between refits")
    world = max(1, args.world_size)
    if cfg.cp < 1 or world % cfg.cp:
        raise ValueError(f"world size {world} is not a multiple of cp = {cfg.cp}")
    if args.use_cache:
        warnings.warn("use_cache=True: SkrullTrainer turns the cache off in every training "
                      "forward (a cache disables transformers' packed-sequence detection)",
                      stacklevel=3)


class SkrullTrainer(SkrullTrainerMixin, Trainer):
    """``Trainer`` on skrull plans (``SkrullTrainerMixin``), with ``SkrullCollator`` as the
    default ``data_collator``.

    Parameters
    ----------
    *args, **kwargs
        ``transformers.Trainer``'s arguments; ``data_collator`` defaults to
        ``SkrullCollator(skrull.pad_token_id)``.
    skrull : SkrullConfig
        How global batches are planned (keyword only).

    Raises
    ------
    ValueError
        A guard of ``check_training_setup``.

    Example
    -------
    ``train()`` is skipped as a doctest: it runs optimizer steps (with ``cp > 1``, under
    ``torchrun`` with a process group of DP x CP ranks).

    >>> import torch, transformers
    >>> from skrull.hf import SkrullConfig, SkrullTrainer
    >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...                                   num_hidden_layers=1, num_attention_heads=2,
    ...                                   use_cache=False, attn_implementation="skrull")
    >>> model = transformers.LlamaForCausalLM(config)
    >>> data = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 4, 6)]
    >>> args = transformers.TrainingArguments("out", use_cpu=True, report_to=[],
    ...                                       per_device_train_batch_size=2, max_steps=1)
    >>> trainer = SkrullTrainer(model=model, args=args, train_dataset=data,
    ...                         skrull=SkrullConfig(bucket_tokens=16))
    >>> type(trainer.data_collator).__name__
    'SkrullCollator'
    >>> trainer.train()                                  # doctest: +SKIP
    """

    def __init__(self, *args: Any, skrull: SkrullConfig, **kwargs: Any) -> None:
        if kwargs.get("data_collator") is None:
            kwargs["data_collator"] = SkrullCollator(skrull.pad_token_id)
        super().__init__(*args, skrull=skrull, **kwargs)
