//! Proves the scheduling paths never touch the heap: a counting global allocator records
//! every allocation made on the test's own thread while the core runs on buffers allocated
//! beforehand.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

use skrull_core::model::eval;
use skrull_core::plan::layout::{self, Gpu, LayoutBuffers, LayoutRing, LayoutSizes, Span};
use skrull_core::{Config, ModelShape, Policy, ShardPadding, policy::dacp};
use skrull_kit::sample::TABLE1;
use skrull_kit::{OwnedBuffers, OwnedEval};

/// Counts allocations per thread, so the test harness's own threads do not disturb it.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the counter is a
// const-initialised thread-local `Cell` without a destructor, so touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations_during<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCS.with(Cell::get);
    let r = f();
    (ALLOCS.with(Cell::get) - before, r)
}

fn batches() -> Vec<(Config, Vec<u32>)> {
    let lmsys = &TABLE1[1];
    let chatqa2 = &TABLE1[2];
    let mut zig = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
    zig.shard_padding = ShardPadding::Zigzag;
    vec![
        (
            Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B),
            lmsys.batch(20250526, 256, 128 * 1024),
        ),
        (
            Config::new(8, 8, 26 * 1024, ModelShape::QWEN2_5_7B),
            chatqa2.batch(7, 512, 128 * 1024),
        ),
        (zig, lmsys.batch(3, 1024, 128 * 1024)),
        // A tight budget: many micro-batches and rollbacks.
        (
            Config::new(2, 4, 4096, ModelShape::QWEN2_5_0_5B),
            lmsys.batch(11, 300, 16 * 1024),
        ),
    ]
}

/// The counter itself works: a `Vec` allocation is seen.
#[test]
fn the_counter_sees_an_allocation() {
    let (n, v) = allocations_during(|| vec![1u8; 64]);
    assert_eq!(n, 1);
    assert_eq!(v.len(), 64);
}

#[test]
fn every_policy_schedules_without_allocating() {
    for (base, lengths) in batches() {
        for policy in Policy::ALL {
            let cfg = skrull_kit::cases::with_policy(&base, policy);
            let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
            let (n, ok) = allocations_during(|| {
                bufs.schedule_no_grow(&cfg, &lengths)
                    .map(|p| p.micro_batches().len())
            });
            assert!(ok.is_ok(), "{policy:?}: {ok:?}");
            assert_eq!(n, 0, "{policy:?} allocated {n} times");
        }
    }
}

#[test]
fn errors_do_not_allocate_either() {
    let cfg = Config::new(4, 8, 100, ModelShape::QWEN2_5_0_5B);
    let mut bufs = OwnedBuffers::for_batch(4, &cfg);
    let (n, r) = allocations_during(|| bufs.schedule_no_grow(&cfg, &[1, 0, 5000, 2]).is_err());
    assert!(r);
    assert_eq!(n, 0);
    let (n, r) = allocations_during(|| bufs.schedule_no_grow(&cfg, &[1; 5]).is_err());
    assert!(r, "five sequences into buffers for four must fail");
    assert_eq!(n, 0);
}

#[test]
fn dacp_place_does_not_allocate() {
    let cfg = Config::new(1, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
    let lengths = TABLE1[1].batch(5, 64, 8 * 26 * 1024);
    let mut order = vec![0u32; 64];
    let mut out = vec![0i32; 64];
    let (n, r) = allocations_during(|| {
        dacp::place(&skrull_kit::setup_of(&cfg), &lengths, &mut order, &mut out)
    });
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(n, 0);
}

#[test]
fn layout_fill_and_evaluate_do_not_allocate() {
    for (cfg, lengths) in batches() {
        let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
        let plan = bufs.schedule(&cfg, &lengths).unwrap();
        // Layout of every GPU of the first micro-batch of every DP rank.
        let sizes = LayoutSizes::max_for(lengths.len(), &cfg);
        let mut spans = vec![Span::default(); sizes.spans as usize];
        let mut local = vec![0i32; sizes.local_cu_seqlens as usize];
        let mut sharded = vec![0i32; sizes.sharded_cu_seqlens as usize];
        let mut padded = vec![0i32; sizes.sharded_cu_seqlens as usize];
        let mut rank = vec![0i32; sizes.sharded_cu_seqlens as usize];
        let mut positions = vec![0i32; sizes.positions as usize];
        let mut filled = 0;
        for mb in plan.micro_batches().iter().filter(|mb| mb.index == 0) {
            for cp_rank in 0..cfg.cp {
                let gpu = Gpu {
                    dp_rank: mb.dp_rank,
                    micro_batch: 0,
                    cp_rank,
                };
                let (n, r) = allocations_during(|| {
                    layout::fill(
                        &skrull_kit::setup_of(&cfg),
                        &lengths,
                        &plan,
                        gpu,
                        LayoutBuffers {
                            spans: &mut spans,
                            local_cu_seqlens: &mut local,
                            sharded_cu_seqlens: &mut sharded,
                            sharded_cu_seqlens_padded: &mut padded,
                            rank_cu_seqlens: &mut rank,
                            positions: &mut positions,
                            local_cu_seqlens_padded: &mut [],
                            gather_index: &mut [],
                            rings: &mut [LayoutRing::default(); 8],
                        },
                    )
                });
                assert!(r.is_ok(), "{gpu:?}: {r:?}");
                assert_eq!(n, 0, "layout::fill allocated");
                filled += 1;
            }
        }
        assert_eq!(filled, cfg.dp * cfg.cp);
        // The evaluator on the same plan.
        let mut ev = OwnedEval::for_batch(lengths.len(), &cfg);
        let (n, r) = allocations_during(|| {
            eval::evaluate(&skrull_kit::setup_of(&cfg), &lengths, &plan, ev.buffers())
                .map(|e| e.report.iteration_time)
        });
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(n, 0, "evaluate allocated");
    }
}
