//! The `skrull` command: argument and file parsing, JSON output and the subcommands. No
//! scheduling logic lives here: it calls `skrull-core`, with the buffers and samplers of
//! `skrull-kit`.

pub mod args;
pub mod calibrate;
pub mod chunking;
pub mod config_keys;
pub mod evaluate;
pub mod fits;
pub mod fixed_fits;
pub mod json;
pub mod layout_out;
pub mod lengths_cmd;
pub mod online;
pub mod plan_cmd;
pub mod profile_cmd;
pub mod rebuild;
pub mod samples;
pub mod simulate;
pub mod svg;
pub mod truth_grid;
