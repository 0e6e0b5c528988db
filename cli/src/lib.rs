//! The std side of skrull: buffers, samplers, argument and file parsing, JSON output and the
//! `skrull` subcommands. No scheduling logic lives here: it calls `skrull-core`.

pub mod args;
pub mod buffers;
pub mod calibrate;
pub mod evaluate;
pub mod fits;
pub mod json;
pub mod layout_out;
pub mod plan_cmd;
pub mod profile_cmd;
pub mod sample;
pub mod samples;
pub mod simulate;
pub mod svg;

pub use buffers::OwnedBuffers;
