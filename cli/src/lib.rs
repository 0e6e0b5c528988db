//! The `skrull` command: argument and file parsing, JSON output and the subcommands. No
//! scheduling logic lives here: it calls `skrull-core`, with the buffers and samplers of
//! `skrull-kit`.

pub mod args;
pub mod calibrate;
pub mod cell;
pub mod chunking;
pub mod config_flags;
pub mod config_keys;
pub mod cost_json;
pub mod evaluate;
pub mod fits;
pub mod fixed_fits;
pub mod json;
pub mod layout_out;
pub mod lengths_cmd;
pub mod online;
pub mod online_cell;
pub mod outlier;
pub mod plan_cmd;
pub mod profile_cmd;
pub mod rebuild;
pub mod samples;
pub mod setups;
pub mod simulate;
pub mod svg;
pub mod sync_compare;
pub mod truth_grid;
