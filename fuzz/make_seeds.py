#!/usr/bin/env python3
"""Writes the committed seed corpus: fuzz/corpus/{c_abi,rust_api}/seed-*.

Input format (fuzz_targets/harness.rs `decode`): a mode byte (0x80: Qwen2.5-7B preset,
0x40: model fields follow, 0x20: "fit" lengths), selector bytes for dp, cp, bucket, policy,
victim, flops, shard_padding, max_micro_batches (a byte >= 0xF0 is followed by a raw
little-endian u32), a perturbation byte (+ its argument), then 2-byte lengths (0xFFF0 and
above: a raw 4-byte length follows). Run: python3 fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

def raw(v):
    return bytes([0xF0]) + struct.pack("<I", v)

def cfg(mode=0x20, dp=3, cp=5, bucket=bytes([9]), policy=0, victim=0, flops=0, pad=0, mmb=0):
    sel = lambda x: x if isinstance(x, bytes) else bytes([x])
    return bytes([mode]) + sel(dp) + sel(cp) + sel(bucket) + sel(policy) + sel(victim) + \
        sel(flops) + sel(pad) + sel(mmb)

def lens(*vs):
    out = b""
    for v in vs:
        out += struct.pack("<H", v) if v < 0xFFF0 else b"\xff\xff" + struct.pack("<I", v)
    return out

LMSYS_LIKE = [120, 3000, 800, 65000, 17, 4500, 230, 9100, 40000, 51, 600, 12000, 2, 7000, 300, 1]

SEEDS = {
    # The paper's default layout (DP 4, CP 8, 26K) and each policy.
    "seed-default-skrull": cfg() + b"\x00" + lens(*LMSYS_LIKE),
    "seed-default-deepspeed": cfg(policy=1) + b"\x00" + lens(*LMSYS_LIKE),
    "seed-default-packed": cfg(policy=2) + b"\x00" + lens(*LMSYS_LIKE),
    "seed-default-roundrobin": cfg(policy=3) + b"\x00" + lens(*LMSYS_LIKE),
    # Options: longest victim, Megatron FLOPs, zigzag padding, a micro-batch limit, 7B.
    "seed-options": cfg(mode=0xA0, dp=1, cp=2, bucket=5, victim=1, flops=1, pad=1, mmb=4)
    + b"\x00" + lens(*range(1, 40, 3)),
    # Tiny budget, many sequences, micro-batch limit 1.
    "seed-tiny-bucket": cfg(dp=0, cp=0, bucket=0, mmb=3) + b"\x00" + lens(*([1] * 12)),
    # Model fields given explicitly.
    "seed-model": cfg(mode=0x60) + bytes([0, 0, 0, 0, 0, 1]) + b"\x00" + lens(5, 6, 7),
    # Bad inputs: zero dp, u32::MAX bucket, unknown policy, lengths 0 / 2^31-1 / u32::MAX.
    "seed-zero-dp": cfg(dp=raw(0)) + b"\x00" + lens(1, 2),
    "seed-max-bucket": cfg(mode=0x00, bucket=raw(0xFFFFFFFF)) + b"\x00" + lens(1),
    "seed-bad-policy": cfg(policy=raw(99)) + b"\x00" + lens(1, 2, 3),
    "seed-long-lengths": cfg(mode=0x00, bucket=10) + b"\x00"
    + lens(0x7FFFFFFF, 0xFFFFFFFF, 0, 1),
    # Malformed calls: each perturbation once.
    "seed-ws-short": cfg() + bytes([9, 0]) + lens(*LMSYS_LIKE),
    "seed-out-short": cfg() + bytes([10, 3]) + lens(*LMSYS_LIKE),
    "seed-null-summary": cfg() + bytes([11, 5]) + lens(*LMSYS_LIKE),
    "seed-out-struct-size": cfg() + bytes([12, 2]) + lens(1, 2),
    "seed-out-reserved": cfg() + bytes([13]) + lens(1, 2),
    "seed-config-tail": cfg() + bytes([14, 7]) + lens(1, 2),
    "seed-config-struct-size": cfg() + bytes([15, 4]) + lens(1, 2),
    "seed-odd-workspace": cfg() + bytes([8]) + lens(*LMSYS_LIKE),
    "seed-empty-batch": cfg() + b"\x00",
}

for target in ("c_abi", "rust_api"):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print(f"wrote {len(SEEDS)} seeds for each target")
