//! `skrull`: plan, simulate, evaluate and calibrate long-context batch schedules, and point
//! to the offline profiler.

use std::process::ExitCode;

use skrull_cli::args::Flags;
use skrull_cli::{calibrate, evaluate, lengths_cmd, plan_cmd, profile_cmd, simulate};

const USAGE: &str = "\
skrull <command> [flags]

commands:
  plan       plan one global batch (default: a paper-sized LMsys batch) and print it
  simulate   run every policy on sampled batches and compare them on the cost model
  evaluate   estimate the iteration time and lower bound of a plan (JSON)
  calibrate  fit the cost model (and memory against tokens) to measured samples
  profile    print the commands that measure this machine (python -m skrull.profile)
  lengths    print sequence lengths drawn from a dataset of `simulate`, one per line
  help       print this text

`skrull <command> --help` describes a command's flags.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let flags = match Flags::parse(&args[1..]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("skrull {cmd}: {e}");
            return ExitCode::from(2);
        }
    };
    let (usage, result) = match cmd.as_str() {
        "plan" => (
            plan_cmd::USAGE,
            plan_cmd::run as fn(&Flags) -> Result<String, String>,
        ),
        "simulate" => (
            simulate::USAGE,
            simulate::run as fn(&Flags) -> Result<String, String>,
        ),
        "evaluate" => (
            evaluate::USAGE,
            evaluate::run as fn(&Flags) -> Result<String, String>,
        ),
        "calibrate" => (
            calibrate::USAGE,
            calibrate::run as fn(&Flags) -> Result<String, String>,
        ),
        "profile" => (
            profile_cmd::USAGE,
            profile_cmd::run as fn(&Flags) -> Result<String, String>,
        ),
        "lengths" => (
            lengths_cmd::USAGE,
            lengths_cmd::run as fn(&Flags) -> Result<String, String>,
        ),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("skrull: unknown command '{other}'\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if flags.has("--help") {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    match result(&flags) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("skrull {cmd}: error: {e}");
            ExitCode::FAILURE
        }
    }
}
