"""``SkrullDeepSpeed``: skrull plans in a raw ``deepspeed.initialize`` loop."""

from __future__ import annotations

import copy
import pickle
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from .._errors import BatchError
from .._plan import Plan, refuse_chunked
from .._scheduler import Scheduler
from ._groups import SequenceParallelGroups
from ._loader import Step, collate_hf, epoch_order, label_count
from ._settings import Engine, check_cp_support, check_scheduler_settings, scheduling_settings

#: DeepSpeed config keys ``SkrullDeepSpeed.config`` fills (``"auto"`` or absent in yours).
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
              "train_batch_size")


class SkrullDeepSpeed:
    """Plans every global batch of a DeepSpeed run and drives the engine the way plans need.

    Build it on every rank after ``deepspeed.init_distributed()`` and before
    ``deepspeed.initialize``, with the DeepSpeed config you would pass there; then pass its
    ``config`` and ``mpu`` to ``initialize``, iterate ``steps(dataset)``, and end every
    micro-batch with ``backward``::

        sk = SkrullDeepSpeed(ds_config, lengths, global_batch_size=64, bucket_tokens=16384,
                             cp=2, scheduler={"policy": "balanced"})
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                          config=sk.config, mpu=sk.mpu)
        for step in sk.steps(dataset):
            for mb in step:
                sk.backward(engine, engine(**mb).loss, mb)

    What it takes care of:

    - **Micro-batch counts the engine can run.** The engine's ZeRO stage decides
      (``scheduling_settings``): under ZeRO-2/3 every DP rank runs the same count ``G`` (a
      fixed ``micro_batches=G``, or with ``"auto"`` the most any planned step needs), written
      into ``config`` as ``gradient_accumulation_steps`` before ``initialize``; under
      ZeRO-0/1 with ``"managed_gradient_accumulation": false`` each DP rank runs as many as
      its sequences need. Asking for unequal counts where the engine would hang on them
      raises ``ValueError`` on every rank here, before any step.
    - **Batches.** The same shuffled global batches on every rank as ``SkrullTrainer``
      (``seed + epoch``), one plan each (identical everywhere: nothing is broadcast), this
      GPU's micro-batches collated as the Trainer collates them, and the global batch's label
      tokens (``num_items_in_batch``), counted from the samples on every rank: no collective.
    - **Backward and step.** ``backward`` multiplies the loss by the size DeepSpeed divides
      reduced gradients by, calls ``engine.backward(loss, scale_wrt_gas=False)`` (the default
      would divide by ``G`` again), marks the accumulation boundary on the step's last
      micro-batch (``set_gradient_accumulation_boundary``) and calls ``engine.step()``.
    - **CP ranks.** With ``cp > 1`` they are declared to DeepSpeed as its sequence-parallel
      dimension (``mpu``, a ``SequenceParallelGroups``), so its DP size and batch
      bookkeeping exclude them; the attention's CP rings (sub-groups included) are skrull's.
    - **Checkpoints.** ``save_checkpoint`` / ``load_checkpoint`` keep the position in the
      data and the scheduler's refit state beside the engine's (``client_state``), so a
      resumed run yields the same remaining batches and plans.

    Parameters
    ----------
    ds_config : mapping
        The DeepSpeed config. Its batch keys (``BATCH_KEYS``) must be absent, ``"auto"`` or
        equal to what the plans need (one packed micro-batch per GPU).
    lengths : sequence of int
        Token count of every dataset sample.
    global_batch_size : int
        Samples per optimizer step, over all DP ranks.
    bucket_tokens : int
        The most tokens one GPU holds in one micro-batch.
    cp : int, optional
        CP ranks per DP rank (default 1); ranks are laid out ``dp_rank * cp + cp_rank`` and
        DP is the world size // ``cp``.
    micro_batches : int or str, optional
        ``G`` (every DP rank runs exactly ``G`` per step), ``"auto"`` (default: the engine
        decides, see above) or ``"unequal"`` (refused unless the engine allows it).
    epochs : int, optional
        How many epochs ``steps`` runs, and ``"auto"`` sizes ``G`` for (default 1).
    max_steps : int, optional
        Stop after this many steps in all (default: ``epochs`` epochs).
    scheduler : dict, optional
        Further ``skrull.Scheduler`` arguments (``policy``, ``model``, ``cost_model``,
        ``shard_padding``, ``subgroups``...); ``shard_padding`` defaults to ``"zigzag"``
        with ``cp > 1``.
    seed : int, optional
        Shuffle seed, the same on every rank (default 42, as the Trainer's).
    shuffle : bool, optional
        Shuffle per epoch (default True).
    pad_token_id : int, optional
        Token id of padding (default 0).
    collate : callable, optional
        ``collate(dataset, cp, pad_token_id, ring_groups)`` -> ``fn(step, micro_batch)``
        giving the model's keyword arguments; default ``collate_hf`` (HF causal LMs; with
        ``cp > 1`` the model needs ``attn_implementation="skrull"``).
    calibrate_every : int, optional
        0 (default): off. ``k > 0``: ``train_step`` times every micro-batch, gathers each
        step's times over the job and refits the cost model every ``k`` steps
        (``skrull.torch.OnlineCalibration``, as ``calibration``).
    device : torch.device or str, optional
        Where the micro-batches run: their tensors are moved there, and ``calibrate_every``
        times them there (CUDA events on a CUDA device, the monotonic clock otherwise).
        Default: the current CUDA device when CUDA is available, else the CPU.
    dp, rank : int, optional
        World size // ``cp`` and this process's rank; default from ``torch.distributed``.

    Raises
    ------
    ValueError
        A setting the engine cannot run (``scheduling_settings``), a ``scheduler`` key this
        class sets itself, a batch key of ``ds_config`` that contradicts the plans, a world
        size that is not a multiple of ``cp``, ZeRO-3 with ``reduce_scatter`` off and
        ``cp > 1``, or (``"auto"``) a global batch that needs more micro-batches than
        ``micro_batches`` (the message names the count that fits).

    Example
    -------
    Without a process group (DP 1, CP 1), on ZeRO-2's settings:

    >>> from skrull.deepspeed import SkrullDeepSpeed
    >>> data = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 4, 6, 2, 7)]
    >>> sk = SkrullDeepSpeed({"zero_optimization": {"stage": 2}}, [5, 3, 4, 6, 2, 7],
    ...                      global_batch_size=3, bucket_tokens=10, dp=1, rank=0)
    >>> sk.micro_batches, sk.config["gradient_accumulation_steps"], sk.mpu
    (2, 2, None)
    >>> [(s.index, len(s), s.label_tokens) for s in sk.steps(data)]
    [(0, 2, 12), (1, 2, 9)]
    """

    def __init__(self, ds_config: Mapping[str, Any], lengths: Sequence[int],
                 global_batch_size: int, bucket_tokens: int, *, cp: int = 1,
                 micro_batches: Union[int, str] = "auto", epochs: int = 1,
                 max_steps: Optional[int] = None, scheduler: Optional[Mapping[str, Any]] = None,
                 seed: int = 42, shuffle: bool = True, pad_token_id: int = 0,
                 collate: Optional[Callable[..., Any]] = None, calibrate_every: int = 0,
                 device: Any = None, dp: Optional[int] = None,
                 rank: Optional[int] = None) -> None:
        settings = dict(scheduler or {})
        check_scheduler_settings(settings)
        check_cp_support(ds_config, cp)
        if cp > 1:
            settings.setdefault("shard_padding", "zigzag")
        self.engine = Engine.from_config(ds_config)
        self.lengths = np.asarray(lengths, np.int64)
        self.global_batch_size, self.bucket_tokens, self.cp = global_batch_size, bucket_tokens, cp
        self.epochs, self.max_steps, self.seed, self.shuffle = epochs, max_steps, seed, shuffle
        self.pad_token_id = pad_token_id
        self._collate_factory = collate or collate_hf
        world, global_rank = _world()
        if dp is None:
            if cp < 1 or world % cp:
                raise ValueError(f"world size {world} is not a multiple of cp = {cp}")
            dp = world // cp
        self.dp = dp
        self.rank = global_rank if rank is None else rank
        self.dp_rank, self.cp_rank = self.rank // cp, self.rank % cp
        if global_batch_size < 1 or len(self.lengths) < global_batch_size:
            raise ValueError(f"global_batch_size = {global_batch_size}: between 1 and the "
                             f"{len(self.lengths)} samples")
        self.batches_per_epoch = len(self.lengths) // global_batch_size
        planned = scheduling_settings(self.engine, micro_batches)
        if planned.get("lockstep"):
            # "auto" with equal counts: G is the most any planned step needs.
            sizing = Scheduler(dp, cp, bucket_tokens, **planned, **settings)
            needed = max(sizing.plan(self.lengths[idx]).num_micro_batches
                         for _, _, idx in self._batches(0, 0))
            planned = scheduling_settings(self.engine, max(needed, 1))
        self.scheduler = Scheduler(dp, cp, bucket_tokens, **planned, **settings)
        #: Micro-batches per DP rank and step: ``G``, or None for unequal counts.
        self.micro_batches: Optional[int] = planned.get("micro_batches")
        self.config = self._ds_config(ds_config)
        self.epoch, self.step_in_epoch, self.steps_done = 0, 0, 0
        self.mpu: Optional[SequenceParallelGroups] = None
        self.ring_groups: Any = None
        if cp > 1:
            from ..torch import cp_ring_groups
            self.mpu = SequenceParallelGroups(cp)
            self.ring_groups = cp_ring_groups(dp, cp, whole=self.mpu.cp_group)
        if device is None:
            import torch
            device = torch.device("cuda", torch.cuda.current_device()) \
                if torch.cuda.is_available() else torch.device("cpu")
        self.device = device
        self.calibration: Any = None
        if calibrate_every:
            from ..torch import OnlineCalibration
            self.calibration = OnlineCalibration(self.scheduler, every=calibrate_every,
                                                 device=device)
        self._label_counts: dict[int, int] = {}
        self._checked: Any = None

    def _ds_config(self, ds_config: Mapping[str, Any]) -> dict[str, Any]:
        """``ds_config`` with one packed micro-batch per GPU, ``G`` accumulation steps (1 with
        unequal counts: DeepSpeed then counts nothing by it) and ``G x dp`` per step."""
        config = copy.deepcopy(dict(ds_config))
        g = self.micro_batches or 1
        want = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": g,
                "train_batch_size": g * self.dp}
        for key, value in want.items():
            given = config.get(key, "auto")
            if given != "auto" and given != value:
                raise ValueError(
                    f"ds_config[{key!r}] = {given!r}, but the plans need {value}: one packed "
                    f"micro-batch per GPU, {g} micro-batch{'es' if g > 1 else ''} per DP rank "
                    f"and step, {self.dp} DP rank{'s' if self.dp > 1 else ''}; leave it out "
                    "or 'auto'")
            config[key] = value
        return config

    def _batches(self, epoch: int, index: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(epoch, index, dataset indices)`` of every global batch from ``(epoch, index)``
        to the end of the run."""
        done = epoch * self.batches_per_epoch + index
        while epoch < self.epochs:
            order = epoch_order(len(self.lengths), self.seed, epoch, self.shuffle)
            for b in range(index, self.batches_per_epoch):
                if self.max_steps is not None and done >= self.max_steps:
                    return
                yield epoch, b, np.asarray(order[b * self.global_batch_size:
                                                 (b + 1) * self.global_batch_size], np.int64)
                done += 1
            epoch, index = epoch + 1, 0

    def plan(self, indices: Sequence[int] | np.ndarray) -> Plan:
        """The plan of one global batch, checked for this engine.

        Parameters
        ----------
        indices : sequence of int
            Dataset indices of the batch.

        Returns
        -------
        Plan

        Raises
        ------
        ValueError
            A batch that needs more than ``micro_batches`` micro-batches on some DP rank (the
            message names the count that fits), or counts that differ between DP ranks on an
            engine that cannot run them. Plans are identical on every rank, so every rank
            raises before the step.
        NotImplementedError
            A chunked sequence (chunking on): the executor cannot run chunks yet.

        Example
        -------
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> sk = SkrullDeepSpeed({}, [5, 3, 4, 6], global_batch_size=2, bucket_tokens=8,
        ...                      micro_batches=1, dp=1, rank=0)
        >>> sk.plan([0, 1]).micro_batches_per_dp.tolist()
        [1]
        >>> sk.plan([0, 3])
        Traceback (most recent call last):
        ...
        ValueError: this global batch needs 2 micro-batches on some DP rank, ...
        """
        lengths = self.lengths[np.asarray(indices, np.int64)]
        try:
            plan = self.scheduler.plan(lengths)
        except BatchError as exc:
            if exc.status != "MICRO_BATCH_COUNT":
                raise
            raise ValueError(
                f"this global batch needs {exc.value} micro-batches on some DP rank, more than "
                f"micro_batches = {self.micro_batches}: raise micro_batches (and so the "
                f"engine's gradient_accumulation_steps) to at least {exc.value}, raise "
                "bucket_tokens, or lower the global batch size") from exc
        refuse_chunked(plan, "skrull.deepspeed")
        counts = plan.micro_batches_per_dp
        if not self.engine.allows_unequal_counts and counts.min() != counts.max():
            raise ValueError(f"DP ranks run {counts.tolist()} micro-batches in this plan; ZeRO "
                             f"stage {self.engine.zero_stage} needs the same count on every DP "
                             "rank (it would hang)")
        return plan

    def steps(self, dataset: Sequence[Any]) -> Iterator[Step]:
        """This GPU's steps from the current position (0, or where a checkpoint left off) to
        the end of the run (``epochs``, ``max_steps``).

        Parameters
        ----------
        dataset : sequence
            The samples (``dataset[i]`` of ``lengths[i]`` tokens; mappings with
            ``input_ids`` and optionally ``labels`` for the default collation).

        Yields
        ------
        Step
            One per optimizer step; iterate it for this GPU's micro-batches.

        Raises
        ------
        ValueError
            As ``plan``, or a dataset of another size than ``lengths``.

        Example
        -------
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> data = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 4, 6)]
        >>> sk = SkrullDeepSpeed({}, [5, 3, 4, 6], global_batch_size=2, bucket_tokens=8,
        ...                      epochs=2, shuffle=False, dp=1, rank=0)
        >>> [(s.epoch, s.index, s.indices.tolist()) for s in sk.steps(data)]
        [(0, 0, [0, 1]), (0, 1, [2, 3]), (1, 0, [0, 1]), (1, 1, [2, 3])]
        """
        if len(dataset) != len(self.lengths):
            raise ValueError(f"the dataset has {len(dataset)} samples, lengths "
                             f"{len(self.lengths)}")
        collate = _placed(self._collate_factory(dataset, self.cp, self.pad_token_id,
                                                self.ring_groups), self.device)
        for epoch, index, idx in self._batches(self.epoch, self.step_in_epoch):
            labels = sum(self._labels(dataset, int(i)) for i in idx)
            step = Step(epoch, index, idx, self.plan(idx), labels, self.dp_rank, self.cp_rank,
                        collate)
            yield step
            self._advance(step)

    def _labels(self, dataset: Sequence[Any], i: int) -> int:
        count = self._label_counts.get(i)
        if count is None:
            count = self._label_counts[i] = label_count(dataset[i])
        return count

    def _advance(self, step: Step) -> None:
        """Marks ``step`` done (once): the position moves past it."""
        after = (step.epoch, step.index + 1)
        if after > (self.epoch, self.step_in_epoch):
            self.epoch, self.step_in_epoch = after
            if self.step_in_epoch == self.batches_per_epoch:
                self.epoch, self.step_in_epoch = self.epoch + 1, 0
            self.steps_done += 1

    def loss_scale(self, engine: Any) -> float:
        """What ``backward`` multiplies the loss by: the size DeepSpeed divides reduced
        gradients by, so that gradients are those of the loss summed over all ranks (each
        rank's loss is its tokens' share of the global batch's mean). ZeRO-0/1/2 divide by the
        DP size (all ranks // the sequence-parallel size); ZeRO-3 reduce-scatters over all
        ranks and divides by all of them, sequence-parallel ranks included (measured: with
        DP size as the scale, DP 1 x CP 2 gradients came out exactly half).

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine ``deepspeed.initialize`` returned.

        Returns
        -------
        float

        Example
        -------
        >>> from types import SimpleNamespace
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> engine = SimpleNamespace(seq_dp_world_size=4, sequence_parallel_size=2)
        >>> for stage in (2, 3):
        ...     sk = SkrullDeepSpeed({"zero_optimization": {"stage": stage}}, [5, 3],
        ...                          global_batch_size=2, bucket_tokens=8, dp=1, rank=0)
        ...     print(stage, sk.loss_scale(engine))
        2 2.0
        3 4.0
        """
        world = float(getattr(engine, "seq_dp_world_size", None) or self.dp * self.cp)
        if self.engine.zero_stage == 3:
            return world
        return world / float(getattr(engine, "sequence_parallel_size", 1) or 1)

    def check_engine(self, engine: Any) -> None:
        """Checks once that the engine runs what the plans were made for: its ZeRO stage and
        accumulation mode, ``G`` and the sequence-parallel size (``backward`` calls it).

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine ``deepspeed.initialize`` returned.

        Raises
        ------
        ValueError
            A mismatch (another config or mpu than this object's was given to
            ``initialize``); raised on every rank at the step's first micro-batch, before its
            backward.

        Example
        -------
        >>> from types import SimpleNamespace
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> sk = SkrullDeepSpeed({"zero_optimization": {"stage": 2}}, [5, 3],
        ...                      global_batch_size=2, bucket_tokens=8, dp=1, rank=0)
        >>> engine = SimpleNamespace(zero_optimization_stage=lambda: 1,
        ...                          managed_gradient_accumulation=lambda: True,
        ...                          gradient_accumulation_steps=lambda: 1,
        ...                          sequence_parallel_size=1)
        >>> sk.check_engine(engine)
        Traceback (most recent call last):
        ...
        ValueError: the engine runs ZeRO stage 1, the plans were made for stage 2: ...
        """
        if self._checked is engine:
            return
        stage = int(engine.zero_optimization_stage())
        managed = bool(engine.managed_gradient_accumulation())
        fix = "pass SkrullDeepSpeed.config (and .mpu) to deepspeed.initialize"
        if stage != self.engine.zero_stage:
            raise ValueError(f"the engine runs ZeRO stage {stage}, the plans were made for "
                             f"stage {self.engine.zero_stage}: {fix}")
        if managed != self.engine.managed:
            raise ValueError(f"the engine's managed_gradient_accumulation is {managed}, the "
                             f"plans were made for {self.engine.managed}: {fix}")
        g = self.micro_batches or 1
        if int(engine.gradient_accumulation_steps()) != g:
            raise ValueError(f"the engine accumulates {engine.gradient_accumulation_steps()} "
                             f"micro-batches per step, the plans run {g}: {fix}")
        sp = int(getattr(engine, "sequence_parallel_size", 1) or 1)
        if sp != self.cp:
            raise ValueError(f"the engine's sequence-parallel size is {sp}, cp is {self.cp}: "
                             f"{fix}")
        self._checked = engine

    def backward(self, engine: Any, loss: Any, micro_batch: Any) -> Any:
        """Backward of one micro-batch and, on the step's last, the optimizer step.

        Multiplies ``loss`` by ``loss_scale(engine)``, marks the accumulation boundary on the
        last micro-batch (managed accumulation), calls ``engine.backward(loss,
        scale_wrt_gas=False)`` and ``engine.step()`` (every micro-batch under managed
        accumulation, where only the boundary updates; the last one otherwise).

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine.
        loss : torch.Tensor
            The micro-batch's loss: its summed token losses over the step's
            ``num_items_in_batch`` (what an HF model returns given ``**micro_batch``).
        micro_batch : MicroBatch
            The micro-batch (from iterating a ``Step``).

        Returns
        -------
        torch.Tensor
            ``loss``, detached (this GPU's share of the global batch's mean loss: summed over
            every micro-batch and rank it gives the step's loss).

        Raises
        ------
        ValueError
            ``check_engine`` found a mismatch.

        Example
        -------
        Needs an engine (python/tests/test_deepspeed.py runs it).

        >>> for step in sk.steps(dataset):                               # doctest: +SKIP
        ...     for mb in step:
        ...         sk.backward(engine, engine(**mb).loss, mb)
        """
        self.check_engine(engine)
        managed = self.engine.managed
        if managed:
            engine.set_gradient_accumulation_boundary(micro_batch.last)
        engine.backward(loss * self.loss_scale(engine), scale_wrt_gas=False)
        if managed or micro_batch.last:
            engine.step()
        if micro_batch.last and micro_batch.step is not None:
            self._advance(micro_batch.step)
        return loss.detach()

    def train_step(self, engine: Any, step: Step,
                   forward: Optional[Callable[[Any, MicroBatchLike], Any]] = None) -> float:
        """Every micro-batch of ``step``: forward, ``backward``, the optimizer step; with
        ``calibrate_every``, each micro-batch timed and the step's times observed (a
        collective: every rank calls it).

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine.
        step : Step
            From ``steps``.
        forward : callable, optional
            ``forward(engine, micro_batch)`` -> the loss; default ``engine(**mb).loss``.

        Returns
        -------
        float
            This GPU's summed loss (sum it over all ranks for the step's loss).

        Example
        -------
        Needs an engine (python/tests/test_deepspeed.py runs it).

        >>> for step in sk.steps(dataset):                               # doctest: +SKIP
        ...     sk.train_step(engine, step)
        """
        call = forward or _hf_forward
        total = 0.0
        online = self.calibration
        for mb in step:
            if online is not None:
                with online.time():
                    loss = self.backward(engine, call(engine, mb), mb)
            else:
                loss = self.backward(engine, call(engine, mb), mb)
            total += float(loss)
        if online is not None:
            online.step(step.plan)
        return total

    def state_dict(self) -> dict[str, Any]:
        """Where the run is and what plans depend on besides the data: the position (epoch,
        global batch within it, steps done), seed, ``G``, and the scheduler (its cost model,
        refitted or not, and its refit window) pickled.

        Returns
        -------
        dict
            ``load_state_dict`` takes it; ``save_checkpoint`` stores it in the engine's
            checkpoint under ``client_state["skrull"]``.

        Example
        -------
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> sk = SkrullDeepSpeed({}, [5, 3, 4, 6], global_batch_size=2, bucket_tokens=8,
        ...                      dp=1, rank=0)
        >>> state = sk.state_dict()
        >>> state["epoch"], state["step_in_epoch"], state["seed"], state["micro_batches"]
        (0, 0, 42, 2)
        """
        return {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch,
                "steps_done": self.steps_done, "seed": self.seed,
                "micro_batches": self.micro_batches,
                "scheduler": pickle.dumps(self.scheduler)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()``: the next ``steps`` continues where it stopped, with the
        scheduler's cost model and refit window as they were.

        Parameters
        ----------
        state : mapping
            From ``state_dict``.

        Raises
        ------
        ValueError
            A state of another ``G`` or seed: the remaining plans would differ.

        Example
        -------
        >>> from skrull.deepspeed import SkrullDeepSpeed
        >>> sk = SkrullDeepSpeed({}, [5, 3, 4, 6], global_batch_size=2, bucket_tokens=8,
        ...                      dp=1, rank=0)
        >>> state = sk.state_dict() | {"step_in_epoch": 1, "steps_done": 1}
        >>> sk.load_state_dict(state)
        >>> [s.index for s in sk.steps([{"input_ids": [1] * n} for n in (5, 3, 4, 6)])]
        [1]
        """
        for key in ("micro_batches", "seed"):
            if state[key] != getattr(self, key):
                raise ValueError(f"the checkpoint's {key} is {state[key]!r}, this run's "
                                 f"{getattr(self, key)!r}: build SkrullDeepSpeed as the saved "
                                 "run was")
        self.epoch, self.step_in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
        self.steps_done = int(state["steps_done"])
        self.scheduler = pickle.loads(state["scheduler"])
        if self.calibration is not None:
            self.calibration.scheduler = self.scheduler

    def save_checkpoint(self, engine: Any, save_dir: str, tag: Any = None,
                        client_state: Optional[Mapping[str, Any]] = None,
                        **kwargs: Any) -> Any:
        """``engine.save_checkpoint`` with ``state_dict()`` in ``client_state["skrull"]`` (a
        collective: every rank calls it).

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine.
        save_dir : str
            As ``engine.save_checkpoint``.
        tag : optional
            As ``engine.save_checkpoint``.
        client_state : mapping, optional
            Your own state, saved beside skrull's.
        **kwargs
            Passed on.

        Returns
        -------
        Any
            What ``engine.save_checkpoint`` returns.

        Example
        -------
        >>> sk.save_checkpoint(engine, "ckpt")                           # doctest: +SKIP
        """
        state = dict(client_state or {})
        state["skrull"] = self.state_dict()
        return engine.save_checkpoint(save_dir, tag=tag, client_state=state, **kwargs)

    def load_checkpoint(self, engine: Any, load_dir: str, tag: Any = None,
                        **kwargs: Any) -> tuple[Any, Any]:
        """``engine.load_checkpoint``, then ``load_state_dict`` of the saved skrull state.

        Parameters
        ----------
        engine : DeepSpeedEngine
            The engine (built as the saved one was).
        load_dir : str
            As ``engine.load_checkpoint``.
        tag : optional
            As ``engine.load_checkpoint``.
        **kwargs
            Passed on.

        Returns
        -------
        tuple
            ``(load_path, client_state)`` as ``engine.load_checkpoint`` returns them.

        Raises
        ------
        ValueError
            No checkpoint was found, or it holds no skrull state.

        Example
        -------
        >>> path, client_state = sk.load_checkpoint(engine, "ckpt")      # doctest: +SKIP
        """
        path, client = engine.load_checkpoint(load_dir, tag=tag, **kwargs)
        if path is None:
            raise ValueError(f"no DeepSpeed checkpoint in {load_dir}")
        if not client or "skrull" not in client:
            raise ValueError(f"the checkpoint {path} holds no skrull state (saved without "
                             "SkrullDeepSpeed.save_checkpoint)")
        self.load_state_dict(client["skrull"])
        return path, client


MicroBatchLike = Mapping[str, Any]


def _placed(collate: Callable[[Step, int], Any], device: Any) -> Callable[[Step, int], Any]:
    """``collate`` with every tensor of its result moved to ``device`` (none for the CPU)."""
    import torch
    if torch.device(device).type == "cpu":
        return collate

    def moved(step: Step, m: int) -> Any:
        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                for k, v in collate(step, m).items()}
    return moved


def _hf_forward(engine: Any, micro_batch: MicroBatchLike) -> Any:
    return engine(**micro_batch).loss


def _world() -> tuple[int, int]:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
