//! The `rust_api` fuzz target: `schedule` from fuzz bytes ([`decode`]) with possibly one
//! buffer one element short, then DACP alone on the whole batch through the Rust API and
//! `skrull_dacp_place()`. Only the documented errors, the first error reported, every plan
//! valid under both checkers, and the same DACP decisions from Rust and C; a broken promise
//! panics.

use core::ffi::c_void;

use skrull::skrull_workspace_size;
use skrull::{
    skrull_config, skrull_cost_model, skrull_dacp_place, skrull_dacp_summary, skrull_status,
};
use skrull_core::config::{MAX_CP, MAX_DP};
use skrull_core::error::Buffer;
use skrull_core::{
    Config, Error, FlopsFormula, MicroBatch, Placement, PlanBuffers, PlanSizes, Policy, Setup,
    Workspace, WorkspaceSizes,
};

use super::decode::{Perturb, decode};
use crate::c_check::check_rust_plan;
use crate::guarded::Guarded;

/// One Rust API call from fuzz bytes: `schedule` with possibly one short buffer, then
/// `dacp::place` on the whole batch as one micro-batch, and `skrull_dacp_place` with it.
pub fn rust_api(data: &[u8]) {
    let input = decode(data);
    let Ok(cfg) = input.core_config() else {
        return;
    };
    let lengths = &input.lengths;
    let n = lengths.len();
    // Buffers are sized from clamped values so an invalid layout cannot allocate absurdly.
    let sized = Config {
        dp: cfg.dp.clamp(1, MAX_DP),
        cp: cfg.cp.clamp(1, MAX_CP),
        ..cfg
    };
    let ps = PlanSizes::for_batch(n, &sized);
    let wsz = WorkspaceSizes::for_batch(n, &sized);
    let mut sizes = [
        ps.placements,
        ps.micro_batches,
        ps.members,
        ps.rank_tokens,
        ps.micro_batches_per_dp,
        wsz.words,
    ];
    let mut short: Option<usize> = None;
    match input.perturb {
        Perturb::OutputShort(w) => short = Some(usize::from(w % 5)),
        Perturb::WorkspaceShort(_) => short = Some(5),
        _ => {}
    }
    if let Some(k) = short {
        if sizes[k] > 0 {
            sizes[k] -= 1;
        } else {
            short = None;
        }
    }
    let mut placements = vec![Placement::default(); sizes[0]];
    let mut micro_batches = vec![MicroBatch::default(); sizes[1]];
    let mut members = vec![0u32; sizes[2]];
    let mut rank_tokens = vec![0u32; sizes[3]];
    let mut per_dp = vec![0u32; sizes[4]];
    let mut words = vec![0u128; sizes[5]];
    let mut work = Workspace::new(&mut words);
    let out = PlanBuffers {
        placements: &mut placements,
        micro_batches: &mut micro_batches,
        members: &mut members,
        rank_tokens: &mut rank_tokens,
        micro_batches_per_dp: &mut per_dp,
    };
    let pre = cfg
        .validate()
        .and_then(|()| cfg.check_lengths(&cfg.budget(), lengths).map(|_| ()));
    let setup = Setup::single_use(&cfg);
    let r = setup
        .as_ref()
        .map_err(|e| *e)
        .and_then(|s| skrull_core::schedule(s, lengths, &mut work, out));
    match (&r, pre, short) {
        (Err(e), Err(p), _) => assert_eq!(*e, p, "the first error must be reported"),
        (Ok(_), Err(p), _) => panic!("planned although {p:?}"),
        (
            Err(Error::BufferTooSmall {
                buffer,
                needed,
                got,
            }),
            Ok(()),
            Some(k),
        ) => {
            let want = [
                Buffer::Placements,
                Buffer::MicroBatches,
                Buffer::Members,
                Buffer::RankTokens,
                Buffer::MicroBatchesPerDp,
            ];
            let b = want.get(k).copied().unwrap_or(Buffer::Workspace);
            assert_eq!((*buffer, *needed, *got), (b, sizes[k] + 1, sizes[k]));
        }
        (r, Ok(()), Some(k)) => panic!("buffer {k} one short gave {r:?}"),
        (Err(Error::Unsupported { policy, option }), Ok(()), _) => {
            // `balanced` balances time, not FLOPs: it refuses another FLOPs formula first.
            assert_eq!((*policy, *option), (Policy::Balanced.name(), "flops"));
            assert_eq!(cfg.policy, Policy::Balanced);
            assert_ne!(cfg.flops, FlopsFormula::Paper);
        }
        (Err(Error::MicroBatchLimit { .. }), Ok(()), None) => {
            assert_ne!(cfg.max_micro_batches, 0, "limit error without a limit");
        }
        (Err(Error::MicroBatchCount { count, needed, .. }), Ok(()), None) => {
            assert_eq!(*count, cfg.micro_batches, "count error without that count");
            assert!(
                needed > count,
                "{needed} micro-batches fit a count of {count}"
            );
        }
        (Err(Error::ChunkOverBudget { index, len, peak }), Ok(()), None) => {
            // Only chunkflow has no other placement for a long sequence; the peak is the
            // rule's, on the whole group, and over the budget.
            assert_eq!(cfg.policy, Policy::ChunkFlow);
            assert_eq!(lengths.get(*index), Some(len));
            assert!(cfg.chunking.can_chunk(*len), "{len} tokens chunked");
            assert_eq!(*peak, crate::check::chunked_peak(&cfg, *len, cfg.cp));
            assert!(*peak > u64::from(cfg.bucket), "{peak} tokens fit");
        }
        (Err(e), Ok(()), None) => panic!("valid call failed with {e:?}"),
        (Ok(plan), Ok(()), None) => {
            if let Err(e) = check_rust_plan(&cfg, lengths, plan) {
                panic!("plan fails the independent check: {e}");
            }
            let Ok(setup) = &setup else {
                panic!("planned without a setup");
            };
            if let Err(e) = skrull_core::plan::check(setup, lengths, plan) {
                panic!("plan fails the core check: {e:?}");
            }
        }
    }
    dacp_both(&cfg, input.cost.as_ref(), lengths);
}

/// DACP alone on the whole batch as one micro-batch, through the Rust API and the C ABI:
/// the same decision, loads within the budget, and only the documented errors.
fn dacp_both(cfg: &Config, cost: Option<&skrull_cost_model>, lengths: &[u32]) {
    let n = lengths.len();
    let mut order = vec![0u32; n];
    let mut ranks = vec![7i32; n];
    let r = Setup::single_use(cfg)
        .and_then(|s| skrull_core::policy::dacp::place(&s, lengths, &mut order, &mut ranks));
    let mut c = skrull_config::from_core(cfg);
    if let Some(m) = cost {
        c.cost_model = m;
    }
    let (dp, cp) = (cfg.dp.clamp(1, MAX_DP), cfg.cp.clamp(1, MAX_CP));
    // SAFETY: no preconditions.
    let wsb = unsafe { skrull_workspace_size(n, dp, cp) };
    let mut ws = vec![0u8; wsb];
    let mut c_ranks = Guarded::new(n, 7i32);
    let mut sum = Guarded::new(
        1,
        skrull_dacp_summary {
            sharded: 0xDEAD_BEEF,
            rollbacks: 0xDEAD_BEEF,
        },
    );
    // SAFETY: every pointer is valid for the length it is given.
    let st = unsafe {
        skrull_dacp_place(
            &c,
            lengths.as_ptr(),
            n,
            ws.as_mut_ptr().cast::<c_void>(),
            wsb,
            c_ranks.ptr(),
            n,
            sum.ptr(),
        )
    };
    assert!(
        !matches!(st, skrull_status::Panic | skrull_status::Internal),
        "skrull_dacp_place returned {st:?}"
    );
    match r {
        Ok(o) => {
            assert_eq!(st, skrull_status::Ok);
            assert_eq!(c_ranks.body(), &ranks[..], "C and Rust DACP differ");
            let s = sum.body()[0];
            assert_eq!((s.sharded, s.rollbacks), (o.sharded, o.rollbacks));
            c_ranks.untouched_from(n, "cp_ranks");
            sum.untouched_from(1, "dacp summary");
            let mut load = vec![0u64; cfg.cp as usize];
            let mut sharded = 0;
            for (k, &rk) in ranks.iter().enumerate() {
                if rk == -1 {
                    sharded += 1;
                    load.iter_mut()
                        .for_each(|l| *l += u64::from(cfg.shard_tokens(lengths[k])));
                } else {
                    assert!(rk >= 0 && (rk as u32) < cfg.cp, "cp rank {rk} out of range");
                    load[rk as usize] += u64::from(lengths[k]);
                }
            }
            assert_eq!(sharded, o.sharded);
            assert!(
                load.iter().all(|&l| l <= u64::from(cfg.bucket)),
                "DACP exceeded the budget"
            );
        }
        Err(e) => {
            assert!(
                !matches!(e, Error::BufferTooSmall { .. }),
                "exact buffers reported too small: {e:?}"
            );
            assert_eq!(
                st,
                skrull_status::from(e),
                "C and Rust DACP fail differently"
            );
            c_ranks.untouched_from(0, "cp_ranks");
            sum.untouched_from(0, "dacp summary");
        }
    }
}
