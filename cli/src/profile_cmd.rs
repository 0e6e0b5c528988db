//! `skrull profile`: the measuring runs in Python (it needs torch and the GPU), so this
//! command prints the exact `python -m skrull.profile` command for the flags given, and the
//! `skrull calibrate` and `skrull plan` commands that follow it.

use crate::args::Flags;

/// Usage text of `skrull profile`.
pub const USAGE: &str = "\
skrull profile [--model qwen2.5-0.5b|qwen2.5-7b] [--device cuda|cpu] [--out profile.csv]
               [--memory-limit BYTES] [--python python3]

Offline profiling measures this machine: forward+backward time of one decoder layer and of
the LM head, packed causal attention, collectives when launched on several processes, and
peak memory against tokens with and without activation checkpointing. It runs in Python with
torch (`python -m skrull.profile`, installed with the skrull package), so this command only
prints the commands to run: the profile, which writes the samples CSV and calls
`skrull calibrate` itself, and the calibrate and plan steps by hand. See docs/profiling.md.";

/// The fraction of the memory limit `python -m skrull.profile` keeps free by default.
const MARGIN: f64 = 0.1;

/// The model presets `python -m skrull.profile --model` knows.
const MODELS: [&str; 2] = ["qwen2.5-0.5b", "qwen2.5-7b"];

/// Runs `skrull profile`; returns the commands to print.
///
/// # Errors
/// A message naming an unknown model or device, or an unknown flag.
pub fn run(flags: &Flags) -> Result<String, String> {
    let model = flags.get("--model").unwrap_or("qwen2.5-0.5b");
    if !MODELS.contains(&model) {
        return Err(format!(
            "--model: '{model}' is not a preset the profiler knows ({}); for other shapes run \
             python -m skrull.profile --hf-config config.json or --hidden/--ffn/--layers/\
             --heads/--kv-heads/--vocab",
            MODELS.join(", ")
        ));
    }
    let device = flags.get("--device").unwrap_or("cuda");
    if !matches!(device, "cuda" | "cpu") {
        return Err(format!("--device: '{device}' is not cuda|cpu"));
    }
    let out = flags.get("--out").unwrap_or("profile.csv");
    let limit = flags.get("--memory-limit");
    let limit_bytes = limit
        .map(|v| {
            crate::calibrate::parse_bytes(v)
                .ok_or_else(|| format!("--memory-limit: '{v}' is not a byte count"))
        })
        .transpose()?;
    let python = flags.get("--python").unwrap_or("python3");
    flags.finish()?;
    let model_file = match out.strip_suffix(".csv") {
        Some(stem) => format!("{stem}.json"),
        None => format!("{out}.json"),
    };
    let limit_flag = limit
        .map(|l| format!(" --memory-limit {l}"))
        .unwrap_or_default();
    // By hand, calibrate takes the usable bytes: the limit less the profiler's default 10%
    // margin, or a placeholder.
    let usable = limit_bytes.map_or_else(
        || "BYTES".to_string(),
        |b| format!("{}", (b * (1.0 - MARGIN)).floor()),
    );
    let default_limit = if device == "cuda" {
        "the GPU's free memory"
    } else {
        "80G, an assumption on CPU"
    };
    Ok(format!(
        "# Offline profiling runs in Python with torch. Measure this machine:\n\
         {python} -m skrull.profile --model {model} --device {device} --out {out}{limit_flag}\n\
         # (add --quick for a reduced grid; launch with torchrun --nproc-per-node N to measure\n\
         # collectives too). It writes {out}, runs skrull calibrate on it, writes the model to\n\
         # {model_file} and prints the BucketSize under the memory limit (default:\n\
         # {default_limit}) less a 10% margin. The same by hand:\n\
         skrull calibrate --samples {out} --model {model} --memory-limit {usable} > {model_file}\n\
         skrull plan --model {model} --bucket TOKENS --cost-model {model_file}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Flags::parse(&args).unwrap()
    }

    #[test]
    fn prints_the_python_command_for_the_flags() {
        let text = run(&flags(&[])).unwrap();
        assert!(text.contains(
            "python3 -m skrull.profile --model qwen2.5-0.5b --device cuda --out profile.csv\n"
        ));
        assert!(text.contains(
            "skrull calibrate --samples profile.csv --model qwen2.5-0.5b --memory-limit BYTES > \
             profile.json"
        ));
        let text = run(&flags(&[
            "--model",
            "qwen2.5-7b",
            "--device",
            "cpu",
            "--out",
            "h.csv",
            "--memory-limit",
            "80G",
        ]))
        .unwrap();
        assert!(text.contains(
            "-m skrull.profile --model qwen2.5-7b --device cpu --out h.csv --memory-limit 80G\n"
        ));
        // 80 GiB less 10%.
        assert!(text.contains("--memory-limit 77309411328 > h.json"));
        assert!(text.contains("--cost-model h.json"));
        assert!(run(&flags(&["--model", "llama"])).is_err());
        assert!(run(&flags(&["--device", "tpu"])).is_err());
        assert!(run(&flags(&["--memory-limit", "lots"])).is_err());
        assert!(run(&flags(&["--bucket", "1"])).is_err());
    }
}
