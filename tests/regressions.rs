//! Named regression tests: every bug or counterexample found in skrull gets one here, next to
//! the paper's worked examples run through the full scheduler.

use skrull_core::{Config, Error, ModelShape, Policy, ShardPadding, Victim, plan};
use skrull_kit::OwnedBuffers;
use skrull_kit::cases::with_policy;
use skrull_kit::check::independent_check;

const EXAMPLE: [u32; 9] = [1, 2, 2, 3, 4, 6, 9, 14, 30];

fn cfg(dp: u32, cp: u32, bucket: u32) -> Config {
    Config::new(dp, cp, bucket, ModelShape::QWEN2_5_0_5B)
}

/// Plans and checks with both checkers; returns (cp rank per sequence, micro-batch per
/// sequence, micro-batches per DP rank, rank token loads of every micro-batch).
#[allow(clippy::type_complexity)]
fn run(
    cfg: &Config,
    lengths: &[u32],
) -> Result<(Vec<i32>, Vec<u32>, Vec<u32>, Vec<Vec<u32>>), Error> {
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), cfg);
    let plan = bufs.schedule(cfg, lengths)?;
    assert_eq!(independent_check(cfg, lengths, &plan), Ok(()));
    assert_eq!(
        plan::check(&skrull_kit::setup_of(cfg), lengths, &plan),
        Ok(())
    );
    let ranks = plan.placements().iter().map(|p| p.cp_rank).collect();
    let mbs = plan.placements().iter().map(|p| p.micro_batch).collect();
    let loads = (0..plan.micro_batches().len())
        .map(|g| plan.rank_tokens(g).to_vec())
        .collect();
    Ok((ranks, mbs, plan.micro_batches_per_dp().to_vec(), loads))
}

/// Paper example 1 (N = 4, C = 24) through the whole scheduler: GDS keeps one micro-batch
/// and DACP reproduces the hand-worked placement with integer shares.
#[test]
fn paper_example_1_through_schedule() {
    let (ranks, mbs, per_dp, loads) = run(&cfg(1, 4, 24), &EXAMPLE).unwrap();
    assert_eq!(ranks, [0, 1, 2, -1, 0, 1, 2, 3, -1]);
    assert_eq!(mbs, [0; 9]);
    assert_eq!(per_dp, [1]);
    assert_eq!(loads, [vec![14, 17, 20, 23]]);
}

/// Paper example 2 (C = 20): one micro-batch is infeasible with integer shares (an all-sharded
/// GPU needs 22 tokens), so GDS must grow to two micro-batches; pinned so any change to the
/// interleave or DACP shows up here.
#[test]
fn paper_example_2_grows_to_two_micro_batches() {
    let (ranks, mbs, per_dp, loads) = run(&cfg(1, 4, 20), &EXAMPLE).unwrap();
    assert_eq!(per_dp, [2]);
    assert!(loads.iter().flatten().all(|&t| t <= 20));
    // Strided interleave of the ascending order: even ranks to micro-batch 0, odd to 1.
    assert_eq!(mbs, PINNED_EX2_MBS);
    assert_eq!(ranks, PINNED_EX2_RANKS);
}

/// A lone sequence of exactly C x N tokens shards to exactly C per GPU; one more token is
/// rejected with the bucket it would need (by `chunkflow`, which would run it chunked, with
/// the chunked peak it would hold).
#[test]
fn lone_sequence_of_exactly_c_times_n_is_sharded_and_one_more_is_rejected() {
    for policy in Policy::ALL {
        let mut c = with_policy(&cfg(1, 4, 24), policy);
        // Chunks of C x N tokens chunk nothing of 96 tokens.
        c.chunking.size = c.chunking.size.max(96 * u32::from(c.chunking.is_on()));
        let (ranks, _, per_dp, loads) = run(&c, &[96]).unwrap();
        assert_eq!(
            (ranks, per_dp, loads),
            (vec![-1], vec![1], vec![vec![24; 4]]),
            "{policy:?}"
        );
        // chunkflow would chunk 97 tokens as 96 + 1: a chunk's share of 24 plus a state of
        // ceil(97 * 64 / 1000) = 7 tokens over 4 GPUs is 26 per GPU.
        let want = if policy == Policy::ChunkFlow {
            Error::ChunkOverBudget {
                index: 1,
                len: 97,
                peak: 26,
            }
        } else {
            Error::SequenceTooLong {
                index: 1,
                len: 97,
                needed_bucket: 25,
            }
        };
        assert_eq!(run(&c, &[96, 97]).unwrap_err(), want, "{policy:?}");
    }
}

/// Found by the first property-test run: with zigzag padding a shard is at least 2 tokens, so
/// a budget of 1 token fits no sequence at all. Every policy must say which bucket it needs
/// (and accept the batch at that bucket) rather than fail inside DACP.
#[test]
fn zigzag_padding_with_a_one_token_budget_reports_the_bucket_it_needs() {
    for policy in Policy::ALL {
        let mut c = with_policy(&Config::new(2, 8, 1, ModelShape::QWEN2_5_7B), policy)
            .with_victim(Victim::Longest);
        c.shard_padding = ShardPadding::Zigzag;
        assert_eq!(
            run(&c, &[1]).unwrap_err(),
            Error::SequenceTooLong {
                index: 0,
                len: 1,
                needed_bucket: 2
            },
            "{policy:?}"
        );
        c.bucket = 2;
        assert!(run(&c, &[1]).is_ok(), "{policy:?}");
    }
}

/// An empty batch is a valid (empty) plan, and DP ranks beyond the batch size get zero
/// micro-batches rather than empty ones.
#[test]
fn empty_batches_and_idle_dp_ranks_get_zero_micro_batches() {
    for policy in Policy::ALL {
        let c = with_policy(&cfg(4, 2, 100), policy);
        let (ranks, _, per_dp, loads) = run(&c, &[]).unwrap();
        assert!(ranks.is_empty() && loads.is_empty(), "{policy:?}");
        assert_eq!(per_dp, [0; 4], "{policy:?}");
        let (_, _, per_dp, _) = run(&c, &[5, 7]).unwrap();
        assert_eq!(
            per_dp.iter().sum::<u32>(),
            per_dp.iter().filter(|&&m| m > 0).count() as u32
        );
        assert!(
            per_dp.iter().filter(|&&m| m == 0).count() >= 2,
            "{policy:?}: {per_dp:?}"
        );
    }
}

/// The micro-batch limit is an error naming the rank and the count it needed, never a
/// silently truncated plan.
#[test]
fn micro_batch_limit_names_the_rank_and_the_count_needed() {
    let mut c = cfg(1, 4, 24);
    c.max_micro_batches = 1;
    assert_eq!(
        run(&c, &EXAMPLE).map(|_| ()),
        Ok(()),
        "example 1 needs one micro-batch"
    );
    c.bucket = 20;
    assert_eq!(
        run(&c, &EXAMPLE).unwrap_err(),
        Error::MicroBatchLimit {
            dp_rank: 0,
            limit: 1,
            needed: 2
        }
    );
}

const PINNED_EX2_MBS: [u32; 9] = [0, 1, 0, 1, 0, 1, 0, 1, 0];
const PINNED_EX2_RANKS: [i32; 9] = [0, 0, 1, 1, 2, 2, 3, 3, -1];

/// Regression: `balanced`'s writer sorted every entry of the placements buffer by
/// micro-batch, not only the batch's `n`: a buffer larger than the batch (spare capacity,
/// or a previous larger batch's stale entries, as reusable Rust buffers hold) changed the
/// plan. Every policy must plan the same into exact and oversized, dirty buffers.
#[test]
fn balanced_plans_do_not_depend_on_spare_placement_capacity() {
    let lengths: Vec<u32> = (0..80u32)
        .map(|i| if i % 17 == 0 { 90_000 } else { 300 + i * 37 })
        .collect();
    for policy in skrull_kit::cases::POLICIES {
        let mut c = Config::recommended(2, 16, 13 * 1024, ModelShape::QWEN2_5_7B);
        c = with_policy(&c, policy);
        if policy == Policy::ChunkFlow {
            c.chunking = skrull_core::Chunking::new(8192, 1);
        }
        let setup = skrull_kit::setup_of(&c);
        let exact = OwnedBuffers::for_batch(lengths.len(), &c)
            .schedule(&c, &lengths)
            .map(|p| p.placements().to_vec());
        // A buffer twice as large that planned a larger batch first.
        let mut big = OwnedBuffers::for_batch(2 * lengths.len(), &c);
        let larger: Vec<u32> = lengths.iter().chain(&lengths).map(|&l| l / 2 + 1).collect();
        let _ = big.schedule(&c, &larger);
        let reused = big
            .schedule_prepared(&setup, &lengths)
            .map(|p| p.placements().to_vec());
        assert_eq!(exact, reused, "{policy:?}");
    }
}
