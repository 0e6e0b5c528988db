//! The offline-profiling path through the built binary: `skrull profile` names the Python
//! command, and a CSV the profiler wrote (`tests/data/profile_cpu_tiny.csv`: a quick CPU
//! profile of a 2-layer, hidden-256 model, collectives on 4 local processes as 2 nodes) goes
//! through `skrull calibrate` into a model file that changes a `balanced` plan.
// Helpers outside #[test] functions panic on purpose too: a test that cannot run the binary
// or write its temp files must fail.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use skrull_cli::calibrate::parse_cost_model;
use skrull_core::CostModel;

const MODEL: &str = "custom:hidden=256,kv_hidden=128,ffn=1024,layers=2,vocab=1024,swiglu=true";

fn skrull(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skrull"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run skrull");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for skrull")
}

fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = skrull(args, stdin);
    assert!(
        out.status.success(),
        "skrull {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/profile_cpu_tiny.csv")
        .to_str()
        .expect("utf-8")
        .to_string()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skrull-profile-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn calibrate(limit: Option<&str>) -> Value {
    let csv = fixture();
    let mut args = vec!["calibrate", "--samples", &csv, "--model", MODEL];
    if let Some(l) = limit {
        args.extend(["--memory-limit", l]);
    }
    serde_json::from_str(&ok(&args, None)).expect("calibrate prints JSON")
}

#[test]
fn profile_prints_the_python_command_and_exits_0() {
    let out = ok(&["profile", "--device", "cpu", "--out", "cpu.csv"], None);
    assert!(
        out.contains("python3 -m skrull.profile --model qwen2.5-0.5b --device cpu --out cpu.csv"),
        "{out}"
    );
    assert!(out.contains(
        "skrull calibrate --samples cpu.csv --model qwen2.5-0.5b --memory-limit BYTES > cpu.json"
    ));
    let help = ok(&["help"], None);
    assert!(help.contains("profile"), "{help}");
    let bad = skrull(&["profile", "--device", "tpu"], None);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cuda|cpu"));
}

#[test]
fn a_profile_csv_calibrates_every_part_of_the_model() {
    let v = calibrate(Some("1G"));
    let shape = skrull_cli::args::parse_model(MODEL).expect("model");
    let base = CostModel::h100(&shape);
    let fitted = parse_cost_model(&v.to_string(), &base).expect("a valid cost model");
    // Attention measured at 128, 256 and 512 tokens; the table extends by doubling.
    assert_eq!(fitted.attention.seqlen, [128, 256, 512, 1024, 2048, 4096]);
    assert_eq!(fitted.attention.fwd[3], fitted.attention.fwd[2]);
    // A CPU thread is thousands of times slower than the H100 preset.
    assert!(fitted.gemm_efficiency < base.gemm_efficiency / 100.0);
    assert!(fitted.attention.fwd[2] < base.attention.fwd[2] / 100.0);
    // Both collective scopes were measured: gloo on one machine, far from NVLink and NDR.
    assert!(fitted.ring_step_latency_s > 10.0 * base.ring_step_latency_s);
    assert!(fitted.intra_node_bandwidth < base.intra_node_bandwidth / 10.0);
    assert!(fitted.inter_node_ring_step_latency_s > base.inter_node_ring_step_latency_s);
    assert!(fitted.inter_node_bandwidth < base.inter_node_bandwidth / 10.0);
    let comment = v["_comment"].as_str().expect("comment");
    for part in [
        "compute fit (3 whole-model samples, 3 of them layers x 2 + head)",
        "collective fit on 2 GPUs",
        "inter-node collective fit on 4 GPUs",
        "memory (plain)",
        "BucketSize 12300 under 1.000 GiB",
    ] {
        assert!(comment.contains(part), "{part}: {comment}");
    }
    // Memory: the CSV's rows are exact lines (saved-tensor bytes on CPU), so the fit is too.
    let plain = &v["_memory"]["plain"];
    let ckpt = &v["_memory"]["checkpoint"];
    assert!((plain["bytes_per_token"].as_f64().expect("slope") - 84_052.0).abs() < 1e-6);
    assert!((ckpt["bytes_per_token"].as_f64().expect("slope") - 60_476.0).abs() < 1e-6);
    // (2^30 - 39,882,756) / 84,052 = 12,300.2
    assert_eq!(plain["bucket_tokens"], 12_300);
    assert_eq!(ckpt["bucket_tokens"], 17_095);
    assert_eq!(v["_memory"]["limit_bytes"], 1_073_741_824.0);
    // Without a limit the lines are reported, no BucketSize.
    let v = calibrate(None);
    assert_eq!(v["_memory"]["plain"]["bucket_tokens"], Value::Null);
}

#[test]
fn bucket_size_never_falls_as_the_memory_limit_grows() {
    let mut last = 0;
    let mut seen = Vec::new();
    for limit in [
        "1M", "2M", "3M", "4M", "64M", "65M", "1G", "1025M", "80G", "1024T",
    ] {
        let v = calibrate(Some(limit));
        let c = v["_memory"]["plain"]["bucket_tokens"]
            .as_u64()
            .expect("a BucketSize");
        assert!(c >= last, "{limit}: {c} < {last}");
        last = c;
        seen.push(c);
    }
    // Below the model states nothing fits; at 1 PiB the budget is capped at 2^31 - 1.
    assert_eq!(seen[0], 0);
    assert_eq!(seen[seen.len() - 1], u64::from(i32::MAX as u32));
}

#[test]
fn a_calibrated_profile_changes_the_balanced_plan() {
    let model = tmp("cpu_tiny.json");
    std::fs::write(&model, calibrate(Some("1G")).to_string()).expect("write");
    let m = model.to_str().expect("utf-8");
    // 96 lengths from 16 to 12K tokens, spread log-uniformly by a fixed LCG.
    let mut x: u64 = 15;
    let lengths: Vec<String> = (0..96)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            ((16f64.ln() + u * (12_000f64 / 16.0).ln()).exp() as u32).to_string()
        })
        .collect();
    let input = lengths.join("\n");
    let plan = |extra: &[&str]| -> Value {
        let mut args = vec![
            "plan",
            "--lengths",
            "-",
            "--dp",
            "2",
            "--cp",
            "8",
            "--bucket",
            "16K",
            "--model",
            MODEL,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&args, Some(&input))).expect("plan JSON")
    };
    let preset = plan(&[]);
    let calibrated = plan(&["--cost-model", m]);
    assert_eq!(calibrated["config"]["policy"], "balanced");
    assert_ne!(
        preset["placements"], calibrated["placements"],
        "the calibrated model left the plan unchanged"
    );
    // Memory samples without a limit are fine; a limit without memory samples is an error.
    let no_memory = tmp("no_memory.csv");
    std::fs::write(&no_memory, "layer,256,0.01\nhead,256,0.001\n").expect("write");
    let out = skrull(
        &[
            "calibrate",
            "--samples",
            no_memory.to_str().expect("utf-8"),
            "--model",
            MODEL,
            "--memory-limit",
            "1G",
        ],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no memory samples"), "{err}");
    let csv = fixture();
    let out = skrull(
        &[
            "calibrate",
            "--samples",
            &csv,
            "--model",
            MODEL,
            "--memory-limit",
            "lots",
        ],
        None,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a byte count"));
}
