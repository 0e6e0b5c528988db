"""CP ranks declared to DeepSpeed as its sequence-parallel dimension, so that its DP size and
batch bookkeeping exclude them; skrull's CP rings stay skrull's."""

from __future__ import annotations

from typing import Any


class SequenceParallelGroups:
    """An ``mpu`` for ``deepspeed.initialize(mpu=...)`` that declares each DP rank's CP group
    (ranks ``dp_rank * cp .. dp_rank * cp + cp``, skrull's layout) as DeepSpeed's sequence-
    parallel group, with the same interface as DeepSpeed's own
    ``deepspeed.runtime.sequence_parallel.parallel_state_sp`` (its Ulysses groups are laid out
    the same way), but held by this object, not in module globals.

    DeepSpeed then reduces gradients over all ``dp * cp`` ranks and divides them by ``dp``
    (not ``dp * cp``), partitions ZeRO states over all ranks, and counts ``train_batch_size``
    as ``micro-batch size x gradient_accumulation_steps x dp``. Nothing of skrull's attention
    runs over these groups except the whole-group ring (``cp_ring_groups(dp, cp,
    whole=groups.cp_group)``); sub-group rings are skrull's own.

    Every rank must build it, in the same order relative to other group creations (it makes
    the groups of every DP rank, a collective).

    Parameters
    ----------
    cp : int
        CP ranks per DP rank, at least 2 (with ``cp = 1`` pass no mpu); the world size must be
        a multiple.

    Raises
    ------
    ValueError
        ``cp`` below 2 or not dividing the world size.
    RuntimeError
        No initialised ``torch.distributed`` process group.

    Example
    -------
    Needs a process group of ``dp * cp`` ranks (``torchrun``), so it is not run here.

    >>> import deepspeed                                                # doctest: +SKIP
    >>> from skrull.deepspeed import SequenceParallelGroups
    >>> deepspeed.init_distributed("gloo")                              # doctest: +SKIP
    >>> mpu = SequenceParallelGroups(cp=2)                              # doctest: +SKIP
    >>> engine, *_ = deepspeed.initialize(model=model, config=config,
    ...                                   model_parameters=model.parameters(),
    ...                                   mpu=mpu)                      # doctest: +SKIP
    >>> mpu.get_sequence_parallel_world_size()                          # doctest: +SKIP
    2
    """

    def __init__(self, cp: int) -> None:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("SequenceParallelGroups needs torch.distributed initialised "
                               "first (deepspeed.init_distributed())")
        world, rank = dist.get_world_size(), dist.get_rank()
        if cp < 2 or world % cp:
            raise ValueError(f"cp = {cp}: at least 2 and dividing the world size {world} "
                             "(with cp = 1 declare nothing: pass no mpu)")
        self.cp, self.dp = cp, world // cp
        mine = None
        for d in range(self.dp):
            group = dist.new_group(list(range(d * cp, (d + 1) * cp)))
            if d == rank // cp:
                mine = group
        self.cp_group: Any = mine
        self.world_group: Any = dist.new_group(list(range(world)))

    def initialize_sequence_parallel(self, sequence_parallel_size: int) -> None:
        """Present for DeepSpeed, which tells an SP-only mpu by this method; the groups are
        made by the constructor, so this only checks the size.

        Parameters
        ----------
        sequence_parallel_size : int
            Must equal ``cp``.

        Raises
        ------
        ValueError
            Another size.

        Example
        -------
        >>> mpu.initialize_sequence_parallel(2)                         # doctest: +SKIP
        """
        if sequence_parallel_size != self.cp:
            raise ValueError(f"these groups have cp = {self.cp}, not {sequence_parallel_size}")

    def get_sequence_parallel_group(self) -> Any:
        """This rank's CP group (DeepSpeed's sequence-parallel group).

        Returns
        -------
        process group

        Example
        -------
        >>> mpu.get_sequence_parallel_group()                           # doctest: +SKIP
        """
        return self.cp_group

    def get_sequence_data_parallel_group(self) -> Any:
        """All ranks: the group DeepSpeed reduces gradients and partitions ZeRO states over.

        Returns
        -------
        process group

        Example
        -------
        >>> mpu.get_sequence_data_parallel_group()                      # doctest: +SKIP
        """
        return self.world_group

    def get_sequence_parallel_world_size(self) -> int:
        """``cp``.

        Returns
        -------
        int

        Example
        -------
        >>> mpu.get_sequence_parallel_world_size()                      # doctest: +SKIP
        2
        """
        return self.cp

    def get_sequence_data_parallel_world_size(self) -> int:
        """``dp * cp``.

        Returns
        -------
        int

        Example
        -------
        >>> mpu.get_sequence_data_parallel_world_size()                 # doctest: +SKIP
        4
        """
        return self.cp * self.dp

    def get_sequence_parallel_rank(self) -> int:
        """This rank's CP rank.

        Returns
        -------
        int

        Example
        -------
        >>> mpu.get_sequence_parallel_rank()                            # doctest: +SKIP
        1
        """
        import torch.distributed as dist
        return int(dist.get_rank()) % self.cp

    def get_sequence_data_parallel_rank(self) -> int:
        """This rank's global rank.

        Returns
        -------
        int

        Example
        -------
        >>> mpu.get_sequence_data_parallel_rank()                       # doctest: +SKIP
        3
        """
        import torch.distributed as dist
        return int(dist.get_rank())

    # DeepSpeed's parallel_state_sp aliases model parallelism to sequence parallelism.
    get_model_parallel_rank = get_sequence_parallel_rank
    get_model_parallel_world_size = get_sequence_parallel_world_size
    get_model_parallel_group = get_sequence_parallel_group
