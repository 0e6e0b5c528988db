//! Unit tests of the window.

use super::*;
use crate::config::Config;
use crate::config::shape::ModelShape;
use std::vec;
use std::vec::Vec;

fn setup(dp: u32) -> Setup {
    Setup::new(&Config::recommended(dp, 1, 4096, ModelShape::QWEN2_5_0_5B)).unwrap()
}

#[test]
fn two_lone_giants_run_together() {
    let s = setup(2);
    let params = WindowParams::new(1, 4);
    let mut slab = vec![0u64; params.words()];
    let mut w = Window::new(&s, params, &mut slab).unwrap();
    w.push(&[4000, 10, 10, 10]).unwrap();
    w.push(&[4000, 10, 10, 10]).unwrap();
    let a = w.step().unwrap();
    assert_eq!(
        (a.positions, a.deferred, a.queued),
        (&[1u64, 2, 3][..], 1, 1)
    );
    let b = w.step().unwrap();
    assert_eq!(b.positions, &[4, 5, 6, 7, 0]);
    assert_eq!((b.released, b.delay_sum, b.queued), (1, 1, 0));
    assert_eq!(w.step().unwrap_err(), WindowError::Empty);
}

#[test]
fn zero_delay_passes_batches_through() {
    let s = setup(4);
    let params = WindowParams::new(0, 8);
    let mut slab = vec![0u64; params.words()];
    let mut w = Window::new(&s, params, &mut slab).unwrap();
    w.push(&[4000, 1, 2]).unwrap();
    assert_eq!(w.push(&[1]).unwrap_err(), WindowError::Full);
    let a = w.step().unwrap();
    assert_eq!((a.lengths, a.deferred), (&[4000u32, 1, 2][..], 0));
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = setup(2);
    assert!(matches!(
        WindowParams::new(MAX_DELAY + 1, 4).validate(),
        Err(WindowError::Params {
            field: WindowField::MaxDelay,
            ..
        })
    ));
    assert!(WindowParams::new(1, 0).validate().is_err());
    let params = WindowParams::new(2, 3);
    let mut short = vec![0u64; params.words() - 1];
    assert!(matches!(
        Window::new(&s, params, &mut short),
        Err(WindowError::Storage { .. })
    ));
    let mut slab = vec![0u64; params.words()];
    let mut w = Window::new(&s, params, &mut slab).unwrap();
    assert!(matches!(
        w.push(&[1, 2, 3, 4]),
        Err(WindowError::BatchTooLarge {
            count: 4,
            capacity: 3
        })
    ));
    assert_eq!(
        w.push(&[5, 0]).unwrap_err(),
        WindowError::Batch(Error::EmptySequence { index: 1 })
    );
    assert_eq!(w.state().pending(), 0);
    assert_eq!(w.state().next_position(), 0);
}

#[test]
fn a_requeued_window_continues_like_the_original() {
    let s = setup(2);
    let batches: Vec<Vec<u32>> = (0..12u32)
        .map(|k| {
            let mut b = vec![10 + k, 20, 30, 40];
            if k % 3 != 1 {
                b[(k % 4) as usize] = 3000 + k;
            }
            b
        })
        .collect();
    let params = WindowParams::new(3, 4);
    let run = |from: usize| {
        let mut slab = vec![0u64; params.words()];
        let mut w = Window::new(&s, params, &mut slab).unwrap();
        let mut steps = Vec::new();
        let mut saved = None;
        let mut pushed = 0;
        for t in 0..batches.len() {
            while pushed < batches.len() && pushed <= t + 3 {
                w.push(&batches[pushed]).unwrap();
                pushed += 1;
            }
            if t == from {
                let q: Vec<Deferred> = (0..w.state().queue_len())
                    .map(|i| w.queued(i).unwrap())
                    .collect();
                saved = Some(q);
            }
            steps.push(w.step().unwrap().positions.to_vec());
        }
        (steps, saved)
    };
    let (all, _) = run(usize::MAX);
    let mut nonempty = false;
    for from in [1usize, 5, 8] {
        let (_, saved) = run(from);
        let queue = saved.unwrap();
        nonempty |= !queue.is_empty();
        let mut p = params;
        p.first_step = from as u64;
        p.first_position = 4 * from as u64;
        let mut slab = vec![0u64; p.words()];
        let mut w = Window::new(&s, p, &mut slab).unwrap();
        w.requeue(&queue).unwrap();
        let mut pushed = from;
        for (t, want) in all.iter().enumerate().skip(from) {
            while pushed < batches.len() && pushed <= t + 3 {
                w.push(&batches[pushed]).unwrap();
                pushed += 1;
            }
            let got = w.step().unwrap();
            assert_eq!(got.positions, &want[..], "from {from}, step {t}");
        }
    }
    assert!(nonempty, "no resume point had a deferred sample");
}

#[test]
fn requeue_refuses_inconsistent_samples() {
    let s = setup(2);
    let mut p = WindowParams::new(2, 4);
    p.first_step = 5;
    p.first_position = 20;
    let mut slab = vec![0u64; p.words()];
    let mut w = Window::new(&s, p, &mut slab).unwrap();
    let ok = Deferred {
        position: 12,
        length: 100,
        origin: 3,
    };
    for bad in [
        Deferred { origin: 5, ..ok },    // not from an earlier step
        Deferred { origin: 2, ..ok },    // past its deadline
        Deferred { position: 20, ..ok }, // not before the next push
    ] {
        assert_eq!(
            w.requeue(&[ok, bad]),
            Err(WindowError::Deferred { index: 1 })
        );
        assert_eq!(w.state().queue_len(), 0);
    }
    assert_eq!(
        w.requeue(&[
            ok,
            Deferred {
                position: 13,
                length: 0,
                origin: 4
            }
        ]),
        Err(WindowError::Batch(Error::EmptySequence { index: 1 }))
    );
    assert_eq!(
        w.requeue(&[ok, ok]),
        Err(WindowError::Deferred { index: 1 })
    );
    w.requeue(&[ok]).unwrap();
    assert_eq!(w.queued(0), Some(ok));
    w.push(&[1]).unwrap();
    assert_eq!(
        w.requeue(&[Deferred { position: 13, ..ok }]),
        Err(WindowError::Deferred { index: 0 })
    );
}

/// Regression: with `alone` including the weight-streaming floor of a micro-batch (the
/// memory-bound roofline) and the share only the fixed cost, every short sequence was an
/// outlier and a batch of them was deferred whole (the step came back empty).
#[test]
fn a_batch_of_short_equal_sequences_runs_in_its_own_step() {
    let s = Setup::new(&Config::recommended(2, 2, 4096, ModelShape::QWEN2_5_0_5B)).unwrap();
    let params = WindowParams::new(3, 16);
    let mut slab = vec![0u64; params.words()];
    let mut w = Window::new(&s, params, &mut slab).unwrap();
    for _ in 0..4 {
        w.push(&[10; 16]).unwrap();
    }
    let a = w.step().unwrap();
    assert_eq!((a.positions.len(), a.deferred), (16, 0));
}
