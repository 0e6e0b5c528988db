"""The ctypes mirror of ``include/skrull.h`` and the loaded ``libskrull``.

Every struct below lists its fields in header order with the header's names. Structs that start
with ``struct_size`` grow only at their end: to follow a new header, append the new fields to
``_fields_`` and nothing else (``struct_size`` is always ``ctypes.sizeof`` of the class). The
test ``tests/test_abi.py`` compiles a C program against the header and compares every
``sizeof`` and ``offsetof`` with these classes.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (POINTER, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint32, c_uint64,
                    c_void_p)
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: The C ABI version (``SKRULL_ABI_VERSION``) this package was written for.
ABI_VERSION = 1
#: The largest ``struct_size`` the library accepts (``SKRULL_MAX_STRUCT_SIZE``).
MAX_STRUCT_SIZE = 4096
#: ``skrull_placement.cp_rank`` of a sharded sequence (``SKRULL_SHARDED``).
SHARDED = -1
#: ``skrull_placement.cp_rank`` of a chunked sequence (``SKRULL_CHUNKED``).
CHUNKED = -2
#: ``sizeof(skrull_config)`` of ABI version 1 (``SKRULL_CONFIG_SIZE_V1``).
CONFIG_SIZE_V1 = 60
#: The largest ``skrull_config.pad_multiple`` (``SKRULL_MAX_PAD_MULTIPLE``).
MAX_PAD_MULTIPLE = 65536
#: GPU presets of ``skrull_cost_model_preset`` (``SKRULL_GPU_*``).
GPU_H100, GPU_H200 = 0, 1
#: ``skrull_cost_model.overlap`` values (``SKRULL_OVERLAP_*``).
OVERLAP_LOCAL_ATTENTION, OVERLAP_ALL_ATTENTION = 0, 1
#: Points of the attention-throughput table (``SKRULL_ATTENTION_POINTS``).
ATTENTION_POINTS = 6
#: ``sizeof(skrull_cost_model)`` of version 1 (``SKRULL_COST_MODEL_SIZE_V1``).
COST_MODEL_SIZE_V1 = 264
#: ``skrull_error_details`` bits (``SKRULL_DETAIL_VALUE``, ``SKRULL_DETAIL_LIMIT``).
DETAIL_VALUE, DETAIL_LIMIT = 1, 2
#: ``sizeof(skrull_cost_model)`` of version 2, ``sharded_sequence_s`` appended
#: (``SKRULL_COST_MODEL_SIZE_V2``).
COST_MODEL_SIZE_V2 = 272
#: ``sizeof(skrull_cost_model)`` of version 3, ``local_sequence_s`` appended
#: (``SKRULL_COST_MODEL_SIZE_V3``).
COST_MODEL_SIZE_V3 = 280
#: ``skrull_layout.micro_batch_global`` of an empty lockstep micro-batch
#: (``SKRULL_NO_MICRO_BATCH``).
NO_MICRO_BATCH = 2**32 - 1
#: The most rings one GPU's layout has (``SKRULL_MAX_RINGS``): the whole CP group and its
#: aligned sub-groups that contain the GPU.
MAX_RINGS = 8
#: ``skrull_span.chunk`` of a whole chunk of a chunked sequence on one GPU
#: (``SKRULL_WHOLE_CHUNK``).
WHOLE_CHUNK = -2
#: Coefficients the online refit fits (``SKRULL_REFIT_COEFFICIENTS``), in index order
#: (``SKRULL_REFIT_FIXED`` ... ``SKRULL_REFIT_OVERLAP``).
REFIT_COEFFICIENTS = ("fixed", "gemm", "attention", "intra_latency", "intra_bandwidth",
                      "inter_latency", "inter_bandwidth", "overlap")
#: The most steps a refit window keeps (``SKRULL_REFIT_MAX_WINDOW``).
REFIT_MAX_WINDOW = 64
#: ``skrull_refit_params.flags`` bit: never change the overlap rule
#: (``SKRULL_REFIT_KEEP_OVERLAP``).
REFIT_KEEP_OVERLAP = 1
#: ``sizeof(skrull_refit_params)`` of version 1 (``SKRULL_REFIT_PARAMS_SIZE_V1``).
REFIT_PARAMS_SIZE_V1 = 40
#: ``sizeof(skrull_refit_params)`` of version 2 (``SKRULL_REFIT_PARAMS_SIZE_V2``).
REFIT_PARAMS_SIZE_V2 = 64
#: ``sizeof(skrull_refit_report)`` of version 1 (``SKRULL_REFIT_REPORT_SIZE_V1``).
REFIT_REPORT_SIZE_V1 = 112
#: ``sizeof(skrull_refit_report)`` of version 2 (``SKRULL_REFIT_REPORT_SIZE_V2``).
REFIT_REPORT_SIZE_V2 = 184
#: ``sizeof(skrull_refit_report)`` of version 3 (``SKRULL_REFIT_REPORT_SIZE_V3``).
REFIT_REPORT_SIZE_V3 = 200
#: The refit's coefficient appended in version 2 of the report
#: (``SKRULL_REFIT_SHARDED_SEQUENCE``, ``coefficient_sharded_sequence``).
REFIT_SHARDED_SEQUENCE = "sharded_sequence"
#: The refit's coefficient appended in version 3 of the report
#: (``SKRULL_REFIT_LAST_MICRO_BATCH``, ``coefficient_last_micro_batch``, milliseconds).
REFIT_LAST_MICRO_BATCH = "last_micro_batch"
#: The refit's coefficient appended in version 3 of the report after it
#: (``SKRULL_REFIT_LOCAL_SEQUENCE``, ``coefficient_local_sequence``).
REFIT_LOCAL_SEQUENCE = "local_sequence"
#: ``skrull_refit_report.verdict`` names, by value (``SKRULL_REFIT_ADOPTED`` ...
#: ``SKRULL_REFIT_UNVALIDATED``).
REFIT_VERDICTS = ("adopted", "no-data", "not-better", "scale-only", "high-error", "unvalidated")

_u32, _i32, _u64, _i64, _f64, _usize = c_uint32, c_int32, c_uint64, c_int64, c_double, c_size_t
# Output arrays are numpy arrays; their pointer fields are plain addresses (same size and
# alignment as any data pointer), so filling a struct needs no ctypes.cast.
_ptr = c_void_p


class skrull_model_shape(ctypes.Structure):
    _fields_ = [("hidden", _u32), ("kv_hidden", _u32), ("ffn", _u32), ("layers", _u32),
                ("vocab", _u32), ("swiglu", _u32)]


class skrull_cost_model(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("attention_tile", _u32), ("peak_flops", _f64),
                ("gemm_efficiency", _f64), ("hbm_bandwidth", _f64), ("weight_bytes", _f64),
                ("weight_passes", _f64), ("attention_seqlen", _u32 * ATTENTION_POINTS),
                ("attention_fwd_flops", _f64 * ATTENTION_POINTS),
                ("attention_bwd_flops", _f64 * ATTENTION_POINTS),
                ("attention_bwd_ratio", _f64), ("kv_element_bytes", _f64), ("comm_passes", _f64),
                ("ring_step_latency_s", _f64), ("inter_node_ring_step_latency_s", _f64),
                ("intra_node_bandwidth", _f64), ("inter_node_bandwidth", _f64),
                ("gpus_per_node", _u32), ("overlap", _u32), ("kernels_per_layer", _f64),
                ("kernel_launch_s", _f64), ("micro_batch_extra_s", _f64),
                ("iteration_fixed_s", _f64),
                # appended after version 1
                ("sharded_sequence_s", _f64),
                # appended after version 2
                ("local_sequence_s", _f64)]


class skrull_config(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("dp", _u32), ("cp", _u32), ("bucket_tokens", _u32),
                ("policy", _u32), ("victim", _u32), ("flops", _u32), ("shard_padding", _u32),
                ("max_micro_batches", _u32), ("model", skrull_model_shape),
                # appended after version 1
                ("pad_multiple", _u32), ("pad_local", _u32), ("lockstep", _u32),
                ("cost_model", _ptr), ("subgroups", _u32), ("fill_empty", _u32),
                ("micro_batches", _u32), ("chunk_size", _u32), ("chunk_keep", _u32),
                ("chunk_state_permille", _u32), ("sync", _u32), ("_reserved", _u32)]


class skrull_dacp_summary(ctypes.Structure):
    _fields_ = [("sharded", _u32), ("rollbacks", _u32)]


class skrull_cp_group(ctypes.Structure):
    _fields_ = [("first", _u32), ("size", _u32)]


class skrull_placement(ctypes.Structure):
    _fields_ = [("dp_rank", _u32), ("micro_batch", _u32), ("cp_rank", _i32),
                ("tokens_per_gpu", _u32)]


class skrull_micro_batch(ctypes.Structure):
    _fields_ = [("dp_rank", _u32), ("index", _u32), ("first", _u32), ("count", _u32)]


class skrull_summary(ctypes.Structure):
    _fields_ = [("total_tokens", _u64), ("sequences", _u32), ("micro_batches", _u32),
                ("sharded", _u32), ("rollbacks", _u32), ("peak_rank_tokens", _u32),
                ("_reserved", _u32)]


class skrull_error_info(ctypes.Structure):
    _fields_ = [("status", _u32), ("field", _u32), ("index", _i64), ("value", _u64),
                ("limit", _u64)]


class skrull_plan_buffers(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("_reserved", _u32),
                ("placements", _ptr), ("placements_len", _usize),
                ("micro_batches", _ptr), ("micro_batches_len", _usize),
                ("members", _ptr), ("members_len", _usize),
                ("rank_tokens", _ptr), ("rank_tokens_len", _usize),
                ("micro_batches_per_dp", _ptr), ("micro_batches_per_dp_len", _usize),
                ("summary", _ptr),
                # appended after version 1
                ("error", _ptr), ("cp_groups", _ptr), ("cp_groups_len", _usize)]


class skrull_gpu(ctypes.Structure):
    _fields_ = [("dp_rank", _u32), ("micro_batch", _u32), ("cp_rank", _u32)]


class skrull_span(ctypes.Structure):
    _fields_ = [("seq", _u32), ("chunk", _i32), ("offset", _u32), ("start", _u32),
                ("len", _u32), ("pad", _u32)]


class skrull_layout(ctypes.Structure):
    _fields_ = [("dp_rank", _u32), ("micro_batch", _u32), ("cp_rank", _u32),
                ("micro_batch_global", _u32), ("local_seqs", _u32), ("sharded_seqs", _u32),
                ("spans", _u32), ("local_tokens", _u32), ("sharded_tokens", _u32),
                ("tokens", _u32), ("pad_tokens", _u32), ("charged_tokens", _u32),
                ("local_max_seqlen", _i32), ("sharded_max_seqlen", _i32),
                ("sharded_max_seqlen_padded", _i32), ("rank_max_seqlen", _i32),
                ("loss_tokens", _u32), ("_reserved", _u32),
                ("micro_batch_tokens", _u64), ("global_tokens", _u64)]


class skrull_layout_ring(ctypes.Structure):
    _fields_ = [("first", _u32), ("size", _u32), ("offset", _u32), ("seqs", _u32)]


class skrull_layout_buffers(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("_reserved", _u32),
                ("spans", _ptr), ("spans_len", _usize),
                ("local_cu_seqlens", _ptr), ("local_cu_seqlens_len", _usize),
                ("sharded_cu_seqlens", _ptr), ("sharded_cu_seqlens_len", _usize),
                ("sharded_cu_seqlens_padded", _ptr), ("sharded_cu_seqlens_padded_len", _usize),
                ("rank_cu_seqlens", _ptr), ("rank_cu_seqlens_len", _usize),
                ("positions", _ptr), ("positions_len", _usize),
                ("layout", _ptr),
                # appended after version 1
                ("gather_index", _ptr), ("gather_index_len", _usize),
                ("local_cu_seqlens_padded", _ptr), ("local_cu_seqlens_padded_len", _usize),
                ("rings", _ptr), ("rings_len", _usize), ("rings_count", _ptr),
                ("chunk_passes", _ptr), ("chunk_passes_len", _usize),
                ("chunk_passes_count", _ptr)]


class skrull_chunk_pass(ctypes.Structure):
    _fields_ = [("seq", _u32), ("index", _u32), ("count", _u32), ("first", _u32),
                ("size", _u32), ("start", _u32), ("len", _u32), ("padded", _u32),
                ("span", _u32), ("spans", _u32), ("offset", _u32), ("tokens", _u32)]


class skrull_layout_capacity(ctypes.Structure):
    _fields_ = [("spans", _usize), ("local_cu_seqlens", _usize), ("sharded_cu_seqlens", _usize),
                ("positions", _usize), ("workspace_bytes", _usize)]


class skrull_refit_params(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("window_steps", _u32), ("max_rows_per_step", _u32),
                ("flags", _u32), ("forgetting", _f64), ("ridge", _f64), ("outlier", _f64),
                # appended after version 1
                ("trust", _f64), ("max_error", _f64), ("holdout", _u32), ("_reserved", _u32)]


class skrull_refit_report(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("kept_prior", _u32), ("steps", _u32), ("rows", _u32),
                ("dropped", _u32), ("skipped", _u32), ("moved", _u32), ("_reserved", _u32),
                ("error_prior", _f64), ("error_fit", _f64),
                ("coefficients", _f64 * len(REFIT_COEFFICIENTS)),
                # appended after version 1
                ("adopted", _u32), ("verdict", _u32), ("limited", _u32), ("raised", _u32),
                ("heldout_rows", _u32), ("step_times", _u32), ("scale", _f64), ("error_heldout_in_use", _f64),
                ("error_heldout_fit", _f64), ("error_unlimited", _f64),
                ("iteration_fixed_s", _f64), ("coefficient_sharded_sequence", _f64),
                # appended after version 2
                ("coefficient_last_micro_batch", _f64), ("coefficient_local_sequence", _f64)]


class skrull_setup(ctypes.Structure):
    """Opaque (``typedef struct skrull_setup skrull_setup``): a prepared configuration in
    caller memory, only ever handled through a pointer (``skrull_setup_init`` stores it)."""


class skrull_sizes(ctypes.Structure):
    _fields_ = [("workspace_bytes", _usize), ("placements", _usize), ("micro_batches", _usize),
                ("members", _usize), ("rank_tokens", _usize), ("micro_batches_per_dp", _usize)]


_W = ctypes.sizeof(c_size_t)
#: Sizes the header documents for its frozen structs (version 1).
FROZEN_SIZES = {
    skrull_model_shape: 24, skrull_dacp_summary: 8, skrull_placement: 16,
    skrull_micro_batch: 16, skrull_summary: 32, skrull_gpu: 12, skrull_span: 24,
    skrull_layout: 88, skrull_layout_capacity: 5 * _W, skrull_sizes: 6 * _W,
    skrull_error_info: 32, skrull_cp_group: 8, skrull_layout_ring: 16, skrull_chunk_pass: 48,
}
#: Version-1 sizes of the extensible structs; appended fields make ours larger, never smaller.
EXTENSIBLE_V1_SIZES = {
    skrull_config: CONFIG_SIZE_V1, skrull_cost_model: COST_MODEL_SIZE_V1,
    skrull_plan_buffers: 8 + 11 * _W, skrull_layout_buffers: 8 + 13 * _W,
    skrull_refit_params: REFIT_PARAMS_SIZE_V1, skrull_refit_report: REFIT_REPORT_SIZE_V1,
}
#: Every struct the binding mirrors, in header order.
STRUCTS = [skrull_model_shape, skrull_cost_model, skrull_config, skrull_dacp_summary,
           skrull_placement, skrull_micro_batch, skrull_summary, skrull_error_info,
           skrull_cp_group, skrull_plan_buffers, skrull_gpu, skrull_span, skrull_layout,
           skrull_layout_ring, skrull_layout_buffers, skrull_layout_capacity, skrull_sizes,
           skrull_refit_params, skrull_refit_report, skrull_chunk_pass]
#: The header's opaque types (``typedef struct x x;``, no fields): pointers only.
OPAQUE = [skrull_setup]

_P = POINTER
# name: (restype, argtypes). Pointers to caller-owned arrays are passed as integer addresses.
_PROTOTYPES = {
    "skrull_abi_version": (_u32, []),
    "skrull_version": (c_char_p, []),
    "skrull_status_str": (c_char_p, [_u32]),
    "skrull_panic_selftest": (_u32, []),
    # The sized initialisers: they never write past the size we pass (``sizeof`` of our
    # struct). The version-1 ``skrull_config_default``/``skrull_config_preset`` write 60 bytes
    # and ``struct_size = 60``, which makes the library ignore every field added since: unused.
    "skrull_config_init": (_u32, [_P(skrull_config), _usize]),
    "skrull_config_preset_init": (_u32, [_u32, _P(skrull_config), _usize]),
    "skrull_config_recommended_init": (_u32, [_u32, _P(skrull_config), _usize]),
    "skrull_cost_model_preset": (_u32, [_u32, _P(skrull_model_shape), _P(skrull_cost_model),
                                        _usize]),
    "skrull_cost_model_slowed": (_u32, [_P(skrull_cost_model), c_double, _P(skrull_cost_model),
                                        _usize]),
    "skrull_plan_sizes": (_u32, [_usize, _u32, _u32, _P(skrull_sizes)]),
    "skrull_workspace_size": (_usize, [_usize, _u32, _u32]),
    "skrull_schedule": (_u32, [_P(skrull_config), c_void_p, _usize, c_void_p, _usize,
                               _P(skrull_plan_buffers)]),
    # The prepared form: the configuration validated once into a caller buffer of
    # ``skrull_setup_size()`` bytes, then every batch planned with the handle.
    "skrull_config_check": (_u32, [_P(skrull_config), _P(skrull_error_info)]),
    "skrull_setup_size": (_usize, []),
    "skrull_setup_init": (_u32, [_P(skrull_config), c_void_p, _usize, _P(_P(skrull_setup)),
                                 _P(skrull_error_info)]),
    "skrull_schedule_prepared": (_u32, [_P(skrull_setup), c_void_p, _usize, c_void_p, _usize,
                                        _P(skrull_plan_buffers)]),
    "skrull_dacp_place": (_u32, [_P(skrull_config), c_void_p, _usize, c_void_p, _usize,
                                 c_void_p, _usize, _P(skrull_dacp_summary)]),
    "skrull_layout_sizes_max": (_u32, [_P(skrull_config), _usize, _P(skrull_layout_capacity)]),
    "skrull_layout_sizes": (_u32, [_P(skrull_config), c_void_p, _usize,
                                   _P(skrull_plan_buffers), skrull_gpu, c_void_p, _usize,
                                   _P(skrull_layout_capacity)]),
    "skrull_layout_fill": (_u32, [_P(skrull_config), c_void_p, _usize, _P(skrull_plan_buffers),
                                  skrull_gpu, c_void_p, _usize, _P(skrull_layout_buffers)]),
    "skrull_layout_fill_many": (_u32, [_P(skrull_config), c_void_p, _usize,
                                       _P(skrull_plan_buffers), c_void_p, _usize, c_void_p,
                                       _usize, c_void_p]),
    # The online refit: a window of measured steps in caller-owned state (a numpy buffer).
    "skrull_refit_params_default": (_u32, [_P(skrull_refit_params), _usize]),
    "skrull_refit_size": (_usize, [_P(skrull_refit_params)]),
    "skrull_refit_init": (_u32, [_P(skrull_refit_params), _P(skrull_config), c_void_p, _usize,
                                 _P(skrull_error_info)]),
    "skrull_refit_observe": (_u32, [c_void_p, _usize, c_void_p, _usize, c_void_p, c_void_p,
                                    _u32, c_void_p, _usize, _P(skrull_error_info)]),
    "skrull_refit_solve": (_u32, [c_void_p, _usize, _P(skrull_cost_model), _usize,
                                  _P(skrull_refit_report), _usize, _P(skrull_error_info)]),
    "skrull_status_name": (c_char_p, [_u32]),
    "skrull_error_describe": (_usize, [_u32, _P(skrull_error_info), _P(skrull_config),
                                       c_char_p, _usize]),
    "skrull_error_details": (_u32, [_u32]),
    "skrull_error_field_name": (c_char_p, [_u32, _u32]),
    "skrull_chunk_size_default": (_u32, [_P(skrull_config), _u32, _P(_u32),
                                         _P(skrull_error_info)]),
    "skrull_refit_observe_step_time": (_u32, [c_void_p, _usize, c_double,
                                              _P(skrull_error_info)]),
}

_LIB_NAMES = ("_libskrull", "libskrull")
_LIB_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")


def address(a: "np.ndarray") -> int:
    """The data address of a numpy array."""
    return a.ctypes.data


def library_path() -> Path:
    """The shared library to load: ``$SKRULL_LIBRARY``, else the one shipped in this package."""
    override = os.environ.get("SKRULL_LIBRARY")
    if override:
        return Path(override)
    here = Path(__file__).resolve().parent
    for path in sorted(here.iterdir()):
        if path.name.startswith(_LIB_NAMES) and path.suffix in _LIB_SUFFIXES:
            return path
    raise ImportError(
        f"skrull: no libskrull shared library in {here}. Install the package with "
        "`pip install ./python` from the repository root, or point SKRULL_LIBRARY at a "
        "libskrull.so built by `cargo build -p skrull-ffi --release`."
    )


def _load() -> ctypes.CDLL:
    for cls, size in {**FROZEN_SIZES, **EXTENSIBLE_V1_SIZES}.items():
        if ctypes.sizeof(cls) < size or (cls in FROZEN_SIZES and ctypes.sizeof(cls) != size):
            raise ImportError(f"skrull: ctypes {cls.__name__} is {ctypes.sizeof(cls)} bytes, "
                              f"the header says {size}")
    path = library_path()
    lib = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    found = lib.skrull_abi_version()
    if found != ABI_VERSION:
        raise ImportError(f"skrull: {path} has C ABI version {found}; this package was "
                          f"written for version {ABI_VERSION}")
    return lib


lib = _load()


def preset_config(preset: int) -> tuple[int, skrull_config]:
    """Runs ``skrull_config_preset_init`` on a struct of our size and returns (status, config);
    ``struct_size`` is ``sizeof`` of our struct, whatever the library's is."""
    cfg = skrull_config()
    status = lib.skrull_config_preset_init(preset, ctypes.byref(cfg), ctypes.sizeof(cfg))
    return status, cfg


def recommended_config(preset: int) -> tuple[int, skrull_config]:
    """Runs ``skrull_config_recommended_init`` (the preset's layout with the recommended
    options: ``balanced``, sub-groups on) on a struct of our size; returns (status, config)."""
    cfg = skrull_config()
    status = lib.skrull_config_recommended_init(preset, ctypes.byref(cfg), ctypes.sizeof(cfg))
    return status, cfg


def preset_cost_model(gpu: int, shape: skrull_model_shape | None) -> tuple[int, skrull_cost_model]:
    """Runs ``skrull_cost_model_preset`` on a struct of our size and returns (status, model)."""
    out = skrull_cost_model()
    status = lib.skrull_cost_model_preset(gpu, None if shape is None else ctypes.byref(shape),
                                          ctypes.byref(out), ctypes.sizeof(out))
    return status, out


# ---- The outlier-delay window (skrull_window_*), appended after version 1 -------------------

#: The longest ``skrull_window_params.max_delay`` (``SKRULL_WINDOW_MAX_DELAY``).
WINDOW_MAX_DELAY = 64
#: ``sizeof(skrull_window_params)`` of version 1 (``SKRULL_WINDOW_PARAMS_SIZE_V1``).
WINDOW_PARAMS_SIZE_V1 = 32


class skrull_window_params(ctypes.Structure):
    _fields_ = [("struct_size", _u32), ("max_delay", _u32), ("batch_capacity", _u32),
                ("_reserved", _u32), ("first_step", _u64), ("first_position", _u64)]


class skrull_window_deferred(ctypes.Structure):
    _fields_ = [("position", _u64), ("origin", _u64), ("length", _u32), ("_reserved", _u32)]


class skrull_window_capacity(ctypes.Structure):
    _fields_ = [("state_bytes", _usize), ("step_capacity", _usize), ("queue_capacity", _usize)]


class skrull_window_step_info(ctypes.Structure):
    _fields_ = [("index", _u64), ("delay_sum", _u64), ("samples", _u32), ("released", _u32),
                ("deferred", _u32), ("queued", _u32)]


_WINDOW_FROZEN = {skrull_window_deferred: 24, skrull_window_capacity: 3 * _W,
                  skrull_window_step_info: 32}
FROZEN_SIZES.update(_WINDOW_FROZEN)
EXTENSIBLE_V1_SIZES[skrull_window_params] = WINDOW_PARAMS_SIZE_V1
STRUCTS += [skrull_window_params, skrull_window_deferred, skrull_window_capacity,
            skrull_window_step_info]
# The state, the lengths and the outputs are numpy buffers, passed as addresses.
_WINDOW_PROTOTYPES = {
    "skrull_window_sizes": (_u32, [_P(skrull_window_params), _P(skrull_window_capacity)]),
    "skrull_window_init": (_u32, [_P(skrull_window_params), _P(skrull_setup), c_void_p, _usize,
                                  _P(skrull_error_info)]),
    "skrull_window_push": (_u32, [c_void_p, _usize, c_void_p, _usize, _P(skrull_error_info)]),
    "skrull_window_step": (_u32, [c_void_p, _usize, c_void_p, c_void_p, _usize,
                                  _P(skrull_window_step_info), _P(skrull_error_info)]),
    "skrull_window_queue": (_u32, [c_void_p, _usize, c_void_p, _usize, _P(_usize),
                                   _P(skrull_error_info)]),
    "skrull_window_requeue": (_u32, [c_void_p, _usize, c_void_p, _usize,
                                     _P(skrull_error_info)]),
}
for _cls, _size in _WINDOW_FROZEN.items():
    if ctypes.sizeof(_cls) != _size:
        raise ImportError(f"skrull: ctypes {_cls.__name__} is {ctypes.sizeof(_cls)} bytes, the "
                          f"header says {_size}")
for _name, (_restype, _argtypes) in _WINDOW_PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _restype, _argtypes
_PROTOTYPES.update(_WINDOW_PROTOTYPES)
del _cls, _size, _name, _restype, _argtypes, _fn
