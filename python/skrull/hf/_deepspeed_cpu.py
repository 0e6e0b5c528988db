"""``TrainingArguments(deepspeed=...)`` on a machine without a GPU: transformers builds
accelerate's ``PartialState`` without ``ddp_backend`` when DeepSpeed is on, accelerate finds no
backend for the CPU, counts one process, and DeepSpeed then refuses the batch sizes filled in
for one process (``train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step *
world_size``). ``SkrullTrainerMixin`` repairs such arguments before the Trainer reads them."""

from __future__ import annotations

import os
from typing import Any


def repair_cpu_deepspeed(args: Any) -> bool:
    """Redoes the device set-up of ``TrainingArguments`` that enable DeepSpeed on a CPU-only
    machine and saw one process where ``WORLD_SIZE`` says more: accelerate's backend choice
    gets gloo (``ddp_backend``, default gloo) for that one call, and the DeepSpeed config's
    ``"auto"`` batch sizes are filled again for the real world size. Arguments that need no
    repair are left alone (a GPU, ``use_cpu=True``, one process, no DeepSpeed).

    Parameters
    ----------
    args : TrainingArguments
        Changed in place: its device set-up, ``hf_deepspeed_config`` and
        ``deepspeed_plugin``.

    Returns
    -------
    bool
        True when it repaired them.

    Raises
    ------
    RuntimeError
        The repaired arguments still do not see ``WORLD_SIZE`` processes.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> from skrull.hf._deepspeed_cpu import repair_cpu_deepspeed
    >>> repair_cpu_deepspeed(SimpleNamespace(deepspeed=None, use_cpu=False))   # no DeepSpeed
    False
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not getattr(args, "deepspeed", None) or args.use_cpu or world <= 1 \
            or args.world_size == world:
        return False
    from deepspeed.accelerator import get_accelerator  # type: ignore[import-untyped]
    if get_accelerator().device_name() != "cpu":
        return False
    from accelerate.state import PartialState  # type: ignore[import-untyped]
    from accelerate.utils import DeepSpeedPlugin, DistributedType  # type: ignore[import-untyped]
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    original = PartialState._prepare_backend
    backend = args.ddp_backend or "gloo"

    def gloo(self: Any, cpu: bool = False, sagemaker_dp: bool = False,
             backend_arg: Any = None) -> tuple[Any, Any]:
        chosen, kind = original(self, cpu, sagemaker_dp, backend_arg)
        if kind == DistributedType.NO:
            return backend, DistributedType.MULTI_CPU
        return chosen, kind

    PartialState._prepare_backend = gloo
    try:
        args.__dict__.pop("_setup_devices", None)  # a cached_property: set up again
        args._setup_devices
    finally:
        PartialState._prepare_backend = original
    args.hf_deepspeed_config = HfTrainerDeepSpeedConfig(  # type: ignore[no-untyped-call]
        args.deepspeed)
    args.hf_deepspeed_config.trainer_config_process(args)
    args.deepspeed_plugin = DeepSpeedPlugin(hf_ds_config=args.hf_deepspeed_config)
    if args.world_size != world:
        raise RuntimeError(f"TrainingArguments(deepspeed=...) on the CPU see {args.world_size} "
                           f"process(es), WORLD_SIZE is {world}: pass use_cpu=True and "
                           "ddp_backend='gloo'")
    return True
