//! End-to-end tests of chunking in the `skrull` binary: the chunking flags, `--policy
//! chunkflow`, chunked placements in the plan's JSON and table, `skrull evaluate` of a
//! chunked plan, and `skrull simulate --chunking compare`.
// Helpers outside #[test] functions panic on purpose too: a test that cannot run the binary
// or write its temp files must fail.
#![allow(clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use skrull_core::{Chunking, Config, ModelShape, Policy};
use skrull_kit::{OwnedBuffers, OwnedEval};

fn skrull(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skrull"))
        .args(args)
        .output()
        .expect("run skrull")
}

fn ok(args: &[&str]) -> String {
    let out = skrull(args);
    assert!(
        out.status.success(),
        "skrull {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn err(args: &[&str]) -> String {
    let out = skrull(args);
    assert!(!out.status.success(), "skrull {args:?} succeeded");
    String::from_utf8(out.stderr).expect("utf-8")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skrull-chunk-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// Cell `col` (split on `|`) of the first line of `text` starting with `prefix`.
fn cell(text: &str, prefix: &str, col: usize) -> String {
    let row = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no row {prefix:?} in\n{text}"));
    row.split('|').nth(col).expect("column").trim().to_string()
}

/// A batch with sequences longer than 4K (chunked by chunkflow at 4K) and short ones.
const LENGTHS: [u32; 10] = [40_000, 900, 9000, 3000, 20_000, 50, 4096, 12_000, 7, 60_000];

fn lengths_file() -> String {
    let path = tmp("lengths.txt");
    let text: Vec<String> = LENGTHS.iter().map(u32::to_string).collect();
    std::fs::write(&path, text.join("\n")).expect("write lengths");
    path.to_str().expect("utf-8").to_string()
}

#[test]
fn plan_writes_chunked_placements_and_evaluate_reads_them() {
    let lens = lengths_file();
    let args = [
        "plan",
        "--lengths",
        &lens,
        "--dp",
        "2",
        "--cp",
        "8",
        "--bucket",
        "8K",
        "--model",
        "qwen2.5-7b",
        "--policy",
        "chunkflow",
        "--chunk-size",
        "4K",
        "--chunk-keep",
        "2",
    ];
    let json = ok(&[&args[..], &["--format", "json"]].concat());
    let v: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["config"]["policy"], "chunkflow");
    assert_eq!(v["config"]["chunk_size"], 4096);
    assert_eq!(v["config"]["chunk_keep"], 2);
    assert_eq!(v["config"]["chunk_state_permille"], 64);
    // 40,000, 9000, 20,000, 12,000 and 60,000 are longer than one chunk.
    assert_eq!(v["summary"]["chunked"], 5);
    let placements = v["placements"].as_array().expect("placements");
    for p in placements {
        let len = p["len"].as_u64().expect("len");
        let chunked = p["cp"] == -2;
        assert_eq!(chunked, len > 4096, "{p}");
        assert_eq!(p["kind"] == "chunked", chunked, "{p}");
        if chunked {
            assert_eq!(p["chunks"].as_u64(), Some(len.div_ceil(4096)), "{p}");
            // ChunkFlow runs the chunks over the whole CP group.
            assert_eq!(
                (p["cp_first"].as_u64(), p["cp_size"].as_u64()),
                (Some(0), Some(8))
            );
        }
    }
    // The layout of a GPU that runs chunks lists them as passes, one per chunk, in order.
    let first = placements
        .iter()
        .find(|p| p["cp"] == -2)
        .expect("a chunked one");
    let gpu = format!("{},{},3", first["dp"], first["micro_batch"]);
    let layout = ok(&[&args[..], &["--layout", &gpu, "--format", "json"]].concat());
    let l: serde_json::Value = serde_json::from_str(&layout).expect("layout JSON");
    let seq = first["seq"].as_u64().expect("seq");
    let passes: Vec<&serde_json::Value> = l["chunked"]["passes"]
        .as_array()
        .expect("passes")
        .iter()
        .filter(|p| p["seq"].as_u64() == Some(seq))
        .collect();
    let len = first["len"].as_u64().expect("len");
    assert_eq!(passes.len() as u64, len.div_ceil(4096), "{layout}");
    for (k, p) in passes.iter().enumerate() {
        assert_eq!(p["index"].as_u64(), Some(k as u64), "{p}");
        assert_eq!(p["start"].as_u64(), Some(4096 * k as u64), "{p}");
        assert_eq!(
            (p["first"].as_u64(), p["size"].as_u64()),
            (Some(0), Some(8))
        );
    }
    let text = ok(&[&args[..], &["--layout", &gpu]].concat());
    assert!(text.contains("| chunked 0-7 | "), "{text}");
    assert!(text.contains(" (3/16) |"), "{text}");
    // The table names the chunked sequences, their chunks and ranks.
    let table = ok(&args);
    assert!(
        table.contains("| chunked 5 (ChunkSize 4096, K 2) |"),
        "{table}"
    );
    assert!(table.contains("| 1 (15 chunks on ranks 0-7) |"), "{table}");

    // skrull evaluate reads the chunked plan; it agrees with the core evaluator.
    let path = tmp("chunked-plan.json");
    std::fs::write(&path, &json).expect("write plan");
    let p = path.to_str().expect("utf-8");
    let text = ok(&["evaluate", "--plan", p]);
    assert!(
        text.contains("chunked:                  5 sequences (ChunkSize 4096, K 2)"),
        "{text}"
    );
    assert!(
        text.contains("BucketSize:               respected"),
        "{text}"
    );
    let report: Value =
        serde_json::from_str(&ok(&["evaluate", "--plan", p, "--format", "json"])).expect("json");
    assert_eq!(report["chunked_sequences"], 5);
    let mut cfg = Config::new(2, 8, 8192, ModelShape::QWEN2_5_7B).with_policy(Policy::ChunkFlow);
    cfg.subgroups = true;
    cfg.chunking = Chunking::new(4096, 2);
    let mut bufs = OwnedBuffers::for_batch(LENGTHS.len(), &cfg);
    let plan = bufs.schedule(&cfg, &LENGTHS).expect("plan");
    let r = OwnedEval::default()
        .evaluate(&cfg, &LENGTHS, plan.placements())
        .expect("eval")
        .report;
    let t = report["iteration_time_s"].as_f64().expect("time");
    let lb = report["lower_bound_s"].as_f64().expect("bound");
    assert!(
        (t - r.iteration_time).abs() <= 4.0 * f64::EPSILON * t,
        "{t} vs {r:?}"
    );
    assert!(lb > 0.0 && lb <= t && r.chunk_recompute > 0.0);

    // Chunking off on the command line: the chunked placements are refused, by name.
    let off = ["evaluate", "--plan", p, "--chunk-size", "0"];
    let e = err(&[&off[..], &["--policy", "balanced"]].concat());
    assert!(e.contains("is chunked, but chunking is off"), "{e}");
    // chunkflow needs a size: an explicit 0 is not replaced by the default.
    let e = err(&off);
    assert!(e.contains("chunkflow policy needs chunking on"), "{e}");
    // A ChunkSize the chunked sequences are not longer than.
    let e = err(&["evaluate", "--plan", p, "--chunk-size", "64K"]);
    assert!(
        e.contains("is not longer than one chunk (ChunkSize 65536)"),
        "{e}"
    );
}

#[test]
fn chunkflow_without_a_chunk_size_takes_the_default() {
    // DP 4 x CP 8, 26K, 0.5B: N x C = 212,992 tokens chunked over the 8 GPUs (its K/V state is
    // 1,704 tokens on each); the largest power of two within BucketSize that fits is 16,384.
    let table = ok(&["plan", "--policy", "chunkflow"]);
    assert!(table.contains("policy chunkflow |"), "{table}");
    assert!(table.contains("(ChunkSize 16384, K 1)"), "{table}");
    // Regression: at DP 2 x CP 16 the default used to be sized for one GPU, where that
    // state alone is over BucketSize, and chunkflow refused its own default.
    for extra in [
        &[][..],
        &["--model", "qwen2.5-7b", "--bucket", "13312"][..],
        &["--model", "qwen2.5-0.5b", "--bucket", "26624"][..],
    ] {
        let args = [
            &["plan", "--dp", "2", "--cp", "16", "--policy", "chunkflow"][..],
            extra,
        ]
        .concat();
        let table = ok(&args);
        assert!(table.contains("policy chunkflow |"), "{table}");
    }
    // No chunking unless asked for: the table and JSON read as before.
    let plain = ok(&["plan", "--format", "json", "--policy", "balanced"]);
    assert!(!plain.contains("chunk"), "{plain}");
    let e = err(&["plan", "--chunk-size", "8K", "--chunk-keep", "65"]);
    assert!(
        e.contains("chunk_keep = 65 is out of range (at most 64"),
        "{e}"
    );
}

#[test]
fn simulate_compares_chunking_on_one_cell() {
    let base = [
        "simulate",
        "--setup",
        "0.5b-cp16",
        "--dataset",
        "chatqa2",
        "--iterations",
        "2",
    ];
    let out = ok(&[&base[..], &["--chunking", "compare"]].concat());
    let header = "| setup | dataset | ChunkSize, K | balanced (ms) | balanced+chunking (ms) | speedup \
                  | chunkflow (ms) | skrull (ms) | balanced+chunking vs chunkflow \
                  | ÷ lower bound: balanced | balanced+chunking | chunkflow | skrull \
                  | chunked per iteration: balanced+chunking | chunkflow |";
    assert!(out.contains(header), "{out}");
    let start = out.find(header).expect("table");
    let section = &out[start..];
    let row = "| 0.5B DP2 CP16 BS64 C26K | chatqa2 |";
    // The default ChunkSize for 0.5B (26K) at the 128K clip: 16384 + 8389 fits, 32K does not.
    assert_eq!(cell(section, row, 3), "16384, 1");
    let num = |col: usize| -> f64 {
        let c = cell(section, row, col);
        c.trim_end_matches('x')
            .parse()
            .unwrap_or_else(|_| panic!("column {col}: {c}"))
    };
    // Every run at least its own lower bound.
    for col in 10..=13 {
        assert!(num(col) >= 1.0, "column {col}: {}", num(col));
    }
    // ChunkFlow chunks every sequence over 16K; ChatQA2 has many.
    assert!(num(15) > 1.0, "chunkflow chunked {}", num(15));
    assert!(num(4) > 0.0 && num(7) > 0.0 && num(8) > 0.0);
    // balanced and skrull are the rows of the default table; chunkflow that of --policy
    // chunkflow (the same default ChunkSize).
    let detail = |policy: &str| format!("{row} {policy} |");
    assert_eq!(cell(section, row, 4), cell(&out, &detail("balanced"), 4));
    assert_eq!(cell(section, row, 8), cell(&out, &detail("skrull"), 4));
    let flow = ok(&[&base[..], &["--policy", "chunkflow"]].concat());
    assert_eq!(cell(section, row, 7), cell(&flow, &detail("chunkflow"), 4));
    // Speedup and the vs-chunkflow ratio are the ratios of the times shown (to rounding).
    let speedup = num(4) / num(5);
    assert!((num(6) - speedup).abs() <= 0.01, "{} vs {speedup}", num(6));
    let vs = num(7) / num(5);
    assert!((num(9) - vs).abs() <= 0.01 * vs, "{} vs {vs}", num(9));
    assert!(
        section.contains("| **CP-16 geometric mean** | | | | | **"),
        "{section}"
    );
    let e = err(&[&base[..], &["--chunking", "on"]].concat());
    assert!(e.contains("--chunking: 'on' is not compare"), "{e}");
}

#[test]
fn a_chunk_over_budget_is_printed_in_the_cell() {
    // CP 2 and the whole K/V state charged: a 16K chunk plus half of a 53K sequence's state
    // is over 26K, which chunkflow refuses.
    let out = ok(&[
        "simulate",
        "--setup",
        "0.5b",
        "--dataset",
        "chatqa2",
        "--cp",
        "2",
        "--iterations",
        "2",
        "--chunk-size",
        "16K",
        "--chunk-state-permille",
        "1000",
        "--chunking",
        "compare",
    ]);
    let row = "| 0.5B DP4 CP2 BS64 C26K | chatqa2 | 16384, 1 |";
    let flow = cell(&out, row, 7);
    assert!(flow.starts_with("refused (batch 0: sequence "), "{flow}");
    assert!(flow.contains("over the BucketSize"), "{flow}");
    assert_eq!(cell(&out, row, 9), "—");
    // The other runs completed.
    assert!(cell(&out, row, 4).parse::<f64>().is_ok(), "{out}");
}
