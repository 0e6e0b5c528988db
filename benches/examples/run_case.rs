//! Runs one benchmark input many times, for profilers (callgrind, perf):
//! `[POLICY=name|floor] [SETUP=reuse] [CP=n] run_case {lmsys256|chatqa256|lmsys4096|lmsys65536|dp65536|dacp64} [iterations]`.

use std::hint::black_box;

use skrull_benches::floor::Floor;
use skrull_benches::{chatqa2, config, lmsys};
use skrull_core::{Policy, policy::dacp};
use skrull_kit::OwnedBuffers;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "lmsys4096".into());
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let (lengths, dp) = match case.as_str() {
        "lmsys256" => (lmsys(256), 4),
        "chatqa256" => (chatqa2(256), 4),
        "lmsys4096" => (lmsys(4096), 64),
        "lmsys65536" => (lmsys(65_536), 1024),
        "dacp64" => (lmsys(64), 1),
        "dp65536" => (lmsys(65_536), 65_536),
        other => {
            eprintln!("unknown case {other}");
            std::process::exit(2);
        }
    };
    // POLICY=name picks the policy (default skrull).
    let policy = std::env::var("POLICY")
        .ok()
        .and_then(|p| Policy::from_name(&p))
        .unwrap_or(Policy::Skrull);
    let mut cfg = config(dp, policy);
    // CP=n sets the CP group size (default 8); ChatQA2 lengths are clipped to its capacity.
    if let Some(cp) = std::env::var("CP").ok().and_then(|s| s.parse().ok()) {
        cfg.cp = cp;
    }
    let lengths = if case == "chatqa256" && cfg.cp != 8 {
        skrull_kit::batch::table1_lengths(
            "chatqa2",
            skrull_kit::batch::DEFAULT_SEED,
            256,
            cfg.cp,
            cfg.bucket,
        )
    } else {
        lengths
    };
    if case == "dacp64" {
        let (mut order, mut out) = (vec![0u32; 64], vec![0i32; 64]);
        let setup = skrull_kit::setup_of(&cfg);
        let rounds: usize = std::env::var("TIME")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let mut per_call = Vec::new();
        for _ in 0..rounds {
            let t = std::time::Instant::now();
            for _ in 0..iters {
                let _ = black_box(dacp::place(
                    &setup,
                    black_box(&lengths),
                    &mut order,
                    &mut out,
                ));
            }
            per_call.push(t.elapsed().as_secs_f64() / iters.max(1) as f64);
        }
        per_call.sort_by(f64::total_cmp);
        let (min, med) = (per_call[0], per_call[per_call.len() / 2]);
        println!(
            "{case}: min {:.3} us, median {:.3} us",
            min * 1e6,
            med * 1e6
        );
        return;
    }
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
    // SETUP=reuse plans every call with one prepared `Setup` (what a trainer does); by
    // default each call prepares its own (the stateless `skrull_schedule` path).
    let reuse = std::env::var("SETUP").as_deref() == Ok("reuse");
    let Ok(setup) = skrull_core::Setup::new(&cfg) else {
        eprintln!("invalid benchmark configuration");
        std::process::exit(2);
    };
    // POLICY=floor runs the floor instead (radix sort + one placement per sequence).
    let mut floor =
        (std::env::var("POLICY").as_deref() == Ok("floor")).then(|| Floor::new(lengths.len()));
    let mut mbs = 0;
    // With TIME=rounds: the least and the median per-call time over `rounds` rounds of
    // `iterations` calls (the least is robust to other processes on the machine).
    let rounds: usize = std::env::var("TIME")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut per_call = Vec::new();
    for _ in 0..rounds {
        let t = std::time::Instant::now();
        for _ in 0..iters {
            if let Some(f) = floor.as_mut() {
                mbs = black_box(f.run(black_box(&lengths)).len()) as u32;
            } else if reuse {
                if let Ok(p) = bufs.core().schedule_no_grow(&setup, black_box(&lengths)) {
                    mbs = black_box(p.summary().micro_batches);
                }
            } else if let Ok(p) = bufs.schedule_no_grow(&cfg, black_box(&lengths)) {
                mbs = black_box(p.summary().micro_batches);
            }
        }
        per_call.push(t.elapsed().as_secs_f64() / iters.max(1) as f64);
    }
    per_call.sort_by(f64::total_cmp);
    let (min, med) = (per_call[0], per_call[per_call.len() / 2]);
    println!(
        "{case}: {mbs} micro-batches, min {:.3} us, median {:.3} us",
        min * 1e6,
        med * 1e6
    );
}
