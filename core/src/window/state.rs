//! [`WindowState`]: the window apart from its slab, and the three calls that change it:
//! `push`, `requeue` and `step` (which decides, in [`decide`], what runs now).

use super::cost::{Costs, LOAD_WORDS, Load, SeqCost, is_outlier};
use super::rows::{ALL, BASE, COUNT, FIRST, Layout, META, OUTLIER_BIT, Rows, carve, queued};
use super::{Deferred, Step, WindowError, WindowParams};
use crate::error::Error;
use crate::setup::Setup;

/// The window's state apart from its slab: the setup it estimates with, its parameters and
/// counters. Plain data (the C ABI keeps it in caller memory).
#[derive(Debug, Clone, Copy)]
pub struct WindowState {
    setup: Setup,
    params: WindowParams,
    lay: Layout,
    /// One micro-batch's floor, ps ([`Costs::floor`]).
    floor: u64,
    /// Slot of the current step's batch.
    head: usize,
    /// Batches pushed and not stepped (the current one first).
    loaded: usize,
    /// Index of the next step.
    step: u64,
    /// Position of the next pushed sample.
    next_position: u64,
    /// Samples in the queue.
    queue_len: usize,
}

impl WindowState {
    /// An empty window for `setup`.
    ///
    /// # Errors
    /// [`WindowError::Params`].
    pub fn new(setup: &Setup, params: WindowParams) -> Result<WindowState, WindowError> {
        params.validate()?;
        Ok(WindowState {
            setup: *setup,
            params,
            lay: Layout::of(&params),
            floor: Costs::new(setup).floor(),
            head: 0,
            loaded: 0,
            step: params.first_step,
            next_position: params.first_position,
            queue_len: 0,
        })
    }

    /// The setup the window estimates with (and [`Window::schedule_step`] plans with).
    ///
    /// [`Window::schedule_step`]: super::Window::schedule_step
    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The parameters.
    pub fn params(&self) -> &WindowParams {
        &self.params
    }

    /// Index of the next step.
    pub fn next_step(&self) -> u64 {
        self.step
    }

    /// Position of the next pushed sample.
    pub fn next_position(&self) -> u64 {
        self.next_position
    }

    /// Batches pushed and not yet stepped.
    pub fn pending(&self) -> usize {
        self.loaded
    }

    /// Samples in the queue.
    pub fn queue_len(&self) -> usize {
        self.queue_len
    }

    /// Deferred sample `i` of the queue, in position order (`None` past it).
    pub fn queued(&self, words: &[u64], i: usize) -> Option<Deferred> {
        if i >= self.queue_len {
            return None;
        }
        let (position, origin, length) = queued(&self.lay, words, i)?;
        Some(Deferred {
            position,
            length: length as u32,
            origin,
        })
    }

    /// Whether the counters fit the parameters (for a state kept in caller memory, which the
    /// caller may have overwritten).
    pub fn is_consistent(&self) -> bool {
        self.params.validate().is_ok()
            && self.lay == Layout::of(&self.params)
            && self.head < self.lay.s
            && self.loaded <= self.lay.s
            && self.queue_len <= self.lay.q
    }

    /// Checks that `words` is large enough.
    ///
    /// # Errors
    /// [`WindowError::Storage`].
    pub fn check_storage(&self, words: &[u64]) -> Result<(), WindowError> {
        let needed = self.lay.words();
        if words.len() < needed {
            return Err(WindowError::Storage {
                needed,
                got: words.len(),
            });
        }
        Ok(())
    }

    fn rows<'w>(&self, words: &'w mut [u64]) -> Result<Rows<'w>, WindowError> {
        self.check_storage(words)?;
        let got = words.len();
        carve(&self.lay, words).ok_or(WindowError::Storage {
            needed: self.lay.words(),
            got,
        })
    }

    /// Appends the next global batch, in sample order: its samples get the next positions.
    /// Push up to `max_delay` batches ahead of the step you take; the window defers only to
    /// batches it holds.
    ///
    /// # Errors
    /// [`WindowError::BatchTooLarge`], [`WindowError::Full`] (it holds `max_delay + 1`
    /// batches), [`WindowError::Batch`] (a length the budget refuses),
    /// [`WindowError::Storage`]. Nothing changes on error.
    pub fn push(&mut self, words: &mut [u64], lengths: &[u32]) -> Result<(), WindowError> {
        let too_large = WindowError::BatchTooLarge {
            count: lengths.len(),
            capacity: self.params.batch_capacity,
        };
        if lengths.len() > self.lay.b {
            return Err(too_large);
        }
        if self.loaded >= self.lay.s {
            return Err(WindowError::Full);
        }
        self.setup
            .budget()
            .check_lengths(lengths)
            .map_err(WindowError::Batch)?;
        let next = self
            .next_position
            .checked_add(lengths.len() as u64)
            .ok_or(too_large)?;
        let dp = self.setup.config().dp;
        let r = self.rows(words)?;
        let slot = (self.head + self.loaded) % self.lay.s;
        let at = slot * self.lay.b;
        let costs = Costs::new(&self.setup);
        let mut all = Load::default();
        for (i, &len) in lengths.iter().enumerate() {
            let c = costs.of(len);
            r.alone[at + i] = c.alone;
            r.work[at + i] = c.work;
            r.lens[at + i] = len;
            all.add(c);
        }
        let mut base = Load::default();
        for i in 0..lengths.len() {
            let c = SeqCost {
                alone: r.alone[at + i],
                work: r.work[at + i],
            };
            if is_outlier(c.alone, all.work, dp, self.floor) {
                r.lens[at + i] |= OUTLIER_BIT;
            } else {
                base.add(c);
            }
        }
        let meta = &mut r.meta[slot * META..(slot + 1) * META];
        meta[COUNT] = lengths.len() as u64;
        meta[FIRST] = self.next_position;
        base.write(&mut meta[BASE..BASE + LOAD_WORDS]);
        all.write(&mut meta[ALL..ALL + LOAD_WORDS]);
        self.loaded += 1;
        self.next_position = next;
        Ok(())
    }

    /// Puts deferred samples back in the queue, as [`WindowState::queued`] listed them
    /// (resuming a window saved mid-epoch: make a window with the saved step as
    /// `first_step` and the position of the first sample not yet pushed as
    /// `first_position`, requeue, then push the batches from that step on). Only while no
    /// batch is pushed. Each sample must come from an earlier step that its deadline has not
    /// passed (`origin < next_step <= origin + max_delay`), lie before `first_position`
    /// and after every queued sample, with a length the budget accepts.
    ///
    /// # Errors
    /// [`WindowError::Deferred`] naming the first sample refused (nothing is queued then),
    /// [`WindowError::Batch`] for a bad length, [`WindowError::Storage`].
    pub fn requeue(&mut self, words: &mut [u64], deferred: &[Deferred]) -> Result<(), WindowError> {
        self.requeue_with(words, deferred.len(), |i| deferred[i])
    }

    /// [`WindowState::requeue`] of `n` samples read by `at(0..n)` (the C ABI's entries,
    /// without copying them).
    ///
    /// # Errors
    /// As [`WindowState::requeue`].
    pub fn requeue_with(
        &mut self,
        words: &mut [u64],
        n: usize,
        at: impl Fn(usize) -> Deferred,
    ) -> Result<(), WindowError> {
        let mut last = match self.queue_len.checked_sub(1) {
            Some(i) => self.queued(words, i).map(|d| d.position),
            None => None,
        };
        let w = u64::from(self.params.max_delay);
        for index in 0..n {
            let d = at(index);
            let room = self.queue_len + index < self.lay.q;
            let ordered = last.is_none_or(|p| d.position > p) && d.position < self.next_position;
            let due = d.origin < self.step && d.origin.saturating_add(w) >= self.step;
            if self.loaded > 0 || !room || !ordered || !due {
                return Err(WindowError::Deferred { index });
            }
            self.setup
                .budget()
                .check_lengths(&[d.length])
                .map_err(|e| WindowError::Batch(reindex(e, index)))?;
            last = Some(d.position);
        }
        let r = self.rows(words)?;
        let costs = Costs::new(&self.setup);
        for index in 0..n {
            let d = at(index);
            let j = self.queue_len;
            let c = costs.of(d.length);
            r.q_pos[j] = d.position;
            r.q_origin[j] = d.origin;
            r.q_len[j] = u64::from(d.length);
            r.q_alone[j] = c.alone;
            r.q_work[j] = c.work;
            self.queue_len += 1;
        }
        Ok(())
    }

    /// Takes the next step: decides which outliers run now (`decide`) and returns the
    /// step's samples (valid until the next call on `words`).
    ///
    /// # Errors
    /// [`WindowError::Empty`], [`WindowError::Storage`].
    pub fn step<'w>(&mut self, words: &'w mut [u64]) -> Result<Step<'w>, WindowError> {
        if self.loaded == 0 {
            return Err(WindowError::Empty);
        }
        let r = self.rows(words)?;
        let counts = decide(self, r);
        let (n, step) = (counts.samples, self.step);
        self.queue_len = counts.queued;
        self.head = (self.head + 1) % self.lay.s;
        self.loaded -= 1;
        self.step = self.step.saturating_add(1);
        // The rows again, to hand out the output (the decision's borrow has ended).
        let r = self.rows(words)?;
        Ok(Step {
            index: step,
            positions: &r.out_pos[..n],
            lengths: &r.out_len[..n],
            released: counts.released as u32,
            deferred: counts.deferred as u32,
            delay_sum: counts.delay_sum,
            queued: counts.queued as u32,
        })
    }
}

/// `e`, raised for a one-sequence batch, naming sequence `index` instead.
fn reindex(e: Error, index: usize) -> Error {
    match e {
        Error::EmptySequence { .. } => Error::EmptySequence { index },
        Error::LengthOutOfRange { len, max, .. } => Error::LengthOutOfRange { index, len, max },
        Error::SequenceTooLong {
            len, needed_bucket, ..
        } => Error::SequenceTooLong {
            index,
            len,
            needed_bucket,
        },
        e => e,
    }
}

/// What [`decide`] wrote.
struct Counts {
    samples: usize,
    released: usize,
    deferred: usize,
    delay_sum: u64,
    queued: usize,
}

/// Decides the current step and writes its samples and the new queue into `r`.
///
/// Every candidate (a queued sample, or an outlier of the current batch) whose deadline is
/// now, or that has no later batch in the window to go to, runs now. The others, longest
/// alone first (ties: lower position), go where adding them raises the estimate
/// ([`Load::estimate`]) least: now, or a later batch of the window up to their deadline,
/// which is assumed to run all its own sequences and the candidates already sent there. Ties
/// go to the earlier slot, now first. A candidate sent later is queued (while the queue has
/// room) and decided again next step.
fn decide(st: &WindowState, r: Rows<'_>) -> Counts {
    let lay = st.lay;
    let (b, q) = (lay.b, lay.q);
    let dp = st.setup.config().dp;
    let w = u64::from(st.params.max_delay);
    let t = st.step;
    let horizon = (st.loaded - 1) as u64;
    let slot = |u: usize| (st.head + u) % lay.s;
    let load = |u: usize, at: usize| {
        let m = slot(u) * META + at;
        Load::read(&r.meta[m..m + LOAD_WORDS])
    };
    for u in 1..st.loaded {
        load(u, ALL).write(&mut r.acc[u * LOAD_WORDS..(u + 1) * LOAD_WORDS]);
    }
    let mut now = load(0, BASE);
    let at = slot(0) * b;
    // (At most `b` unless the slab was overwritten: then clamped, never out of bounds.)
    let count = (r.meta[slot(0) * META + COUNT] as usize).min(b);
    let first = r.meta[slot(0) * META + FIRST];
    // Candidates: (cost, position, last slot it may go to).
    let info = |c: u32| -> (SeqCost, u64, u64) {
        let c = c as usize;
        if c < q {
            let due = r.q_origin[c].saturating_add(w).saturating_sub(t);
            let cost = SeqCost {
                alone: r.q_alone[c],
                work: r.q_work[c],
            };
            (cost, r.q_pos[c], due.min(horizon))
        } else {
            let i = c - q;
            let cost = SeqCost {
                alone: r.alone[at + i],
                work: r.work[at + i],
            };
            (cost, first + i as u64, w.min(horizon))
        }
    };
    let outliers = (0..count as u32)
        .filter(|&i| r.lens[at + i as usize] & OUTLIER_BIT != 0)
        .map(|i| q as u32 + i);
    let mut open = 0usize;
    for c in (0..st.queue_len as u32).chain(outliers) {
        let (cost, _, last) = info(c);
        if last == 0 {
            r.dec[c as usize] = 0;
            now.add(cost);
        } else {
            r.cand[open] = c;
            open += 1;
        }
    }
    r.cand[..open].sort_unstable_by_key(|&c| {
        let (cost, pos, _) = info(c);
        (core::cmp::Reverse(cost.alone), pos)
    });
    let raise = |l: &Load, cost: SeqCost| {
        let mut with = *l;
        with.add(cost);
        with.estimate(dp, st.floor) - l.estimate(dp, st.floor)
    };
    let mut later = 0usize;
    for &c in r.cand[..open].iter() {
        let (cost, _, last) = info(c);
        let mut best = (raise(&now, cost), 0usize);
        for u in 1..=last as usize {
            let key = raise(&Load::read(&r.acc[u * LOAD_WORDS..]), cost);
            if key < best.0 {
                best = (key, u);
            }
        }
        let u = if later < q { best.1 } else { 0 };
        r.dec[c as usize] = u as u32;
        if u == 0 {
            now.add(cost);
        } else {
            later += 1;
            let acc = &mut r.acc[u * LOAD_WORDS..(u + 1) * LOAD_WORDS];
            let mut l = Load::read(acc);
            l.add(cost);
            l.write(acc);
        }
    }
    // The step: the batch's kept samples, then the released ones.
    let mut n = 0usize;
    let mut deferred = 0usize;
    for i in 0..count {
        let len = r.lens[at + i];
        if len & OUTLIER_BIT != 0 && r.dec[q + i] != 0 {
            deferred += 1;
            continue;
        }
        r.out_pos[n] = first + i as u64;
        r.out_len[n] = len & !OUTLIER_BIT;
        n += 1;
    }
    let (mut released, mut delay_sum, mut kept) = (0usize, 0u64, 0usize);
    for j in 0..st.queue_len {
        if r.dec[j] == 0 {
            r.out_pos[n] = r.q_pos[j];
            r.out_len[n] = r.q_len[j] as u32;
            delay_sum += t.saturating_sub(r.q_origin[j]);
            n += 1;
            released += 1;
        } else {
            r.q_pos[kept] = r.q_pos[j];
            r.q_origin[kept] = r.q_origin[j];
            r.q_len[kept] = r.q_len[j];
            r.q_alone[kept] = r.q_alone[j];
            r.q_work[kept] = r.q_work[j];
            kept += 1;
        }
    }
    for i in 0..count {
        if r.lens[at + i] & OUTLIER_BIT != 0 && r.dec[q + i] != 0 {
            r.q_pos[kept] = first + i as u64;
            r.q_origin[kept] = t;
            r.q_len[kept] = u64::from(r.lens[at + i] & !OUTLIER_BIT);
            r.q_alone[kept] = r.alone[at + i];
            r.q_work[kept] = r.work[at + i];
            kept += 1;
        }
    }
    Counts {
        samples: n,
        released,
        deferred,
        delay_sum,
        queued: kept,
    }
}
