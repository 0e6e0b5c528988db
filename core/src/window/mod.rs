//! The outlier-delay window: across global batches, a sequence that alone outlasts its
//! batch's fair share per DP rank (an *outlier*, [`cost`]) may run up to `max_delay` steps
//! later, beside other outliers, so that no DP rank waits on one batch's giant sequence
//! (`docs/outlier_delay.md`).
//!
//! The caller pushes global batches in sample order ([`Window::push`]) and keeps up to
//! `max_delay` batches pushed ahead of the step it takes ([`Window::step`]). Each step
//! returns the samples to train now: the current batch less the outliers it defers, plus
//! deferred outliers released from the queue. Guarantees:
//!
//! - every pushed sample is returned by exactly one step;
//! - a sample pushed in batch `t` is returned by step `t + max_delay` at the latest (a step
//!   with no batch pushed after it returns the whole queue: the epoch's last step drains it);
//! - a step's samples differ from its batch only by deferred outliers out and queued
//!   outliers in;
//! - decisions are integer arithmetic on the lengths and the setup only: every rank that
//!   pushes the same batches gets the same steps.
//!
//! No allocation: the caller lends a slab of `u64` words ([`WindowParams::words`]). The state
//! apart from the slab is plain data ([`WindowState`]), which the C ABI keeps in caller
//! memory beside the slab; [`Window`] holds both for Rust callers.

pub mod cost;
mod rows;
mod state;

use core::fmt;

use crate::config::MAX_SEQS;
use crate::error::Error;
use crate::plan::{Plan, PlanBuffers};
use crate::setup::Setup;
use crate::setup::workspace::Workspace;

pub use state::WindowState;

/// The longest `max_delay` accepted.
pub const MAX_DELAY: u32 = 64;

/// A window's shape and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowParams {
    /// The most steps a sample may be delayed, `0..=MAX_DELAY` (0: never). The window holds
    /// the current batch and up to this many batches ahead.
    pub max_delay: u32,
    /// The most sequences one pushed batch may hold, `1..=MAX_SEQS`.
    pub batch_capacity: u32,
    /// The index of the first step (0 for a new epoch; the resumed step when resuming).
    pub first_step: u64,
    /// The position of the first sample pushed (0 for a new epoch).
    pub first_position: u64,
}

impl WindowParams {
    /// A window from step 0 and position 0.
    pub fn new(max_delay: u32, batch_capacity: u32) -> WindowParams {
        WindowParams {
            max_delay,
            batch_capacity,
            first_step: 0,
            first_position: 0,
        }
    }

    /// Checks the ranges.
    ///
    /// # Errors
    /// [`WindowError::Params`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), WindowError> {
        if self.max_delay > MAX_DELAY {
            return Err(WindowError::Params {
                field: WindowField::MaxDelay,
                value: u64::from(self.max_delay),
                max: u64::from(MAX_DELAY),
            });
        }
        if self.batch_capacity == 0 || self.batch_capacity as usize > MAX_SEQS {
            return Err(WindowError::Params {
                field: WindowField::BatchCapacity,
                value: u64::from(self.batch_capacity),
                max: MAX_SEQS as u64,
            });
        }
        Ok(())
    }

    /// The most deferred samples the queue holds: `max_delay x batch_capacity`, but no more
    /// than keeps a step within `MAX_SEQS` sequences. When it is full, outliers run in their
    /// own step.
    pub fn queue_capacity(&self) -> usize {
        let b = self.batch_capacity as usize;
        (self.max_delay as usize)
            .saturating_mul(b)
            .min(MAX_SEQS.saturating_sub(b))
    }

    /// The most samples one step returns: `batch_capacity + queue_capacity`.
    pub fn step_capacity(&self) -> usize {
        self.batch_capacity as usize + self.queue_capacity()
    }

    /// Words of the slab the window needs (valid parameters).
    pub fn words(&self) -> usize {
        rows::Layout::of(self).words()
    }
}

/// A [`WindowParams`] field, as errors name it (the C ABI reports `number()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowField {
    /// `max_delay`.
    MaxDelay,
    /// `batch_capacity`.
    BatchCapacity,
}

impl WindowField {
    /// The field's 1-based position after `struct_size` in `skrull_window_params`.
    pub fn number(self) -> u32 {
        match self {
            WindowField::MaxDelay => 1,
            WindowField::BatchCapacity => 2,
        }
    }
}

/// A deferred sample, as [`WindowState::queued`] reports it and [`Window::requeue`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deferred {
    /// Its position in push order.
    pub position: u64,
    /// Its length, tokens.
    pub length: u32,
    /// The step its batch belonged to.
    pub origin: u64,
}

/// One step: the samples to train now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<'a> {
    /// The step's index.
    pub index: u64,
    /// The samples' positions: the current batch's kept samples in batch order, then the
    /// released deferred ones in position order.
    pub positions: &'a [u64],
    /// Their lengths (plan these).
    pub lengths: &'a [u32],
    /// How many of them (the last ones) were deferred from earlier steps.
    pub released: u32,
    /// Outliers of the current batch deferred to a later step.
    pub deferred: u32,
    /// The released samples' delays summed, steps.
    pub delay_sum: u64,
    /// Samples in the queue after this step.
    pub queued: u32,
}

/// Why a window call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowError {
    /// A [`WindowParams`] field is out of range.
    Params {
        /// The field.
        field: WindowField,
        /// Its value.
        value: u64,
        /// Its largest accepted value.
        max: u64,
    },
    /// The slab is shorter than [`WindowParams::words`].
    Storage {
        /// Words needed.
        needed: usize,
        /// Words given.
        got: usize,
    },
    /// A pushed batch holds more sequences than `batch_capacity` (or its positions would
    /// pass `u64::MAX`).
    BatchTooLarge {
        /// Sequences given.
        count: usize,
        /// The capacity.
        capacity: u32,
    },
    /// A length of a pushed batch or a deferred sample is refused by the setup's budget
    /// ([`Error::EmptySequence`], [`Error::LengthOutOfRange`], [`Error::SequenceTooLong`]);
    /// the index is in the batch or the deferred list.
    Batch(Error),
    /// The window already holds `max_delay + 1` batches: take a step first.
    Full,
    /// No batch is pushed: push one first.
    Empty,
    /// A deferred sample given to [`Window::requeue`] is inconsistent (its origin not before
    /// the current step or past its deadline, its position not after the queue's last or not
    /// before the next push), the queue is full, or a batch is already pushed.
    Deferred {
        /// Its index in the list.
        index: usize,
    },
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WindowError::Params { field, value, max } => {
                write!(
                    f,
                    "window parameter {field:?} = {value} is out of range (max {max})"
                )
            }
            WindowError::Storage { needed, got } => {
                write!(f, "window storage holds {got} words, {needed} are needed")
            }
            WindowError::BatchTooLarge { count, capacity } => {
                write!(f, "batch of {count} sequences, the window takes {capacity}")
            }
            WindowError::Batch(e) => write!(f, "{e}"),
            WindowError::Full => write!(f, "the window is full: take a step first"),
            WindowError::Empty => write!(f, "no batch is pushed: push one first"),
            WindowError::Deferred { index } => {
                write!(f, "deferred sample {index} does not fit the window")
            }
        }
    }
}

impl core::error::Error for WindowError {}

/// A window over caller storage: [`WindowState`] and its slab.
///
/// ```
/// use skrull_core::window::{Window, WindowParams};
/// use skrull_core::{Config, ModelShape, Setup};
/// let setup = Setup::new(&Config::recommended(2, 1, 4096, ModelShape::QWEN2_5_0_5B)).unwrap();
/// let params = WindowParams::new(1, 4);
/// let mut slab = vec![0u64; params.words()];
/// let mut w = Window::new(&setup, params, &mut slab).unwrap();
/// w.push(&[4000, 10, 10, 10]).unwrap(); // one giant: nothing to pair it with yet
/// w.push(&[4000, 10, 10, 10]).unwrap();
/// let first = w.step().unwrap();
/// assert_eq!((first.positions, first.deferred), (&[1, 2, 3][..], 1));
/// let second = w.step().unwrap(); // the two giants run together, one per DP rank
/// assert_eq!(second.positions, &[4, 5, 6, 7, 0]);
/// ```
#[derive(Debug)]
pub struct Window<'a> {
    state: WindowState,
    words: &'a mut [u64],
}

impl<'a> Window<'a> {
    /// An empty window for `setup` in `words` (at least [`WindowParams::words`] long).
    ///
    /// # Errors
    /// [`WindowError::Params`] or [`WindowError::Storage`].
    pub fn new(
        setup: &Setup,
        params: WindowParams,
        words: &'a mut [u64],
    ) -> Result<Window<'a>, WindowError> {
        let state = WindowState::new(setup, params)?;
        state.check_storage(words)?;
        Ok(Window { state, words })
    }

    /// The state apart from the slab.
    pub fn state(&self) -> &WindowState {
        &self.state
    }

    /// Deferred sample `i` of the queue (`0..state().queued()`), in position order.
    pub fn queued(&self, i: usize) -> Option<Deferred> {
        self.state.queued(self.words, i)
    }

    /// Appends the next global batch (see [`WindowState::push`]).
    ///
    /// # Errors
    /// As [`WindowState::push`].
    pub fn push(&mut self, lengths: &[u32]) -> Result<(), WindowError> {
        self.state.push(self.words, lengths)
    }

    /// Puts deferred samples back in the queue (see [`WindowState::requeue`]).
    ///
    /// # Errors
    /// As [`WindowState::requeue`].
    pub fn requeue(&mut self, deferred: &[Deferred]) -> Result<(), WindowError> {
        self.state.requeue(self.words, deferred)
    }

    /// Takes the next step (see [`WindowState::step`]).
    ///
    /// # Errors
    /// As [`WindowState::step`].
    pub fn step(&mut self) -> Result<Step<'_>, WindowError> {
        self.state.step(self.words)
    }

    /// Takes the next step and plans its samples with the window's setup
    /// ([`schedule`](crate::schedule)).
    ///
    /// # Errors
    /// As [`WindowState::step`], and [`WindowError::Batch`] with what `schedule` returns.
    pub fn schedule_step<'b>(
        &mut self,
        ws: &mut Workspace<'_>,
        out: PlanBuffers<'b>,
    ) -> Result<(Step<'_>, Plan<'b>), WindowError> {
        let step = self.state.step(self.words)?;
        let plan = crate::policy::schedule(self.state.setup(), step.lengths, ws, out)
            .map_err(WindowError::Batch)?;
        Ok((step, plan))
    }
}

#[cfg(test)]
mod tests;
