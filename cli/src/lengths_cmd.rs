//! `skrull lengths`: sequence lengths drawn from one of the simulator's datasets, one per
//! line, so that other tools (the Python bench, a trainer's smoke test) draw exactly the
//! batches `skrull simulate` does.

use skrull_kit::sample::Dataset;

use crate::args::Flags;

/// Usage text of `skrull lengths`.
pub const USAGE: &str = "\
skrull lengths [--dataset lmsys] [--count 256] [--seed 20250526] [--max-len 131072]

Prints --count sequence lengths drawn from a dataset of `skrull simulate` (default lmsys), one
per line, from --seed (the same seed gives the same lengths on every platform). Each length is
drawn clipped at 128K tokens (the training context of the paper's runs), then scaled by
--max-len / 131072 and rounded up, so --max-len 4096 keeps the distribution's shape at a size a
CPU can train. Datasets: wikipedia, lmsys, chatqa2 (Table 1), chatqa2-hist, lmsys-real,
lmsys-model, wikipedia-model, llama3-sft, longalpaca, chatqa2-model.";

/// The context every dataset is drawn at before scaling.
pub const CONTEXT: u32 = 131_072;

/// Runs `skrull lengths`; returns the lengths, one per line.
///
/// # Errors
/// An unknown dataset, a count of 0 or above 2^24, or a `--max-len` of 0 or above 128K.
pub fn run(flags: &Flags) -> Result<String, String> {
    let name = flags.get("--dataset").unwrap_or("lmsys");
    let dataset = Dataset::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = Dataset::all().iter().map(Dataset::name).collect();
        format!("--dataset: unknown dataset '{name}' ({})", names.join(", "))
    })?;
    let count = flags.u64("--count", 256)?;
    if count == 0 || count > 1 << 24 {
        return Err(format!("--count: {count} is not in 1..=16777216"));
    }
    let seed = flags.u64("--seed", skrull_kit::batch::DEFAULT_SEED)?;
    let max_len = flags.tokens("--max-len", CONTEXT)?;
    if max_len == 0 || max_len > CONTEXT {
        return Err(format!("--max-len: {max_len} is not in 1..={CONTEXT}"));
    }
    flags.finish()?;
    let mut out = String::new();
    for n in dataset.batch(seed, count as usize, CONTEXT) {
        let scaled = (u64::from(n) * u64::from(max_len)).div_ceil(u64::from(CONTEXT));
        out.push_str(&format!("{}\n", scaled.max(1)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Flags {
        Flags::parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn lengths_are_the_simulators_draws_scaled_and_deterministic() {
        let draw = |extra: &[&str]| -> Vec<u32> {
            let mut args = vec!["--dataset", "chatqa2", "--count", "64", "--seed", "3"];
            args.extend_from_slice(extra);
            let text = run(&flags(&args)).unwrap();
            text.lines().map(|l| l.parse().unwrap()).collect()
        };
        let got = draw(&[]);
        let want = Dataset::by_name("chatqa2").unwrap().batch(3, 64, CONTEXT);
        assert_eq!(got, want);
        let scaled = draw(&["--max-len", "4096"]);
        assert!(scaled.iter().all(|&n| (1..=4096).contains(&n)));
        assert!(
            scaled
                .iter()
                .zip(&want)
                .all(|(&s, &w)| s == (w * 4096).div_ceil(CONTEXT).max(1))
        );
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        let e = run(&flags(&["--dataset", "nope"])).unwrap_err();
        assert!(
            e.contains("unknown dataset 'nope'") && e.contains("lmsys"),
            "{e}"
        );
        assert!(
            run(&flags(&["--count", "0"]))
                .unwrap_err()
                .contains("--count")
        );
        assert!(
            run(&flags(&["--max-len", "200000"]))
                .unwrap_err()
                .contains("--max-len")
        );
        assert!(run(&flags(&["--bogus", "1"])).is_err());
    }
}
