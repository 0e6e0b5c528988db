//! Criterion benchmarks: the latency targets, every policy, the evaluator and a
//! scaling series. Inputs and buffers are made once, outside the timed loops.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use skrull_benches::floor::Floor;
use skrull_benches::{chatqa2, config, lmsys};
use skrull_core::model::eval;
use skrull_core::{Config, Policy, policy::dacp};
use skrull_kit::batch::{DEFAULT_SEED, table1_lengths};
use skrull_kit::{OwnedBuffers, OwnedEval};

/// Times one full `schedule` call (validation, every DP rank's plan) on fixed inputs.
fn bench_schedule(c: &mut Criterion, group: &str, id: &str, cfg: Config, lengths: &[u32]) {
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
    // Fail loudly outside the timed loop if the input does not plan.
    if let Err(e) = bufs.schedule_no_grow(&cfg, lengths) {
        eprintln!("{group}/{id}: {e}");
        return;
    }
    c.benchmark_group(group).bench_function(id, |b| {
        b.iter(|| {
            let plan = bufs.schedule_no_grow(black_box(&cfg), black_box(lengths));
            black_box(plan.map(|p| p.summary()))
        })
    });
}

/// The latency targets (Skrull policy).
fn targets(c: &mut Criterion) {
    let skrull = Policy::Skrull;
    bench_schedule(
        c,
        "targets",
        "lmsys_256_dp4_cp8",
        config(4, skrull),
        &lmsys(256),
    );
    bench_schedule(
        c,
        "targets",
        "chatqa2_256_dp4_cp8",
        config(4, skrull),
        &chatqa2(256),
    );
    bench_schedule(
        c,
        "targets",
        "lmsys_4096_dp64_cp8",
        config(64, skrull),
        &lmsys(4096),
    );
    let big = lmsys(65_536);
    bench_schedule(
        c,
        "targets",
        "lmsys_65536_dp1024_cp8",
        config(1024, skrull),
        &big,
    );

    // DACP alone on one 64-sequence LMsys-like micro-batch.
    let cfg = config(1, skrull);
    let mb = lmsys(64);
    let (mut order, mut out) = (vec![0u32; mb.len()], vec![0i32; mb.len()]);
    if let Err(e) = dacp::place(&skrull_kit::setup_of(&cfg), &mb, &mut order, &mut out) {
        eprintln!("targets/dacp_64_cp8: {e}");
        return;
    }
    c.benchmark_group("targets")
        .bench_function("dacp_64_cp8", |b| {
            b.iter(|| {
                black_box(dacp::place(
                    black_box(&skrull_kit::setup_of(&cfg)),
                    black_box(&mb),
                    &mut order,
                    &mut out,
                ))
            })
        });
}

/// Every policy on the 256- and 4,096-sequence LMsys-like batches.
fn policies(c: &mut Criterion) {
    for (n, dp) in [(256usize, 4u32), (4096, 64)] {
        let lengths = lmsys(n);
        for p in Policy::ALL {
            let id = format!("{}_{n}_dp{dp}", p.name());
            bench_schedule(c, "policies", &id, config(dp, p), &lengths);
        }
    }
}

/// The evaluator on the Skrull plan of the 256- and 4,096-sequence batches.
fn evaluator(c: &mut Criterion) {
    for (n, dp) in [(256usize, 4u32), (4096, 64)] {
        let lengths = lmsys(n);
        let cfg = config(dp, Policy::Skrull);
        let mut bufs = OwnedBuffers::for_batch(n, &cfg);
        let placements = match bufs.schedule_no_grow(&cfg, &lengths) {
            Ok(plan) => plan.placements().to_vec(),
            Err(e) => {
                eprintln!("evaluate/{n}: {e}");
                continue;
            }
        };
        let mut ev = OwnedEval::for_batch(n, &cfg);
        c.benchmark_group("evaluate")
            .bench_function(format!("lmsys_{n}_dp{dp}"), |b| {
                b.iter(|| {
                    let r = eval::evaluate_placements(
                        black_box(&skrull_kit::setup_of(&cfg)),
                        black_box(&lengths),
                        black_box(&placements),
                        ev.buffers(),
                    );
                    black_box(r.map(|e| e.report))
                })
            });
    }
}

/// Skrull on 256 ... 65,536 LMsys-like sequences, 64 per DP rank, CP 8: sequences per second.
fn scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("scaling");
    for n in [256usize, 1024, 4096, 16_384, 65_536] {
        let lengths = lmsys(n);
        let cfg = config((n / 64) as u32, Policy::Skrull);
        let mut bufs = OwnedBuffers::for_batch(n, &cfg);
        if let Err(e) = bufs.schedule_no_grow(&cfg, &lengths) {
            eprintln!("scaling/{n}: {e}");
            continue;
        }
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &lengths, |b, l| {
            b.iter(|| {
                let plan = bufs.schedule_no_grow(black_box(&cfg), black_box(l));
                black_box(plan.map(|p| p.summary()))
            })
        });
    }
    g.finish();
}

/// The `balanced` policy on the 256-sequence paper batch of each Table 1 dataset
/// (DP 4, CP 8, BucketSize 26K), beside `skrull` on the same batch.
fn balanced(c: &mut Criterion) {
    for name in ["wikipedia", "lmsys", "chatqa2"] {
        let lengths = table1_lengths(name, DEFAULT_SEED, 256, 8, 26 * 1024);
        for p in [Policy::Balanced, Policy::Skrull] {
            let id = format!("{}_{name}_256_dp4", p.name());
            bench_schedule(c, "balanced", &id, config(4, p), &lengths);
        }
    }
    // Large CP groups on 8-GPU nodes: whole-group rings cross nodes, so `balanced` weighs
    // every aligned sub-group for each long sequence (docs: BENCHMARKS.md, "Sub-groups at
    // large CP").
    for cp in [16u32, 64, 256] {
        let lengths = table1_lengths("chatqa2", DEFAULT_SEED, 256, cp, 26 * 1024);
        let mut cfg = config(4, Policy::Balanced);
        cfg.cp = cp;
        let id = format!("balanced_chatqa2_256_dp4_cp{cp}");
        bench_schedule(c, "balanced", &id, cfg, &lengths);
    }
}

/// The floor (radix sort + one placement per sequence) beside every policy at the issue's
/// sizes, so the ratios to it are visible in one group per size.
fn floor(c: &mut Criterion) {
    let cases: [(&str, usize, u32); 4] = [
        ("256_dp4", 256, 4),
        ("4096_dp64", 4096, 64),
        ("65536_dp1024", 65_536, 1024),
        ("65536_dp65536", 65_536, 65_536),
    ];
    for (name, n, dp) in cases {
        let lengths = lmsys(n);
        let group = format!("floor_{name}");
        let mut f = Floor::new(n);
        c.benchmark_group(&group).bench_function("floor", |b| {
            b.iter(|| black_box(f.run(black_box(&lengths)).len()))
        });
        for policy in [
            Policy::DeepSpeed,
            Policy::Packed,
            Policy::Skrull,
            Policy::Balanced,
        ] {
            bench_schedule(c, &group, policy.name(), config(dp, policy), &lengths);
        }
    }
}

criterion_group!(
    benches, targets, policies, evaluator, scaling, balanced, floor
);
criterion_main!(benches);
