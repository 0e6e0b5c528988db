//! Fuzz regressions: every input that ever crashed a fuzz target (`fuzz/`) replays here as a
//! named test, through the same harness (`skrull_kit::fuzz`, `kit/src/fuzz/`), so the bug
//! stays fixed without nightly or cargo-fuzz. The committed corpus (seeds and minimised
//! campaign corpus) replays too.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use std::path::Path;

use skrull_kit::fuzz;

/// The committed corpus passes its target's harness: every seed (`seed-*`) and every 16th
/// file of the minimised campaign corpus (`cmin-*`, in name order; all of it takes about three
/// minutes in a debug build, and CI's fuzz smoke run replays all of it first).
#[test]
#[cfg_attr(miri, ignore)]
fn committed_corpus_replays_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut replayed = 0;
    for target in ["c_abi", "rust_api", "layout", "refit"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(target))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        let mut campaign = 0;
        entries.retain(|p| match p.file_name().and_then(|n| n.to_str()) {
            Some(n) if n.starts_with("seed-") => true,
            Some(n) if n.starts_with("cmin-") => {
                campaign += 1;
                campaign % 16 == 1
            }
            _ => false,
        });
        for p in entries {
            let data = std::fs::read(&p).unwrap();
            match target {
                "c_abi" => {
                    let _ = fuzz::c_abi(&data);
                }
                "layout" => {
                    let _ = fuzz::layout(&data);
                }
                "refit" => fuzz::refit(&data),
                _ => fuzz::rust_api(&data),
            }
            replayed += 1;
        }
    }
    assert!(
        replayed >= 400,
        "only {replayed} corpus inputs found under {}",
        root.display()
    );
}

/// The layout seeds reach what they are named after: valid plans laid out on every GPU and
/// tiled, the outside harness's report (a summary with `_reserved = 1`) refused as
/// `PLAN_INVALID`, malformed calls refused with their status, and the declared-capacity
/// overlaps refused as `INVALID_ARG`.
#[test]
#[cfg_attr(miri, ignore)]
fn layout_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/layout");
    let run = |name: &str| fuzz::layout(&std::fs::read(dir.join(name)).unwrap());
    for seed in [
        "seed-every-gpu-skrull",
        "seed-every-gpu-balanced",
        "seed-every-gpu-deepspeed",
        "seed-every-gpu-packed",
        "seed-zigzag",
        "seed-zigzag-tiny",
        "seed-cp1",
        "seed-exact-sizes",
        "seed-no-positions",
        "seed-paper-example",
    ] {
        let r = run(seed);
        assert!(
            r.tiled && r.plan_valid && !r.fills.is_empty(),
            "{seed}: {r:?}"
        );
        assert!(r.fills.iter().all(|&s| s == S::Ok), "{seed}: {r:?}");
    }
    let r = run("seed-summary-reserved");
    assert!(r.corrupted && !r.plan_valid, "{r:?}");
    assert_eq!(r.fills, [S::PlanInvalid, S::PlanInvalid]);
    for (seed, first) in [
        ("seed-plan-reserved", S::InvalidArg),
        ("seed-out-reserved", S::InvalidArg),
        ("seed-out-struct-size", S::BadStructSize),
        ("seed-workspace-short", S::WorkspaceTooSmall),
        ("seed-output-short", S::OutputTooSmall),
        ("seed-output-null", S::NullArg),
        ("seed-capacity-size-max", S::InvalidArg),
        ("seed-plan-capacity-size-max", S::InvalidArg),
        ("seed-spans-spare-on-positions", S::InvalidArg),
        ("seed-output-in-plan-spare", S::InvalidArg),
        ("seed-odd-workspace", S::Ok),
    ] {
        let r = run(seed);
        assert_eq!(r.fills.first(), Some(&first), "{seed}: {r:?}");
        assert!(r.fills[1..].iter().all(|&s| s == S::Ok), "{seed}: {r:?}");
    }
    let r = run("seed-one-gpu-far");
    assert_eq!(r.fills.first(), Some(&S::NoSuchGpu), "{r:?}");
    let r = run("seed-int32-overflow");
    assert!(r.fills.contains(&S::LayoutOverflow), "{r:?}");
    // Corruptions: refused, or (a swap inside a micro-batch) still a plan that is laid out.
    for seed in [
        "seed-cp-rank",
        "seed-tokens-per-gpu",
        "seed-micro-batch-count",
        "seed-rank-tokens",
        "seed-per-dp",
        "seed-summary-total",
        "seed-capacity-shrunk",
        "seed-sharded-flip",
    ] {
        let r = run(seed);
        assert!(r.corrupted && !r.plan_valid, "{seed}: {r:?}");
        assert!(
            r.fills.iter().all(|&s| s == S::PlanInvalid),
            "{seed}: {r:?}"
        );
    }
    let r = run("seed-summary-rollbacks");
    assert!(r.corrupted && r.plan_valid && r.tiled, "{r:?}");
}

/// Decodes a base64 fuzz input (standard alphabet, padded).
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::new();
    for chunk in digits.chunks(4) {
        let mut acc = 0u32;
        for (i, &d) in chunk.iter().enumerate() {
            acc |= u32::from(d) << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// Regression (fuzz `c_abi`, found while moving the harnesses): the harness corrupted byte
/// 60 of the configuration as "past the struct", but the struct grew past 60 bytes, so the
/// corrupted byte was a real field and the call legitimately succeeded. The harness now
/// corrupts the bytes past the struct as the library sees it.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_c_abi_config_tail_past_the_grown_struct() {
    let _ = fuzz::c_abi(&base64("A8oDynsJIIDT3gAA"));
}

/// Regression (fuzz `layout`): `packed` at DP 1, CP 1, zigzag padding, one-token sequences.
/// Zigzag at CP 1 pads nothing (nothing is exchanged), but the harness still expected the old
/// rule's padding to 2 tokens; it now writes the padding rule out in full, pad multiple
/// included.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_sharded_at_cp_1() {
    let _ = fuzz::layout(&base64(
        "AwAAAAAAAAAAAPYAAAAAACAAAAB6BQAFeAC4CyAD6P0RAJQR5gCMI0CcNABYAuDS9ABYGywAlBHmAIwjQJwzAFgC4NL0AFgbLAEBAA==",
    ));
}

/// The seeds of the wider input format reach what they are named after: `balanced`, a pad
/// multiple with lockstep, a caller cost model (valid and not) and error details.
#[test]
#[cfg_attr(miri, ignore)]
fn c_abi_option_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/c_abi");
    let run = |name: &str| fuzz::c_abi(&std::fs::read(dir.join(name)).unwrap());
    for (seed, want) in [
        ("seed-default-balanced", S::Ok),
        ("seed-pad-lockstep", S::Ok),
        ("seed-cost-topology", S::Ok),
        ("seed-cost-invalid", S::InvalidCostModel),
        ("seed-error-details", S::SequenceTooLong),
    ] {
        assert_eq!(run(seed), want, "{seed}");
    }
    let input = fuzz::decode::decode(&std::fs::read(dir.join("seed-pad-lockstep")).unwrap());
    let cfg = input.core_config().unwrap();
    assert_eq!(
        (cfg.pad_multiple, cfg.pad_local, cfg.lockstep),
        (16, true, true)
    );
    let input = fuzz::decode::decode(&std::fs::read(dir.join("seed-cost-topology")).unwrap());
    assert_eq!(input.core_config().unwrap().cost.unwrap().gpus_per_node, 16);
    assert!(
        fuzz::decode::decode(&std::fs::read(dir.join("seed-error-details")).unwrap()).error_details
    );
}

/// Regression (fuzz `c_abi`, wider decoder): `out.struct_size = 97` was accepted as version 1
/// plus one byte, so the library read one byte of the error-details pointer into a NULL
/// default and wrote the details to address 0x80. A size that ends inside a field is now
/// `BAD_STRUCT_SIZE`, and nothing is written through a half-read pointer.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_c_abi_struct_size_inside_a_field() {
    let _ = fuzz::c_abi(&base64("JgAAAwAAANzc3Nzc3N////cAgAAAAAA="));
}

/// Regression (fuzz `layout`, wider decoder): with `pad_local` and a pad multiple a local
/// sequence occupies its padded length, which the library reports in `tokens_per_gpu`, but the
/// harness still expected the bare length and called the plan invalid.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_pad_local_tokens_per_gpu() {
    let run = fuzz::layout(&base64(
        "AAAAAAAAuLi4uB+4uLi4uLi4uLi4uLi4Pbi4uDYiIiIiIiIiIgAAAACqAAAAACAAFwAAAAAAAAAGAAAAAAAAAAIEBQIAEQABBgAAAAA=",
    ));
    assert!(run.plan_valid);
}
/// Regression (fuzz `c_abi`, wider decoder): with `config.struct_size` 72 the library reads
/// no cost-model pointer and plans with the preset, but the harness compared against a plan
/// made with the caller's (invalid) cost model. It now reads the configuration as the
/// library does, field by field up to the given size.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_c_abi_small_config_drops_later_fields() {
    let f = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/corpus/c_abi/seed-regression-small-config"),
    )
    .unwrap();
    let _ = fuzz::c_abi(&f);
}

/// Regression (fuzz `rust_api`): a caller cost model with a 1,000 s kernel launch saturated
/// `balanced`'s sums and the call failed with `DacpFailed`.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_rust_api_saturated_cost_model() {
    fuzz::rust_api(&base64(
        "KIAGGQQAABAIPgK9AAAsAGhoaGhoaGggAAAAAAAG6APo/RUFlAAAAA==",
    ));
}

/// Regression (fuzz `layout`): a local sequence padded by `pad_local` covers its padded
/// length; the harness's tiling check expected the bare length.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_pad_local_tiling() {
    let run = fuzz::layout(&base64(
        "BgAAAAAOCAAAAAAAdnZ2dnZ2CgoAAAAAAAAAAADKysrKAHZ2dnZ2dnZ2dnY=",
    ));
    assert!(run.plan_valid);
}

/// Regression (fuzz `layout`, campaign round 2): a GPU of an empty lockstep micro-batch (past
/// the DP rank's listed ones) has `micro_batch_global == NO_MICRO_BATCH`, as documented; the
/// harness indexed the plan's rank-token table with it and panicked. It now checks that such a
/// layout is empty.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_empty_lockstep_micro_batch() {
    let run = fuzz::layout(&base64("pQAAAAAAAAA3LQEAAAAAABRUKCAlAAkDBgAAoAEDAA=="));
    assert_eq!(run.schedule, Some(skrull::skrull_status::Ok));
    assert!(run.plan_valid && !run.corrupted);
    assert!(run.fills.contains(&skrull::skrull_status::Ok));
}

/// Regression (fuzz `c_abi`, campaign round 3, from the grown corpus): `out.struct_size` 106
/// ends inside `cp_groups`, so the library refuses the struct and reads no error pointer from
/// it (here after the configuration's `INVALID_COST_MODEL`); the harness still expected the
/// details, as for any size past the pointer. Sizes that end inside a field now count as not
/// carrying it, and details must then stay untouched.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_c_abi_out_struct_size_inside_cp_groups_writes_no_details() {
    let _ = fuzz::c_abi(&base64("LGAAAAAAAQAAgQ78/2o="));
}

/// The sub-group seeds reach what they are named after: sub-groups on through the C ABI
/// (planned, the groups checked), `subgroups = 2` refused, the groups required with
/// sub-groups and optional without, their capacity checked.
#[test]
#[cfg_attr(miri, ignore)]
fn c_abi_subgroup_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/c_abi");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    for (seed, want) in [
        ("seed-subgroups-balanced", S::Ok),
        ("seed-subgroups-invalid", S::InvalidEnum),
        ("seed-subgroups-no-groups", S::NullArg),
        ("seed-groups-null-off", S::Ok),
        ("seed-groups-short", S::OutputTooSmall),
    ] {
        assert_eq!(fuzz::c_abi(&read(seed)), want, "{seed}");
    }
    let input = fuzz::decode::decode(&read("seed-subgroups-balanced"));
    assert!(input.core_config().unwrap().subgroups);
    let input = fuzz::decode::decode(&read("seed-groups-null-off"));
    assert!(!input.core_config().unwrap().subgroups);
}

/// The seeds of round 3 of the outside review: a version-1 config at a 4-byte offset plans;
/// error details on an output are never written (the earlier INVALID_DP, else INVALID_ARG);
/// with sub-groups, a short micro_batches_per_dp is reported before a NULL cp_groups.
#[test]
#[cfg_attr(miri, ignore)]
fn c_abi_round3_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/c_abi");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    for (seed, want) in [
        ("seed-v1-config-offset4", S::Ok),
        ("seed-details-on-output-per-dp", S::InvalidDp),
        ("seed-details-on-output-summary", S::InvalidArg),
        ("seed-groups-after-per-dp", S::OutputTooSmall),
    ] {
        assert_eq!(fuzz::c_abi(&read(seed)), want, "{seed}");
        fuzz::rust_api(&read(seed));
    }
    let input = fuzz::decode::decode(&read("seed-groups-after-per-dp"));
    assert!(input.core_config().unwrap().subgroups);
}

/// The layout's sub-group seeds: a hand-moved sub-group laid out on every GPU and tiled over
/// its group (also with zigzag padding and exactly sized buffers), refused without the flag
/// or with a bad group, the groups optional for a whole-group plan, the rings required.
#[test]
#[cfg_attr(miri, ignore)]
fn layout_subgroup_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/layout");
    let run = |name: &str| fuzz::layout(&std::fs::read(dir.join(name)).unwrap());
    for seed in [
        "seed-subgroup-regroup",
        "seed-subgroup-regroup-upper",
        "seed-subgroup-regroup-zigzag",
        "seed-subgroup-exact-sizes",
    ] {
        let r = run(seed);
        assert!(r.corrupted && r.plan_valid && r.tiled, "{seed}: {r:?}");
        assert_eq!(r.subgroups, 1, "{seed}: {r:?}");
        assert!(r.fills.iter().all(|&s| s == S::Ok), "{seed}: {r:?}");
    }
    for seed in [
        "seed-subgroup-without-flag",
        "seed-group-misaligned",
        "seed-group-size",
        "seed-groups-capacity",
    ] {
        let r = run(seed);
        assert!(r.corrupted && !r.plan_valid, "{seed}: {r:?}");
        assert!(
            r.fills.iter().all(|&s| s == S::PlanInvalid),
            "{seed}: {r:?}"
        );
    }
    let r = run("seed-groups-dropped");
    assert!(r.corrupted && r.plan_valid && r.tiled, "{r:?}");
    for (seed, first) in [
        ("seed-rings-null", S::NullArg),
        ("seed-rings-short", S::OutputTooSmall),
    ] {
        let r = run(seed);
        assert_eq!(r.fills.first(), Some(&first), "{seed}: {r:?}");
        assert!(r.fills[1..].iter().all(|&s| s == S::Ok), "{seed}: {r:?}");
    }
}

/// The chunking seeds (perturbation 4): chunkflow and balanced with chunking plan, and the
/// chunkflow plan runs sequences chunked (checked by the harness's checkers); K = 0 is
/// `INVALID_CHUNKING`; a chunk plan over the budget is `CHUNK_OVER_BUDGET` in C and the same
/// error in Rust.
#[test]
#[cfg_attr(miri, ignore)]
fn c_abi_chunking_seeds_reach_what_they_are_named_after() {
    use skrull::skrull_status as S;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/c_abi");
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    for (seed, want) in [
        ("seed-chunkflow", S::Ok),
        ("seed-chunking-balanced", S::Ok),
        ("seed-chunking-bad-keep", S::InvalidChunking),
        ("seed-chunk-over-budget", S::ChunkOverBudget),
    ] {
        assert_eq!(fuzz::c_abi(&read(seed)), want, "{seed}");
        fuzz::rust_api(&read(seed));
    }
    let input = fuzz::decode::decode(&read("seed-chunkflow"));
    let cfg = input.core_config().unwrap();
    assert_eq!(cfg.policy, skrull_core::Policy::ChunkFlow);
    let (placements, ..) = fuzz::c_abi::rust_plan(&cfg, &input.lengths).unwrap();
    assert!(placements.iter().any(|p| p.is_chunked()));
    let input = fuzz::decode::decode(&read("seed-chunking-balanced"));
    let cfg = input.core_config().unwrap();
    assert!(cfg.chunking.is_on() && cfg.policy == skrull_core::Policy::Balanced);
}

/// Regression (fuzz `layout`, the first run that drew chunking): chunkflow at CP 1 with a
/// BucketSize of 2^31 - 1 and chunks of 1 token. `skrull_layout_sizes_max` bounds the chunk
/// passes a GPU may run by one per token (a 309 GB workspace, the library's honest maximum),
/// and the harness allocated it: out of memory. The harness now checks the plan and skips
/// laying out a configuration whose maximum workspace is above 64 MiB.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_chunks_of_one_token_do_not_allocate_the_maximum() {
    let data = base64("ABkAAAUAKwABAAEAAAAHAgAAaGJtX2JhbmR3aWR0aH4BAA==");
    let input = fuzz::decode::decode(&data[16..]);
    let cfg = input.core_config().unwrap();
    assert_eq!(
        (cfg.chunking.size, cfg.cp, cfg.bucket),
        (1, 1, i32::MAX as u32)
    );
    let r = fuzz::layout(&data);
    // Planned (then one group corrupted by the header), nothing laid out.
    assert!(
        r.schedule == Some(skrull::skrull_status::Ok) && r.fills.is_empty(),
        "{r:?}"
    );
}

/// Regression (fuzz `layout`, chunking drawn): with chunking on, `skrull_layout_sizes` gives
/// a GPU the workspace its own chunk passes need, less than `skrull_layout_sizes_max`'s
/// (735 against 3,331 bytes here); the harness expected the maximum, as without chunking.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_chunking_gpu_workspace_below_the_maximum() {
    let data = base64("AwAAAAAAAAAAAAAAAAAAACABMgMEBAQEBAQwAAAAAAAAAAAAAAAAIwAAAAAAAAAA");
    assert!(
        fuzz::decode::decode(&data[16..])
            .core_config()
            .unwrap()
            .chunking
            .is_on()
    );
    let r = fuzz::layout(&data);
    assert!(r.plan_valid && !r.fills.is_empty(), "{r:?}");
}

/// Regression (fuzz `layout`, chunking drawn): a workspace one byte below
/// `skrull_layout_sizes_max`'s is enough for a GPU whose chunk passes need less, so
/// `skrull_layout_fill` planned it; the harness now gives a GPU under chunking the workspace
/// `skrull_layout_sizes` says it needs, and the short one is one byte below that.
#[test]
#[cfg_attr(miri, ignore)]
fn fuzz_layout_chunking_short_workspace_is_per_gpu() {
    let _ = fuzz::layout(&base64(
        "AwAAAAAAALg0NDQ0NDQ0NDQ0NDQKAAAAAAAAADQ0NDQ0NDQkNDQ0NDQ0NDQ0NFgbLACUnRHmAIwjwGMyAFgC4NL0AFgbLAEBAA==",
    ));
}
