//! The outlier-delay window over random epochs: every sample returned exactly once, never
//! before its batch nor more than `max_delay` steps after it, each step its batch less
//! deferred outliers plus released ones, the queue drained by the last step, the same steps
//! from the same batches whatever the slab held before, and a window resumed from its
//! queue mid-epoch continuing like the original. Checked by recounting from the pushed
//! batches and the documented outlier rule only.

#![allow(clippy::expect_used)] // a test: a refused valid batch is a failure

use quickcheck::{QuickCheck, TestResult};
use skrull_core::window::cost::{Costs, is_outlier};
use skrull_core::window::{Deferred, Window, WindowParams};
use skrull_core::{Config, ModelShape, Setup};
use skrull_kit::sample::{Dataset, Rng};

/// One random epoch: a setup, a window shape and its batches.
struct Epoch {
    setup: Setup,
    params: WindowParams,
    batches: Vec<Vec<u32>>,
}

fn epoch(seed: u64) -> Epoch {
    let mut rng = Rng::new(seed);
    let mut pick = |xs: &[u32]| xs[rng.below(xs.len() as u64) as usize];
    let dp = pick(&[1, 2, 2, 3, 4, 8]);
    let cp = pick(&[1, 2, 4, 8, 16]);
    let bucket = pick(&[4096, 13 * 1024, 26 * 1024]);
    let model = if pick(&[0, 1]) == 0 {
        ModelShape::QWEN2_5_0_5B
    } else {
        ModelShape::QWEN2_5_7B
    };
    let max_delay = pick(&[0, 1, 2, 3, 4, 8]);
    let per_dp = pick(&[1, 2, 5, 16, 40]);
    let steps = pick(&[1, 2, 7, 20, 40]) as usize;
    let cfg = Config::recommended(dp, cp, bucket, model);
    let setup = Setup::new(&cfg).expect("a valid configuration");
    let clip = (cp * bucket).min(128 * 1024);
    let datasets = Dataset::all();
    let mut rng = Rng::new(seed ^ 0x5EED);
    let data = datasets[rng.below(datasets.len() as u64) as usize];
    let capacity = dp * per_dp;
    let batches = (0..steps)
        .map(|k| {
            // Full batches, and now and then a short (or empty) last one.
            let n = if k + 1 == steps && rng.below(3) == 0 {
                rng.below(u64::from(capacity) + 1) as usize
            } else {
                capacity as usize
            };
            (0..n).map(|_| data.sample(&mut rng, clip)).collect()
        })
        .collect();
    Epoch {
        setup,
        params: WindowParams::new(max_delay, capacity),
        batches,
    }
}

/// What one step returned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Taken {
    positions: Vec<u64>,
    lengths: Vec<u32>,
    released: u32,
    deferred: u32,
    delay_sum: u64,
}

/// Runs the epoch through a window over a slab first filled with `fill`, keeping
/// `max_delay` batches pushed ahead; with `resume_at`, also returns the queue before that
/// step.
fn run(e: &Epoch, fill: u64, resume_at: Option<usize>) -> (Vec<Taken>, Vec<Deferred>) {
    let mut slab = vec![fill; e.params.words()];
    let mut w = Window::new(&e.setup, e.params, &mut slab).expect("enough storage");
    let mut saved = Vec::new();
    let mut taken = Vec::new();
    let ahead = e.params.max_delay as usize;
    let mut pushed = 0;
    for t in 0..e.batches.len() {
        while pushed < e.batches.len() && pushed <= t + ahead {
            w.push(&e.batches[pushed]).expect("a valid batch");
            pushed += 1;
        }
        if resume_at == Some(t) {
            saved = (0..w.state().queue_len())
                .map(|i| w.queued(i).expect("a queued sample"))
                .collect();
        }
        let s = w.step().expect("a pushed batch");
        taken.push(Taken {
            positions: s.positions.to_vec(),
            lengths: s.lengths.to_vec(),
            released: s.released,
            deferred: s.deferred,
            delay_sum: s.delay_sum,
        });
    }
    assert_eq!(w.state().queue_len(), 0, "the last step drains the queue");
    (taken, saved)
}

/// Checks one epoch's steps against its batches; returns the samples deferred.
fn check(e: &Epoch, steps: &[Taken]) -> Result<u64, String> {
    let costs = Costs::new(&e.setup);
    let dp = e.setup.config().dp;
    let w = u64::from(e.params.max_delay);
    // Every position's batch, length and whether the rule makes it an outlier.
    let mut origin = Vec::new();
    let mut length = Vec::new();
    let mut outlier = Vec::new();
    for (t, b) in e.batches.iter().enumerate() {
        let c: Vec<_> = b.iter().map(|&l| costs.of(l)).collect();
        let work = c.iter().fold(0u64, |s, x| s.saturating_add(x.work));
        for (i, &l) in b.iter().enumerate() {
            origin.push(t as u64);
            length.push(l);
            outlier.push(is_outlier(c[i].alone, work, dp, costs.floor()));
        }
    }
    if steps.len() != e.batches.len() {
        return Err(format!(
            "{} steps for {} batches",
            steps.len(),
            e.batches.len()
        ));
    }
    let mut seen = vec![false; length.len()];
    let mut deferred = 0u64;
    let mut first = 0u64;
    for (t, s) in steps.iter().enumerate() {
        let t = t as u64;
        let n = e.batches[t as usize].len() as u64;
        let batch = first..first + n;
        first += n;
        if s.positions.len() != s.lengths.len() || s.positions.len() > e.params.step_capacity() {
            return Err(format!("step {t}: {} samples", s.positions.len()));
        }
        let split = s.positions.len() - s.released as usize;
        let (own, released) = s.positions.split_at(split);
        // The batch's kept samples in order, then earlier ones in position order.
        let kept: Vec<u64> = batch.clone().filter(|p| own.contains(p)).collect();
        if own != kept.as_slice() || !released.windows(2).all(|p| p[0] < p[1]) {
            return Err(format!("step {t}: samples out of order"));
        }
        let missing: Vec<u64> = batch.filter(|p| !own.contains(p)).collect();
        if missing.len() as u32 != s.deferred {
            return Err(format!(
                "step {t}: {} deferred, {} missing",
                s.deferred,
                missing.len()
            ));
        }
        if let Some(p) = missing.iter().find(|&&p| !outlier[p as usize]) {
            return Err(format!("step {t}: deferred position {p} is no outlier"));
        }
        let mut delay = 0u64;
        for &p in released {
            let o = *origin.get(p as usize).ok_or("no such position")?;
            if o >= t || t - o > w {
                return Err(format!("step {t}: position {p} of step {o} released"));
            }
            delay += t - o;
        }
        if delay != s.delay_sum {
            return Err(format!(
                "step {t}: delay {} reported, {delay} counted",
                s.delay_sum
            ));
        }
        for (&p, &l) in s.positions.iter().zip(&s.lengths) {
            let i = p as usize;
            if i >= seen.len() || seen[i] || length[i] != l {
                return Err(format!(
                    "step {t}: position {p} repeated, unknown or relabelled"
                ));
            }
            seen[i] = true;
        }
        deferred += u64::from(s.deferred);
    }
    match seen.iter().position(|s| !s) {
        Some(p) => Err(format!("position {p} never returned")),
        None => Ok(deferred),
    }
}

#[test]
fn fifty_random_epochs_keep_every_guarantee() {
    let mut total = 0u64;
    let mut prop = |seed: u64| -> TestResult {
        let e = epoch(seed);
        let (a, _) = run(&e, 0, None);
        let (b, _) = run(&e, 0xDEAD_BEEF_DEAD_BEEF, None);
        if a != b {
            return TestResult::error("the same batches gave other steps");
        }
        match check(&e, &a) {
            Ok(d) => total += d,
            Err(msg) => return TestResult::error(msg),
        }
        // Resumed mid-epoch from its queue, the window returns the same remaining steps.
        let at = (seed % e.batches.len() as u64) as usize;
        let (_, queue) = run(&e, 0, Some(at));
        let mut p = e.params;
        p.first_step = at as u64;
        p.first_position = e.batches[..at].iter().map(|b| b.len() as u64).sum();
        let mut slab = vec![7u64; p.words()];
        let mut w = match Window::new(&e.setup, p, &mut slab) {
            Ok(w) => w,
            Err(err) => return TestResult::error(format!("{err}")),
        };
        if let Err(err) = w.requeue(&queue) {
            return TestResult::error(format!("requeue: {err}"));
        }
        let mut pushed = at;
        for (t, want) in a.iter().enumerate().skip(at) {
            while pushed < e.batches.len() && pushed <= t + e.params.max_delay as usize {
                w.push(&e.batches[pushed]).expect("a valid batch");
                pushed += 1;
            }
            let s = w.step().expect("a pushed batch");
            if s.positions != want.positions.as_slice() {
                return TestResult::error(format!("resumed at {at}: step {t} differs"));
            }
        }
        TestResult::passed()
    };
    // A fixed stream of 50 seeds (QuickCheck's generator feeds them), so a failure replays.
    let mut seeds = Rng::new(20250526);
    let mut failures = Vec::new();
    for _ in 0..50 {
        let seed = seeds.next_u64();
        let r = prop(seed);
        if r.is_failure() {
            failures.push(format!("seed {seed}: {r:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        total > 0,
        "no epoch deferred anything: the test checks nothing"
    );
    // And QuickCheck's own seeds, for breadth beyond the fixed stream.
    QuickCheck::new()
        .tests(50)
        .quickcheck(prop_fresh as fn(u64) -> TestResult);
}

fn prop_fresh(seed: u64) -> TestResult {
    let e = epoch(seed);
    let (a, _) = run(&e, 0, None);
    match check(&e, &a) {
        Ok(_) => TestResult::passed(),
        Err(msg) => TestResult::error(format!("seed {seed}: {msg}")),
    }
}
