//! Measures the stack one `schedule` call uses, by painting: a thread with a known stack
//! fills the unused stack below its frame with a pattern, runs the call, then finds the
//! deepest word the call overwrote.
//!
//! `cargo run --release -p skrull-benches --example stack_use`

use std::hint::black_box;

use skrull_benches::{chatqa2, config, lmsys};
use skrull_core::{Chunking, Config, Policy, policy::dacp};
use skrull_kit::OwnedBuffers;

const PATTERN: u64 = 0x5AFE_C0DE_D00D_F00D;
/// Bytes painted below the measuring frame (the thread has 8 MiB).
const PAINT: usize = 2 << 20;

/// Paints `[top - PAINT, own frame - 512)` with the pattern.
#[inline(never)]
fn paint(top: usize) {
    let own = black_box(0u64);
    let limit = (&own as *const u64 as usize - 512) & !7;
    let mut a = (top - PAINT) & !7;
    while a < limit {
        // SAFETY: the range lies inside this thread's 8 MiB stack mapping, below every live
        // frame (ours ends above `limit`), so nothing reads it before it is overwritten.
        unsafe { (a as *mut u64).write_volatile(PATTERN) };
        a += 8;
    }
}

/// Stack bytes `f` uses below this frame.
#[inline(never)]
fn measure(f: &mut dyn FnMut()) -> usize {
    let marker = black_box(0u64);
    let top = &marker as *const u64 as usize;
    paint(top);
    f();
    let mut a = (top - PAINT) & !7;
    while a < top {
        // SAFETY: as in `paint`: inside the stack mapping, below the live frames.
        if unsafe { (a as *const u64).read_volatile() } != PATTERN {
            break;
        }
        a += 8;
    }
    top - a
}

fn on_thread(name: &str, f: impl FnMut() + Send + 'static) {
    let mut f = f;
    let used = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            // Calibrate: the depth a call that does nothing reaches.
            let empty = measure(&mut || {});
            (measure(&mut f), empty)
        })
        .ok()
        .and_then(|h| h.join().ok());
    match used {
        Some((bytes, empty)) => println!(
            "{name:<40} {:>7} bytes ({:.1} KiB; an empty call: {empty} bytes)",
            bytes,
            bytes as f64 / 1024.0
        ),
        None => println!("{name}: measurement failed"),
    }
}

fn schedule_case(name: &str, cfg: Config, lengths: Vec<u32>) {
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
    on_thread(name, move || {
        let r = bufs.schedule_no_grow(&cfg, black_box(&lengths));
        black_box(r.map(|p| p.summary()).ok());
    });
}

fn main() {
    for p in Policy::ALL {
        let mut cfg = config(4, p);
        if p == Policy::ChunkFlow {
            cfg.chunking = Chunking::new(8192, 1);
        }
        schedule_case(&format!("{} 256 LMsys DP4 CP8", p.name()), cfg, lmsys(256));
    }
    // Chunking on: balanced's chunk pass keeps per-CP-rank loads on the stack.
    let mut chunked = config(4, Policy::Balanced);
    chunked.chunking = Chunking::new(8192, 1);
    schedule_case(
        "balanced 256 ChatQA2 DP4 CP8 chunking",
        chunked,
        chatqa2(256),
    );
    schedule_case(
        "skrull 256 ChatQA2 DP4 CP8",
        config(4, Policy::Skrull),
        chatqa2(256),
    );
    schedule_case(
        "skrull 65536 LMsys DP1024 CP8",
        config(1024, Policy::Skrull),
        lmsys(65_536),
    );
    // CP at its maximum: per-CP-rank state is sized for MAX_CP either way.
    let mut wide = config(4, Policy::Skrull);
    wide.cp = skrull_core::config::MAX_CP;
    schedule_case("skrull 4096 LMsys DP4 CP256", wide, lmsys(4096));
    // balanced at CP 256: rings cross nodes, so it shards over sub-groups (its group pick keeps
    // three per-CP-rank rows).
    let mut wide = config(4, Policy::Balanced);
    wide.cp = skrull_core::config::MAX_CP;
    schedule_case("balanced 4096 LMsys DP4 CP256", wide, lmsys(4096));
    let setup = skrull_kit::setup_of(&config(1, Policy::Skrull));
    let mb = lmsys(64);
    on_thread("dacp::place 64 LMsys CP8", move || {
        let (mut order, mut out) = ([0u32; 64], [0i32; 64]);
        black_box(dacp::place(&setup, black_box(&mb), &mut order, &mut out).ok());
    });
}
