//! The outlier-delay window through the C ABI: the same steps as the Rust API for the same
//! batches, and every bad input (NULLs, too-small storage and outputs, bad struct sizes,
//! junk and corrupted state, overlaps, a full or empty window, inconsistent deferred
//! samples) answered by a status, never a crash, with the state unchanged.
#![allow(clippy::unwrap_used)] // test helpers: a failure is a test failure

use core::ffi::c_void;
use core::ptr::{null, null_mut};

use skrull::*;
use skrull_core::window::{Window, WindowParams};
use skrull_core::{Config, ModelShape, Setup};

/// DP 2, CP 1, BucketSize 4096, 0.5B, `balanced`.
fn config() -> (skrull_config, Config) {
    let core = Config::recommended(2, 1, 4096, ModelShape::QWEN2_5_0_5B);
    (skrull_config::from_core(&core), core)
}

/// A prepared setup in its own buffer (kept alive by the caller).
fn prepare(c: &skrull_config) -> (Vec<u64>, *const skrull_setup) {
    // SAFETY: no arguments.
    let size = unsafe { skrull_setup_size() };
    let mut buf = vec![0u64; size.div_ceil(8)];
    let mut handle: *const skrull_setup = null();
    // SAFETY: live config, buffer of `size` bytes, handle slot.
    let st = unsafe {
        skrull_setup_init(
            c,
            buf.as_mut_ptr().cast(),
            buf.len() * 8,
            &mut handle,
            null_mut(),
        )
    };
    assert_eq!(st, skrull_status::Ok);
    (buf, handle)
}

fn params(max_delay: u32, batch_capacity: u32) -> skrull_window_params {
    skrull_window_params {
        struct_size: SKRULL_WINDOW_PARAMS_SIZE_V1,
        max_delay,
        batch_capacity,
        _reserved: 0,
        first_step: 0,
        first_position: 0,
    }
}

fn sizes(p: &skrull_window_params) -> (skrull_status, skrull_window_capacity) {
    let mut out = skrull_window_capacity::default();
    // SAFETY: live params and output.
    (unsafe { skrull_window_sizes(p, &mut out) }, out)
}

/// A window in C: its state and step outputs.
struct CWindow {
    state: Vec<u64>,
    positions: Vec<u64>,
    lengths: Vec<u32>,
}

impl CWindow {
    fn new(p: &skrull_window_params, setup: *const skrull_setup) -> CWindow {
        let (st, cap) = sizes(p);
        assert_eq!(st, skrull_status::Ok);
        let mut state = vec![0xA5A5_A5A5_A5A5_A5A5u64; cap.state_bytes / 8];
        // SAFETY: live params, setup handle, state of the stated size.
        let st = unsafe {
            skrull_window_init(
                p,
                setup,
                state.as_mut_ptr().cast(),
                cap.state_bytes,
                null_mut(),
            )
        };
        assert_eq!(st, skrull_status::Ok);
        CWindow {
            state,
            positions: vec![0; cap.step_capacity],
            lengths: vec![0; cap.step_capacity],
        }
    }

    fn state(&mut self) -> (*mut c_void, usize) {
        (self.state.as_mut_ptr().cast(), self.state.len() * 8)
    }

    fn push(&mut self, lengths: &[u32], info: &mut skrull_error_info) -> skrull_status {
        let (s, n) = self.state();
        // SAFETY: live state and lengths.
        unsafe { skrull_window_push(s, n, lengths.as_ptr(), lengths.len(), info) }
    }

    fn step(&mut self) -> Result<(Vec<u64>, Vec<u32>, skrull_window_step_info), skrull_status> {
        let mut out = skrull_window_step_info::default();
        let cap = self.positions.len();
        let (s, n) = self.state();
        // SAFETY: live state and outputs of `cap` elements.
        let st = unsafe {
            skrull_window_step(
                s,
                n,
                self.positions.as_mut_ptr(),
                self.lengths.as_mut_ptr(),
                cap,
                &mut out,
                null_mut(),
            )
        };
        if st != skrull_status::Ok {
            return Err(st);
        }
        let k = out.samples as usize;
        Ok((
            self.positions[..k].to_vec(),
            self.lengths[..k].to_vec(),
            out,
        ))
    }

    fn queue(&mut self) -> Vec<skrull_window_deferred> {
        let mut out = vec![skrull_window_deferred::default(); 64];
        let mut count = 0usize;
        let (s, n) = self.state();
        // SAFETY: live state and outputs.
        let st = unsafe { skrull_window_queue(s, n, out.as_mut_ptr(), 64, &mut count, null_mut()) };
        assert_eq!(st, skrull_status::Ok);
        out.truncate(count);
        out
    }
}

/// Batches with a giant now and then (the window defers some).
fn batches() -> Vec<Vec<u32>> {
    (0..12u32)
        .map(|k| {
            let mut b = vec![10 + k, 20, 30, 40, 50, 60];
            if k % 3 != 2 {
                b[(k % 6) as usize] = 3000 + 7 * k;
            }
            b
        })
        .collect()
}

#[test]
fn the_c_window_returns_the_rust_window_steps() {
    let (c, core) = config();
    let (_keep, setup) = prepare(&c);
    let p = params(3, 6);
    let mut w = CWindow::new(&p, setup);
    let rust_setup = Setup::new(&core).unwrap();
    let rp = WindowParams::new(3, 6);
    let mut slab = vec![0u64; rp.words()];
    let mut r = Window::new(&rust_setup, rp, &mut slab).unwrap();
    let b = batches();
    let mut info = skrull_error_info::of_status(skrull_status::Ok);
    let mut deferred = 0;
    let mut pushed = 0;
    for t in 0..b.len() {
        while pushed < b.len() && pushed <= t + 3 {
            assert_eq!(w.push(&b[pushed], &mut info), skrull_status::Ok);
            r.push(&b[pushed]).unwrap();
            pushed += 1;
        }
        let (pos, len, out) = w.step().unwrap();
        let want = r.step().unwrap();
        assert_eq!(
            (pos.as_slice(), len.as_slice()),
            (want.positions, want.lengths)
        );
        assert_eq!(
            (
                out.index,
                out.released,
                out.deferred,
                out.queued,
                out.delay_sum
            ),
            (
                want.index,
                want.released,
                want.deferred,
                want.queued,
                want.delay_sum
            )
        );
        deferred += out.deferred;
    }
    assert!(deferred > 0, "nothing deferred: the comparison is weak");
    assert_eq!(w.step().unwrap_err(), skrull_status::WindowEmpty);
}

#[test]
fn a_window_requeued_from_its_queue_resumes_the_same_steps() {
    let (c, _) = config();
    let (_keep, setup) = prepare(&c);
    let b = batches();
    let run = |from: Option<usize>| {
        let mut w = CWindow::new(&params(3, 6), setup);
        let mut info = skrull_error_info::of_status(skrull_status::Ok);
        let (mut steps, mut saved) = (Vec::new(), Vec::new());
        let mut pushed = 0;
        for t in 0..b.len() {
            while pushed < b.len() && pushed <= t + 3 {
                assert_eq!(w.push(&b[pushed], &mut info), skrull_status::Ok);
                pushed += 1;
            }
            if from == Some(t) {
                saved = w.queue();
            }
            steps.push(w.step().unwrap().0);
        }
        (steps, saved)
    };
    let (all, _) = run(None);
    let mut resumed_with_queue = false;
    for from in 1..b.len() {
        let (_, saved) = run(Some(from));
        resumed_with_queue |= !saved.is_empty();
        let mut p = params(3, 6);
        p.first_step = from as u64;
        p.first_position = 6 * from as u64;
        let mut w = CWindow::new(&p, setup);
        let (s, n) = w.state();
        // SAFETY: live state and entries.
        let st = unsafe { skrull_window_requeue(s, n, saved.as_ptr(), saved.len(), null_mut()) };
        assert_eq!(st, skrull_status::Ok);
        let mut info = skrull_error_info::of_status(skrull_status::Ok);
        let mut pushed = from;
        for (t, want) in all.iter().enumerate().skip(from) {
            while pushed < b.len() && pushed <= t + 3 {
                assert_eq!(w.push(&b[pushed], &mut info), skrull_status::Ok);
                pushed += 1;
            }
            assert_eq!(&w.step().unwrap().0, want, "from {from}, step {t}");
        }
    }
    assert!(resumed_with_queue);
}

#[test]
fn bad_params_are_refused_with_the_field() {
    let mut out = skrull_window_capacity::default();
    // SAFETY: NULL params: checked before any read.
    assert_eq!(
        unsafe { skrull_window_sizes(null(), &mut out) },
        skrull_status::NullArg
    );
    let p = params(2, 8);
    // SAFETY: live params; NULL output.
    assert_eq!(
        unsafe { skrull_window_sizes(&p, null_mut()) },
        skrull_status::NullArg
    );
    for (size, want) in [
        (8, skrull_status::BadStructSize),
        (31, skrull_status::BadStructSize),
        (5000, skrull_status::BadStructSize),
    ] {
        let q = skrull_window_params {
            struct_size: size,
            ..p
        };
        // A struct_size past ours must be readable: give 4096 zero bytes behind it.
        let mut big = vec![0u64; 600];
        // SAFETY: `big` holds the struct and zeros after it.
        unsafe { big.as_mut_ptr().cast::<skrull_window_params>().write(q) };
        // SAFETY: as above.
        let st = unsafe { skrull_window_sizes(big.as_ptr().cast(), &mut out) };
        assert_eq!(st, want, "struct_size {size}");
    }
    let reserved = skrull_window_params { _reserved: 1, ..p };
    assert_eq!(sizes(&reserved).0, skrull_status::InvalidArg);
    let (c, _) = config();
    let (_keep, setup) = prepare(&c);
    for (q, field, value, limit) in [
        (params(SKRULL_WINDOW_MAX_DELAY + 1, 8), 1, 65, 64),
        (params(2, 0), 2, 0, 65536),
        (params(2, 65537), 2, 65537, 65536),
    ] {
        assert_eq!(sizes(&q).0, skrull_status::InvalidWindowParams);
        let mut state = vec![0u64; 1 << 12];
        let mut info = skrull_error_info::of_status(skrull_status::Ok);
        // SAFETY: live arguments.
        let st = unsafe {
            skrull_window_init(
                &q,
                setup,
                state.as_mut_ptr().cast(),
                state.len() * 8,
                &mut info,
            )
        };
        assert_eq!(st, skrull_status::InvalidWindowParams);
        assert_eq!((info.field, info.value, info.limit), (field, value, limit));
    }
}

#[test]
fn bad_init_arguments_are_refused_and_write_nothing() {
    let (c, _) = config();
    let (_keep, setup) = prepare(&c);
    let p = params(2, 8);
    let (_, cap) = sizes(&p);
    let mut state = vec![7u64; cap.state_bytes / 8 + 1];
    let before = state.clone();
    let init = |setup: *const skrull_setup, state: *mut u64, size: usize| {
        // SAFETY: live params; the state pointer is live for `size` bytes or NULL.
        unsafe { skrull_window_init(&p, setup, state.cast(), size, null_mut()) }
    };
    let base = state.as_mut_ptr();
    assert_eq!(init(null(), base, cap.state_bytes), skrull_status::NullArg);
    let junk = [0u64; 64];
    assert_eq!(
        init(junk.as_ptr().cast(), base, cap.state_bytes),
        skrull_status::InvalidArg
    );
    assert_eq!(
        init(setup, null_mut(), cap.state_bytes),
        skrull_status::NullArg
    );
    // SAFETY: one byte past an aligned start, still inside the buffer.
    let odd = unsafe { base.cast::<u8>().add(1).cast::<u64>() };
    assert_eq!(init(setup, odd, cap.state_bytes), skrull_status::InvalidArg);
    assert_eq!(
        init(setup, base, cap.state_bytes - 8),
        skrull_status::WorkspaceTooSmall
    );
    assert_eq!(state, before);
    // The params inside the state: an overlap.
    // SAFETY: the state buffer holds the params' 32 bytes.
    unsafe { base.cast::<skrull_window_params>().write(p) };
    // SAFETY: live arguments.
    let st = unsafe {
        skrull_window_init(
            base.cast_const().cast(),
            setup,
            base.cast(),
            cap.state_bytes,
            null_mut(),
        )
    };
    assert_eq!(st, skrull_status::InvalidArg);
}

#[test]
fn bad_calls_on_a_window_are_refused_and_change_nothing() {
    let (c, _) = config();
    let (_keep, setup) = prepare(&c);
    let p = params(1, 4);
    let mut w = CWindow::new(&p, setup);
    let mut info = skrull_error_info::of_status(skrull_status::Ok);
    // Uninitialised, junk, corrupted or short state.
    let mut zeros = vec![0u64; w.state.len()];
    // SAFETY: live buffers.
    let st = unsafe {
        skrull_window_push(
            zeros.as_mut_ptr().cast(),
            zeros.len() * 8,
            [5].as_ptr(),
            1,
            &mut info,
        )
    };
    assert_eq!(st, skrull_status::WindowStateInvalid);
    let (s, n) = w.state();
    // SAFETY: NULL state: checked first.
    assert_eq!(
        unsafe { skrull_window_push(null_mut(), n, [5].as_ptr(), 1, &mut info) },
        skrull_status::NullArg
    );
    // SAFETY: a size below what the state was initialised with; the pointer is live.
    assert_eq!(
        unsafe { skrull_window_push(s, n - 8, [5].as_ptr(), 1, &mut info) },
        skrull_status::WindowStateInvalid
    );
    // SAFETY: a tiny size: only the marker region is considered.
    assert_eq!(
        unsafe { skrull_window_push(s, 8, [5].as_ptr(), 1, &mut info) },
        skrull_status::WindowStateInvalid
    );
    // Lengths: NULL, inside the state.
    // SAFETY: NULL lengths with n > 0: refused before reading.
    assert_eq!(
        unsafe { skrull_window_push(s, n, null(), 3, &mut info) },
        skrull_status::NullArg
    );
    // SAFETY: the lengths lie inside the state (refused as an overlap).
    let inside = unsafe { s.cast::<u32>().add(n / 4 - 4) };
    // SAFETY: as above.
    assert_eq!(
        unsafe { skrull_window_push(s, n, inside, 2, &mut info) },
        skrull_status::InvalidArg
    );
    // Too many, a bad length (with its index), a full window.
    assert_eq!(
        w.push(&[1, 2, 3, 4, 5], &mut info),
        skrull_status::WindowBatchTooLarge
    );
    assert_eq!((info.value, info.limit), (5, 4));
    assert_eq!(w.push(&[1, 0, 3], &mut info), skrull_status::EmptySequence);
    assert_eq!(info.index, 1);
    assert_eq!(
        w.push(&[9999, 1], &mut info),
        skrull_status::SequenceTooLong
    );
    assert_eq!(w.step().unwrap_err(), skrull_status::WindowEmpty);
    assert_eq!(w.push(&[3000, 1, 2, 3], &mut info), skrull_status::Ok);
    assert_eq!(w.push(&[3000, 1, 2, 3], &mut info), skrull_status::Ok);
    assert_eq!(w.push(&[1], &mut info), skrull_status::WindowFull);
    // Step outputs: too small, NULL, overlapping; nothing changes.
    let (s, n) = w.state();
    let mut out = skrull_window_step_info::default();
    let mut pos = vec![0u64; 8];
    let mut len = vec![0u32; 8];
    let step = |pos: *mut u64, len: *mut u32, cap: usize, out: *mut skrull_window_step_info| {
        // SAFETY: live state; outputs live for `cap` elements or NULL.
        unsafe { skrull_window_step(s, n, pos, len, cap, out, null_mut()) }
    };
    assert_eq!(
        step(pos.as_mut_ptr(), len.as_mut_ptr(), 7, &mut out),
        skrull_status::OutputTooSmall
    );
    assert_eq!(
        step(null_mut(), len.as_mut_ptr(), 8, &mut out),
        skrull_status::NullArg
    );
    assert_eq!(
        step(pos.as_mut_ptr(), len.as_mut_ptr(), 8, null_mut()),
        skrull_status::NullArg
    );
    assert_eq!(
        step(pos.as_mut_ptr(), pos.as_mut_ptr().cast(), 8, &mut out),
        skrull_status::InvalidArg
    );
    assert_eq!(
        step(s.cast(), len.as_mut_ptr(), 8, &mut out),
        skrull_status::InvalidArg
    );
    // The queue listing: NULL count, too small.
    let mut count = 0usize;
    // SAFETY: live state; NULL count.
    assert_eq!(
        unsafe { skrull_window_queue(s, n, null_mut(), 0, null_mut(), null_mut()) },
        skrull_status::NullArg
    );
    // SAFETY: live state and count; no entries needed (the queue is empty).
    assert_eq!(
        unsafe { skrull_window_queue(s, n, null_mut(), 0, &mut count, null_mut()) },
        skrull_status::Ok
    );
    assert_eq!(count, 0);
    // After all that, the window steps as a fresh one would.
    let (pos1, _, info1) = w.step().unwrap();
    assert_eq!((pos1, info1.deferred), (vec![1, 2, 3], 1));
    let mut entries = vec![skrull_window_deferred::default(); 1];
    let (s, n) = w.state();
    let mut e = skrull_error_info::of_status(skrull_status::Ok);
    // SAFETY: live state; room for 0 of the 1 queued.
    assert_eq!(
        unsafe { skrull_window_queue(s, n, entries.as_mut_ptr(), 0, &mut count, &mut e) },
        skrull_status::OutputTooSmall
    );
    assert_eq!((e.value, e.limit), (1, 0));
    // Requeue: only into an empty window, consistent entries, zero _reserved.
    // SAFETY: live state and entries.
    let st = unsafe { skrull_window_requeue(s, n, entries.as_ptr(), 1, &mut e) };
    assert_eq!(st, skrull_status::InvalidDeferred);
    assert_eq!(e.index, 0);
    entries[0]._reserved = 1;
    // SAFETY: live state and entries.
    let st = unsafe { skrull_window_requeue(s, n, entries.as_ptr(), 1, &mut e) };
    assert_eq!(st, skrull_status::InvalidArg);
    // SAFETY: NULL entries with n > 0.
    let st = unsafe { skrull_window_requeue(s, n, null(), 1, &mut e) };
    assert_eq!(st, skrull_status::NullArg);
    let (pos2, _, info2) = w.step().unwrap();
    assert_eq!((pos2, info2.released), (vec![4, 5, 6, 7, 0], 1));
    // Requeue into a resumed window: a sample past its deadline, a zero length.
    let mut p2 = params(1, 4);
    p2.first_step = 3;
    p2.first_position = 12;
    let mut fresh = CWindow::new(&p2, setup);
    let mut bad = [skrull_window_deferred {
        position: 0,
        origin: 0,
        length: 5,
        _reserved: 0,
    }];
    let (s, n) = fresh.state();
    // SAFETY: live state and entries (origin 0 is past its deadline at step 3).
    let st = unsafe { skrull_window_requeue(s, n, bad.as_ptr(), 1, &mut e) };
    assert_eq!(st, skrull_status::InvalidDeferred);
    bad[0].origin = 2;
    bad[0].length = 0;
    // SAFETY: as above (a zero length).
    let st = unsafe { skrull_window_requeue(s, n, bad.as_ptr(), 1, &mut e) };
    assert_eq!((st, e.index), (skrull_status::EmptySequence, 0));
}
