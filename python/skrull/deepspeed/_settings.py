"""What a DeepSpeed engine lets plans do: its ZeRO stage and accumulation mode read from its
config, mapped to ``skrull.Scheduler`` settings by one function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Union

#: ``micro_batches`` values other than a count: ``"auto"`` lets the engine decide, ``"unequal"``
#: asks for a count per DP rank (ZeRO-0/1 with unmanaged accumulation only).
MICRO_BATCH_MODES = ("auto", "unequal")
#: ``Scheduler`` settings ``skrull.deepspeed`` owns (refused in ``scheduler=``).
OWNED_SETTINGS = ("dp", "cp", "bucket_tokens", "micro_batches", "lockstep", "fill_empty")


@dataclass(frozen=True)
class Engine:
    """What the engine's config says about synchronisation.

    Parameters
    ----------
    zero_stage : int
        ``zero_optimization.stage`` (0 when absent).
    managed : bool
        ``managed_gradient_accumulation`` (DeepSpeed's default, True: the engine counts
        micro-batches; False: the caller's ``step()`` is the accumulation boundary).

    Example
    -------
    >>> from skrull.deepspeed import Engine
    >>> Engine.from_config({"zero_optimization": {"stage": 2}})
    Engine(zero_stage=2, managed=True)
    >>> Engine(1, managed=False).allows_unequal_counts
    True
    """

    zero_stage: int
    managed: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Engine:
        """Reads a DeepSpeed config dict.

        Parameters
        ----------
        config : mapping
            The dict given to ``deepspeed.initialize(config=...)``.

        Returns
        -------
        Engine

        Raises
        ------
        ValueError
            A ZeRO stage that is not 0, 1, 2 or 3, or a non-boolean
            ``managed_gradient_accumulation``.

        Example
        -------
        >>> from skrull.deepspeed import Engine
        >>> Engine.from_config({"zero_optimization": {"stage": 1},
        ...                     "managed_gradient_accumulation": False})
        Engine(zero_stage=1, managed=False)
        """
        zero = config.get("zero_optimization") or {}
        stage = zero.get("stage", 0) if isinstance(zero, Mapping) else 0
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_optimization.stage = {stage!r}: DeepSpeed has ZeRO stages "
                             "0, 1, 2 and 3")
        managed = config.get("managed_gradient_accumulation", True)
        if not isinstance(managed, bool):
            raise ValueError(f"managed_gradient_accumulation = {managed!r}: true or false")
        return cls(int(stage), managed)

    @property
    def allows_unequal_counts(self) -> bool:
        """Whether DP ranks may run different numbers of micro-batches in one step: only
        ZeRO-0/1 with unmanaged accumulation, where ``backward`` runs no collective and
        ``step()`` reduces once. ZeRO-2/3 reduce (and ZeRO-3 gathers) at every micro-batch;
        managed accumulation finds its boundary by counting micro-batches."""
        return self.zero_stage <= 1 and not self.managed

    @property
    def sync(self) -> str:
        """Which ranks each micro-batch waits for: ``"every-gpu"`` under ZeRO-2/3 (every
        backward is a collective of the whole job), ``"sharded"`` under ZeRO-0/1 (ranks meet
        only in a sharded sequence's CP ring and at the step's reduction, as DDP under
        ``no_sync``)."""
        return "every-gpu" if self.zero_stage >= 2 else "sharded"


def scheduling_settings(engine: Engine,
                        micro_batches: Union[int, str] = "auto") -> dict[str, Any]:
    """The ``skrull.Scheduler`` settings plans need to run on ``engine``: the one mapping from
    the engine's ZeRO stage and accumulation mode to what plans may do.

    - ZeRO-2/3 (and managed accumulation): every DP rank runs the same count, a fixed ``G``
      (``micro_batches=G``: empty slots filled by splitting multi-sequence micro-batches)
      or, before ``G`` is known, the lockstep count (``lockstep=True, fill_empty=True``);
    - ZeRO-0/1 with unmanaged accumulation: each DP rank runs as many as its sequences need
      (``"auto"`` or ``"unequal"``), or a fixed ``G``.

    And always the engine's synchronisation (``sync=Engine.sync``: ``"every-gpu"`` under
    ZeRO-2/3, ``"sharded"`` otherwise), which ``balanced`` plans for.

    Parameters
    ----------
    engine : Engine
        The engine's stage and accumulation mode.
    micro_batches : int or str, optional
        ``G`` (a fixed count per DP rank), ``"auto"`` (default: unequal counts where the
        engine allows them, else lockstep) or ``"unequal"``.

    Returns
    -------
    dict
        Keyword arguments for ``skrull.Scheduler`` (``micro_batches`` or ``lockstep`` and
        ``fill_empty``, none of them for unequal counts; and ``sync``).

    Raises
    ------
    ValueError
        ``"unequal"`` on an engine that cannot run it (ZeRO-2/3 hang or abort on it, managed
        accumulation splits steps in the wrong place), or a count below 1 or unknown mode.

    Example
    -------
    >>> from skrull.deepspeed import Engine, scheduling_settings
    >>> scheduling_settings(Engine(2))
    {'lockstep': True, 'fill_empty': True, 'sync': 'every-gpu'}
    >>> scheduling_settings(Engine(2), micro_batches=4)
    {'micro_batches': 4, 'sync': 'every-gpu'}
    >>> scheduling_settings(Engine(1, managed=False))
    {'sync': 'sharded'}
    >>> scheduling_settings(Engine(2), micro_batches="unequal")
    Traceback (most recent call last):
    ...
    ValueError: micro_batches='unequal' needs ZeRO stage 0 or 1 ...
    """
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, (int, str)):
        raise ValueError(f"micro_batches = {micro_batches!r}: a count, 'auto' or 'unequal'")
    settings: dict[str, Any]
    if isinstance(micro_batches, int):
        if micro_batches < 1:
            raise ValueError(f"micro_batches = {micro_batches}: at least 1 per DP rank")
        settings = {"micro_batches": micro_batches}
    elif micro_batches not in MICRO_BATCH_MODES:
        raise ValueError(f"micro_batches = {micro_batches!r}: a count, 'auto' or 'unequal'")
    elif engine.allows_unequal_counts:
        settings = {}
    elif micro_batches == "unequal":
        raise ValueError(
            f"micro_batches='unequal' needs ZeRO stage 0 or 1 with "
            f"\"managed_gradient_accumulation\": false; this engine has ZeRO stage "
            f"{engine.zero_stage}{'' if engine.zero_stage >= 2 else ' with managed accumulation'}"
            ": ZeRO-2/3 reduce gradients at every backward, so a DP rank that runs fewer "
            "micro-batches leaves the others waiting forever (a hang), and managed accumulation "
            "ends a step by counting micro-batches. Use micro_batches='auto' or a fixed count")
    else:
        settings = {"lockstep": True, "fill_empty": True}
    settings["sync"] = engine.sync
    return settings


def check_scheduler_settings(settings: Mapping[str, Any]) -> None:
    """Refuses ``scheduler=`` settings that ``skrull.deepspeed`` sets itself.

    Parameters
    ----------
    settings : mapping
        Further ``skrull.Scheduler`` arguments given by the user.

    Raises
    ------
    ValueError
        A key of ``OWNED_SETTINGS``, naming the argument to use instead.

    Example
    -------
    >>> from skrull.deepspeed import check_scheduler_settings
    >>> check_scheduler_settings({"policy": "balanced"})
    >>> check_scheduler_settings({"lockstep": True})
    Traceback (most recent call last):
    ...
    ValueError: scheduler={'lockstep': ...}: skrull.deepspeed sets lockstep itself ...
    """
    for key in OWNED_SETTINGS:
        if key in settings:
            raise ValueError(
                f"scheduler={{{key!r}: {settings[key]!r}}}: skrull.deepspeed sets {key} itself "
                "from the engine's ZeRO stage and its own arguments (dp and cp from the world "
                "size and cp=, bucket_tokens=, micro_batches=)")


def check_cp_support(config: Mapping[str, Any], cp: int) -> None:
    """Refuses a DeepSpeed config whose gradient averaging is not one number with CP ranks
    declared: ZeRO-3 with ``"reduce_scatter": false`` averages a gradient bucket that fits
    its contiguous buffer over DP ranks and the others over all ranks.

    Parameters
    ----------
    config : mapping
        The DeepSpeed config.
    cp : int
        CP ranks per DP rank.

    Raises
    ------
    ValueError
        ZeRO-3, ``reduce_scatter`` off and ``cp > 1``.

    Example
    -------
    >>> from skrull.deepspeed import check_cp_support
    >>> check_cp_support({"zero_optimization": {"stage": 3}}, cp=2)
    >>> check_cp_support({"zero_optimization": {"stage": 3, "reduce_scatter": False}}, cp=2)
    Traceback (most recent call last):
    ...
    ValueError: ZeRO-3 with "reduce_scatter": false and cp > 1: ...
    """
    zero = config.get("zero_optimization") or {}
    if cp > 1 and isinstance(zero, Mapping) and zero.get("stage") == 3 \
            and zero.get("reduce_scatter", True) is False:
        raise ValueError("ZeRO-3 with \"reduce_scatter\": false and cp > 1: DeepSpeed then "
                         "averages some gradient buckets over DP ranks and others over all "
                         "ranks; keep reduce_scatter on (the default)")
