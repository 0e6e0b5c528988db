//! `skrull simulate --online` through the built binary: the JSON shape, convergence on one
//! cell (DP 2 x CP 16 on ChatQA2, all four changes of the combined truth), and the SVGs.
#![allow(clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_skrull"))
        .args(args)
        .output()
        .expect("run skrull");
    assert!(
        out.status.success(),
        "skrull {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The number after `"key": ` in `text` (`None` for `null`).
fn field(text: &str, key: &str) -> Option<f64> {
    let at = text.find(&format!("\"{key}\": ")).expect(key) + key.len() + 4;
    let rest = &text[at..];
    let end = rest.find([',', '}']).expect("end of value");
    rest[..end].trim().parse().ok()
}

#[test]
fn online_refit_converges_on_one_cell() {
    let dir = std::env::temp_dir().join(format!("skrull-online-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("conv.svg");
    let out = run(&[
        "simulate",
        "--online",
        "--setup",
        "7b-cp16",
        "--dataset",
        "chatqa2",
        "--truth",
        "combined",
        "--steps",
        "12",
        "--format",
        "json",
        "--svg",
        svg.to_str().expect("path"),
    ]);
    assert!(out.starts_with("{\"cells\": ["), "{out}");
    assert_eq!(out.matches("\"setup\": ").count(), 1, "{out}");
    for key in [
        "\"setup\": \"7b-cp16\"",
        "\"dataset\": \"chatqa2\"",
        "\"truth\": \"combined\"",
    ] {
        assert!(out.contains(key), "{key} missing: {out}");
    }
    let steps = field(&out, "steps_to_2pct").expect("never within 2 %");
    let ratio = field(&out, "final_ratio").expect("final_ratio");
    let preset = field(&out, "preset_ratio").expect("preset_ratio");
    assert!(steps <= 7.0, "{out}");
    assert!(ratio <= 1.02, "{out}");
    assert!(ratio <= preset, "the refit lost to the preset: {out}");
    let chart = std::fs::read_to_string(&svg).expect("convergence svg");
    assert!(
        chart.starts_with("<svg") && chart.contains("<polyline"),
        "{chart}"
    );
    let gantt = std::fs::read_to_string(dir.join("conv.svg.gantt.svg")).expect("gantt svg");
    assert!(gantt.contains("oracle plan"), "no oracle panel");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--truth grid` runs every truth of the grid and prints, per cell, the worst step beside the
/// preset plan and the steps to 2 % of the oracle; `--format json` gives every step's ratio to
/// the preset; `--svg` draws the worst cell's trajectory.
#[test]
fn the_truth_grid_reports_the_worst_step_beside_the_preset() {
    let dir = std::env::temp_dir().join(format!("skrull-grid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("worst.svg");
    let args = [
        "simulate",
        "--online",
        "--setup",
        "0.5b",
        "--dataset",
        "lmsys",
        "--truth",
        "grid",
        "--steps",
        "2",
    ];
    let mut with_svg = args.to_vec();
    with_svg.extend(["--svg", svg.to_str().expect("path")]);
    let out = run(&with_svg);
    assert!(out.contains("cells meet both targets"), "{out}");
    assert!(out.contains("| worst step ÷ preset (step) |"), "{out}");
    assert_eq!(out.matches("| 0.5b | lmsys |").count(), 24, "{out}");
    for name in [
        "links-bw/10",
        "inter-slow+all",
        "seq-5ms",
        "everything-inverse",
    ] {
        assert!(out.contains(&format!("| {name} |")), "{name}: {out}");
    }
    let chart = std::fs::read_to_string(&svg).expect("worst svg");
    assert!(chart.contains("refitted ÷ preset plan") && chart.contains("<polyline"));
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let out = run(&json);
    assert_eq!(out.matches("\"vs_preset\": [").count(), 24, "{out}");
    assert!(field(&out, "worst_vs_preset").is_some(), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
