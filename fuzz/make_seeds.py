#!/usr/bin/env python3
"""Writes the committed seed corpus: fuzz/corpus/{c_abi,rust_api,layout}/seed-*.

Input format (kit/src/fuzz/decode.rs `decode`): a mode byte (0x80: Qwen2.5-7B preset,
0x40: model fields follow, 0x20: "fit" lengths, 0x10: pad_multiple/pad_local/lockstep
selectors follow, 0x08: a caller cost model follows (a field byte and its selector), 0x04:
the call passes a skrull_error_info, 0x01: subgroups = 1, 0x03: subgroups = 2 (not a flag);
the sub-group bits read no byte), selector bytes for dp, cp, bucket, policy, victim,
flops, shard_padding, max_micro_batches (a byte >= 0xF0 is followed by a raw little-endian
u32), the optional parts in that order, a perturbation byte (+ its argument), then 2-byte
lengths (0xFFF0 and above: a raw 4-byte length follows). Perturbations (byte % 16): 8 odd
workspace, 9 workspace short, 10 output `arg % 6` short (placements, micro_batches, members,
rank_tokens, per_dp, cp_groups), 11 pointer `arg % 9` NULL (those five, summary, workspace,
lengths, cp_groups with capacity 0), 12 out.struct_size, 13 out._reserved, 14 config tail, 15
config.struct_size, 7 a version-1 config at 4 mod 8, 6 error details on output `arg % 2`
(micro_batches_per_dp, summary), 5 cp_groups NULL with micro_batches_per_dp one short, 4
chunking (a well-formed call: a selector byte, bit 0 policy chunkflow, then chunk_size,
chunk_keep and chunk_state_permille selectors).
Run: python3 fuzz/make_seeds.py
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
    # The default policy, balanced (policy selector 4).
    "seed-default-balanced": cfg(policy=4) + b"\x00" + lens(*LMSYS_LIKE),
    # Pad multiple 16 with local padding and lockstep (selectors 5, 1, 1), balanced.
    "seed-pad-lockstep": cfg(mode=0x30, dp=1, cp=3, bucket=6, policy=4) + bytes([5, 1, 1])
    + b"\x00" + lens(*LMSYS_LIKE),
    # A caller cost model: CP 16 on 16-GPU nodes (field 0 = gpus_per_node, selector 4).
    "seed-cost-topology": cfg(mode=0x28, dp=1, cp=6, policy=4) + bytes([0, 4]) + b"\x00"
    + lens(*LMSYS_LIKE),
    # A caller cost model with a bad field (inter-node bandwidth 0), error details asked for.
    "seed-cost-invalid": cfg(mode=0x2C, policy=4) + bytes([1, 3]) + b"\x00" + lens(1, 2, 3),
    # Error details of a sequence too long for the budget.
    "seed-error-details": cfg(mode=0x04, bucket=2) + b"\x00" + lens(5, 0x7FFF, 6),
    # Sub-groups on (mode bit 0x01), balanced, the groups written and checked.
    "seed-subgroups-balanced": cfg(mode=0x21, dp=1, cp=5, policy=4) + b"\x00"
    + lens(*LMSYS_LIKE),
    # subgroups = 2 (mode bits 0x03): not a flag.
    "seed-subgroups-invalid": cfg(mode=0x23) + b"\x00" + lens(1, 2, 3),
    # Sub-groups on without a cp_groups buffer (NULL, perturbation 11 / 8): NULL_ARG.
    "seed-subgroups-no-groups": cfg(mode=0x21) + bytes([11, 8]) + lens(*LMSYS_LIKE),
    # ... and without sub-groups: allowed (the groups are optional).
    "seed-groups-null-off": cfg() + bytes([11, 8]) + lens(*LMSYS_LIKE),
    # cp_groups one short (perturbation 10 / 5).
    "seed-groups-short": cfg(mode=0x21) + bytes([10, 5]) + lens(*LMSYS_LIKE),
    # Round 3 of the outside review. A version-1 (60-byte) config at 4 mod 8 (perturbation 7):
    # planned as from an aligned one.
    "seed-v1-config-offset4": cfg() + bytes([7]) + lens(*LMSYS_LIKE),
    # Error details on micro_batches_per_dp (perturbation 6 / 0) with dp = 0 earlier in the
    # order: INVALID_DP, nothing written; on the summary (6 / 1) alone: INVALID_ARG.
    "seed-details-on-output-per-dp": cfg(mode=0x24, dp=raw(0)) + bytes([6, 0]) + lens(1, 2),
    "seed-details-on-output-summary": cfg(mode=0x24) + bytes([6, 1]) + lens(*LMSYS_LIKE),
    # Sub-groups, cp_groups NULL and micro_batches_per_dp short (perturbation 5): the short
    # buffer comes first in the field order, OUTPUT_TOO_SMALL.
    "seed-groups-after-per-dp": cfg(mode=0x21) + bytes([5]) + lens(*LMSYS_LIKE),
    # Chunking (perturbation 4: a chunking selector, bit 0 chunkflow, then chunk_size, K and
    # state selectors). chunkflow with chunks of cp x bucket / 8, K 1, 64 permille.
    "seed-chunkflow": cfg() + bytes([4, 1, 4, 0, 0]) + lens(*LMSYS_LIKE),
    # balanced with sub-groups and chunks of bucket / 2, K 2.
    "seed-chunking-balanced": cfg(mode=0x21, dp=1, cp=5, policy=4) + bytes([4, 0, 2, 1, 0])
    + lens(*LMSYS_LIKE),
    # K = 0 with chunking on: INVALID_CHUNKING.
    "seed-chunking-bad-keep": cfg() + bytes([4, 1, 0, 5, 0]) + lens(1, 2, 3),
    # chunkflow on one GPU, chunks of bucket / 8, K 64, the whole state: CHUNK_OVER_BUDGET.
    "seed-chunk-over-budget": cfg(mode=0x24, cp=0) + bytes([4, 1, 4, 4, 2])
    + lens(*LMSYS_LIKE),
}

# The layout target (kit/src/fuzz/layout/mod.rs): 16 header bytes (GPU mode, corruption
# kind, index u16, value u32, call malformation, its argument, one GPU as three u16), then
# the c_abi format above (its perturbation byte is unused). Corruption kinds
# (kit/src/fuzz/layout/plan.rs `corrupt`, kind % 32): 1-4 and 21 a placement, 5-8 a
# micro-batch, 9/22 a member, 10 two members swapped, 11/23 a rank-token entry, 12 per_dp,
# 13-19 the summary, 20 a capacity, 24/25 a group's first rank / size, 26 the groups not
# passed back, 27 the groups' capacity, 28 a sharded sequence moved onto the sub-group that
# `value` picks (size: the `value`-th power of two below cp dividing it; first: by
# `value >> 8`) with its share, rank tokens and the peak rewritten: a valid plan when
# sub-groups are on and the budget holds. Call malformations (kit/src/fuzz/layout/call.rs
# `malform`): output `arg % 7` short / NULL (spans, the four cu_seqlens, positions or the
# layout record, rings).
def hdr(mode=0, kind=0, index=0, value=0, mal=0, arg=0, gpu=(0, 0, 0)):
    return bytes([mode, kind]) + struct.pack("<HI", index, value) + bytes([mal, arg]) + \
        struct.pack("<HHH", *gpu)

# The outside harness's case: DP 2, CP 4, BucketSize 24, the ten-sequence example.
REPORT = cfg(mode=0x00, dp=1, cp=3, bucket=raw(24)) + b"\x00" + lens(1, 2, 2, 3, 4, 6, 9, 14, 30, 5)
PAPER = cfg(mode=0x00, dp=0, cp=3, bucket=raw(24)) + b"\x00" + lens(1, 2, 2, 3, 4, 6, 9, 14, 30)
LONG_TAIL = cfg(dp=1, cp=3, bucket=6) + b"\x00" + lens(*LMSYS_LIKE)
SUBGROUP_LENGTHS = lens(300, 200, 120, 50, 800, 40, 7, 1)
SUBGROUP_PLAN = cfg(mode=0x21, dp=0, cp=5, bucket=7, policy=2) + b"\x00" + SUBGROUP_LENGTHS
SUBGROUP_ZIGZAG = cfg(mode=0x21, dp=0, cp=5, bucket=7, policy=2, pad=1) + b"\x00" \
    + SUBGROUP_LENGTHS
SUBGROUP_OFF = cfg(mode=0x20, dp=0, cp=5, bucket=7, policy=2) + b"\x00" + SUBGROUP_LENGTHS

LAYOUT_SEEDS = {
    # Every GPU of valid plans: each policy (balanced through a raw selector), both paddings.
    "seed-every-gpu-skrull": hdr() + LONG_TAIL,
    "seed-every-gpu-balanced": hdr() + cfg(dp=1, cp=3, bucket=6, policy=raw(4)) + b"\x00"
    + lens(*LMSYS_LIKE),
    "seed-every-gpu-deepspeed": hdr() + cfg(dp=0, cp=2, bucket=6, policy=1) + b"\x00"
    + lens(*LMSYS_LIKE),
    "seed-every-gpu-packed": hdr() + cfg(dp=2, cp=4, bucket=5, policy=2) + b"\x00"
    + lens(*range(1, 200, 7)),
    "seed-zigzag": hdr() + cfg(dp=1, cp=3, bucket=6, pad=1) + b"\x00" + lens(*LMSYS_LIKE),
    "seed-zigzag-tiny": hdr() + cfg(mode=0x00, dp=0, cp=3, bucket=raw(4), pad=1) + b"\x00"
    + lens(10, 1, 3),
    "seed-cp1": hdr() + cfg(dp=1, cp=0, bucket=7) + b"\x00" + lens(*range(1, 60, 5)),
    "seed-exact-sizes": hdr(mode=2) + REPORT,
    "seed-no-positions": hdr(mode=3) + LONG_TAIL,
    "seed-paper-example": hdr() + PAPER,
    "seed-one-gpu-far": hdr(mode=1, gpu=(1, 9, 7)) + REPORT,
    # int32 overflow of the sharded cu_seqlens: two sequences of 2^31 - 2 tokens.
    "seed-int32-overflow": hdr(mode=1) + cfg(mode=0x00, dp=0, cp=1, bucket=10, policy=2)
    + b"\x00" + lens(0x7FFFFFFE, 0x7FFFFFFE),
    # Corrupted plans, one entry each (kinds: kit/src/fuzz/layout/plan.rs `corrupt`).
    "seed-summary-reserved": hdr(kind=19, value=1) + REPORT,
    "seed-cp-rank": hdr(kind=3, index=4, value=5) + REPORT,
    "seed-tokens-per-gpu": hdr(kind=4, index=8, value=7) + REPORT,
    "seed-micro-batch-count": hdr(kind=8, index=0, value=3) + REPORT,
    "seed-member-swap": hdr(kind=10, index=0, value=1) + REPORT,
    "seed-rank-tokens": hdr(kind=11, index=2, value=23) + REPORT,
    "seed-per-dp": hdr(kind=12, index=1, value=0) + REPORT,
    "seed-summary-total": hdr(kind=13, value=75) + REPORT,
    "seed-summary-rollbacks": hdr(kind=17, value=9) + REPORT,
    "seed-capacity-shrunk": hdr(kind=20, index=2, value=1) + REPORT,
    "seed-sharded-flip": hdr(kind=21, index=0) + REPORT,
    # Malformed calls (kinds: kit/src/fuzz/layout/call.rs `malform`).
    "seed-plan-reserved": hdr(mal=1) + REPORT,
    "seed-out-reserved": hdr(mal=2) + REPORT,
    "seed-out-struct-size": hdr(mal=3, arg=2) + REPORT,
    "seed-workspace-short": hdr(mal=4) + REPORT,
    "seed-odd-workspace": hdr(mal=5) + LONG_TAIL,
    "seed-output-short": hdr(mode=2, mal=6, arg=1) + REPORT,
    "seed-output-null": hdr(mal=8, arg=5) + REPORT,
    "seed-capacity-size-max": hdr(mal=9, arg=0) + REPORT,
    "seed-plan-capacity-size-max": hdr(mal=9, arg=3) + REPORT,
    "seed-spans-spare-on-positions": hdr(mal=10) + REPORT,
    "seed-output-in-plan-spare": hdr(mal=11) + REPORT,
    # Sub-groups: DP 1 x CP 8, BucketSize 1000, packed (everything sharded), sub-groups on;
    # sequence 0 moved onto ranks 0..4 (value 1), sequence 1 onto 4..8 (value 0x101).
    "seed-subgroup-regroup": hdr(kind=28, value=1) + SUBGROUP_PLAN,
    "seed-subgroup-regroup-upper": hdr(kind=28, index=1, value=0x101) + SUBGROUP_PLAN,
    "seed-subgroup-regroup-zigzag": hdr(kind=28, value=0x100) + SUBGROUP_ZIGZAG,
    "seed-subgroup-exact-sizes": hdr(mode=2, kind=28, value=1) + SUBGROUP_PLAN,
    # The same move in a configuration without sub-groups: PLAN_INVALID.
    "seed-subgroup-without-flag": hdr(kind=28, value=1) + SUBGROUP_OFF,
    # A group edited: first rank 3 (misaligned), size 5; the groups dropped (a whole-group
    # plan reads the same without them); their capacity one short.
    "seed-group-misaligned": hdr(kind=24, value=3) + SUBGROUP_PLAN,
    "seed-group-size": hdr(kind=25, value=5) + SUBGROUP_PLAN,
    "seed-groups-dropped": hdr(kind=26) + SUBGROUP_PLAN,
    "seed-groups-capacity": hdr(kind=27, value=1) + SUBGROUP_PLAN,
    # The rings NULL with sub-groups (NULL_ARG), and one short with exact sizes.
    "seed-rings-null": hdr(mal=8, arg=6) + SUBGROUP_PLAN,
    "seed-rings-short": hdr(mode=2, kind=28, value=1, mal=6, arg=6) + SUBGROUP_PLAN,
}

for target, seeds in (("c_abi", SEEDS), ("rust_api", SEEDS), ("layout", LAYOUT_SEEDS)):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print(f"wrote {len(SEEDS)} seeds for c_abi and rust_api, {len(LAYOUT_SEEDS)} for layout")


# The `refit` target (kit/src/fuzz/refit.rs): dp byte (1 + b % 3), cp byte (index into 1, 2,
# 4, 8, 16), model byte (bit 0: 7B), sub-groups byte (bit 0), a params selector byte (bit 0
# window_steps, 1 max_rows_per_step (u16), 2 flags, 3 forgetting, 4 ridge, 5 outlier, each
# followed by its byte(s)), then per step: n - 1, n u16 lengths, a malformation byte (% 8:
# 0 one time too many, 1 one micro-batch too few, 2 a DP rank out of range, 3 cp_rank -2,
# else none) and one byte per time (0 NaN, 1 inf, 2 -inf, 3 zero, 4 negative, 5 huge, 6 tiny,
# 7 raw bits, above 250 a 100x straggler, else 10-26 ms).
def refit_seeds():
    def step(n, lengths_seed, bad=4, times=None):
        ls = b"".join(struct.pack("<H", 100 + (lengths_seed * 7919 + i * 104729) % 12000)
                      for i in range(n))
        t = times if times is not None else bytes((16 + (i * 37) % 200) for i in range(256))
        return bytes([n - 1]) + ls + bytes([bad]) + t
    seeds = {
        "seed-refit-clean": bytes([1, 3, 0, 1, 0]) + b"".join(step(16, s) for s in range(4)),
        "seed-refit-cp16-7b": bytes([1, 4, 1, 1, 0]) + b"".join(step(20, s) for s in range(4)),
        "seed-refit-bad-times": bytes([0, 2, 0, 0, 0]) + b"".join(
            step(12, s, times=bytes(range(8)) * 40 + bytes([255]) * 64) for s in range(3)),
        "seed-refit-mismatch": bytes([1, 3, 0, 0, 0]) + b"".join(
            step(10, s, bad=s) for s in range(4)),
        "seed-refit-bad-params": bytes([1, 2, 0, 0, 1, 0]) + step(8, 1),
        "seed-refit-params": bytes([0, 3, 0, 1, 0x3E]) + struct.pack("<H", 64) +
            bytes([1, 1, 1, 3]) + b"".join(step(8, s) for s in range(3)),
    }
    out = os.path.join(HERE, "corpus", "refit")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    refit_seeds()
