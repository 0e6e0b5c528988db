//! End-to-end tests of `skrull simulate`, `skrull evaluate` and `skrull calibrate` through the
//! built binary, and of the Gantt chart's SVG.
// Helpers outside #[test] functions panic on purpose too: a test that cannot run the binary
// or write its temp files must fail.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use skrull_cli::calibrate::parse_cost_model;
use skrull_core::CostModel;
use skrull_core::model::TimeModel;
use skrull_core::model::fit::SKRULL_TABLE5_ALL_GATHER;
use skrull_core::{Config, ModelShape, Placement, Policy, ShardPadding};
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

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skrull-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// A small XML well-formedness check: one root element, every tag closed in order, quoted
/// and unique attributes, no stray `<` or `&` in text or attribute values, only known
/// entities.
fn check_xml(doc: &str) -> Result<String, String> {
    fn name_ok(n: &str) -> bool {
        let mut cs = n.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
            && cs.all(|c| c.is_ascii_alphanumeric() || "-_:.".contains(c))
    }
    fn text_ok(t: &str) -> Result<(), String> {
        if t.contains('<') {
            return Err(format!("'<' in text or value: {t:.60}"));
        }
        let mut rest = t;
        while let Some(i) = rest.find('&') {
            let after = &rest[i + 1..];
            let end = after.find(';').ok_or("unterminated entity")?;
            let ent = &after[..end];
            let known = ["amp", "lt", "gt", "quot", "apos"].contains(&ent)
                || (ent.starts_with('#') && ent.len() > 1);
            if !known {
                return Err(format!("unknown entity &{ent};"));
            }
            rest = &after[end + 1..];
        }
        Ok(())
    }
    let mut stack: Vec<String> = Vec::new();
    let mut root: Option<String> = None;
    let mut closed_root = false;
    let mut rest = doc.trim_start();
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").ok_or("unterminated XML declaration")? + 2..];
    }
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if !rest.trim().is_empty() && stack.is_empty() {
                return Err("text outside the root".into());
            }
            text_ok(rest)?;
            break;
        };
        let text = &rest[..lt];
        if stack.is_empty() && !text.trim().is_empty() {
            return Err("text outside the root".into());
        }
        text_ok(text)?;
        rest = &rest[lt..];
        if let Some(r) = rest.strip_prefix("<!--") {
            rest = &r[r.find("-->").ok_or("unterminated comment")? + 3..];
            continue;
        }
        let gt = rest.find('>').ok_or("unterminated tag")?;
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack
                .pop()
                .ok_or(format!("</{name}> without an open tag"))?;
            if open != name.trim() {
                return Err(format!("</{name}> closes <{open}>"));
            }
            if stack.is_empty() {
                closed_root = true;
            }
            continue;
        }
        if closed_root {
            return Err("a second root element".into());
        }
        let (body, self_closing) = match tag.strip_suffix('/') {
            Some(b) => (b, true),
            None => (tag, false),
        };
        let body = body.trim_end();
        let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
        let name = &body[..name_end];
        if !name_ok(name) {
            return Err(format!("bad tag name '{name}'"));
        }
        let mut attrs = body[name_end..].trim_start();
        let mut seen = Vec::new();
        while !attrs.is_empty() {
            let eq = attrs
                .find('=')
                .ok_or(format!("attribute without value in <{name}>"))?;
            let an = attrs[..eq].trim();
            if !name_ok(an) || seen.contains(&an) {
                return Err(format!("bad or repeated attribute '{an}' in <{name}>"));
            }
            seen.push(an);
            let after = attrs[eq + 1..].trim_start();
            let q = after.chars().next().ok_or("missing attribute value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute '{an}' in <{name}>"));
            }
            let close = after[1..].find(q).ok_or("unterminated attribute value")?;
            text_ok(&after[1..1 + close])?;
            let next = &after[close + 2..];
            if !next.is_empty() && !next.starts_with(char::is_whitespace) {
                return Err(format!("no space after attribute '{an}' in <{name}>"));
            }
            attrs = next.trim_start();
        }
        if root.is_none() {
            root = Some(name.to_string());
        }
        if !self_closing {
            stack.push(name.to_string());
        } else if stack.is_empty() {
            closed_root = true;
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("<{open}> never closed"));
    }
    root.ok_or_else(|| "no root element".to_string())
}

#[test]
fn the_xml_checker_rejects_broken_documents() {
    assert_eq!(check_xml("<a x=\"1\"><b/>t&amp;</a>"), Ok("a".into()));
    assert!(check_xml("<a><b></a></b>").is_err());
    assert!(check_xml("<a x=1/>").is_err());
    assert!(check_xml("<a x=\"1\" x=\"2\"/>").is_err());
    assert!(check_xml("<a>&nbsp;</a>").is_err());
    assert!(check_xml("<a>1 < 2</a>").is_err());
    assert!(check_xml("<a/><b/>").is_err());
    assert!(check_xml("<a>").is_err());
}

#[test]
fn default_simulation_prints_the_paper_cells_the_case_study_and_the_cp16_rows() {
    let out = ok(&["simulate", "--iterations", "3"]);
    for needle in [
        "| setup | dataset | policy | iteration (ms) | vs deepspeed | paper | ÷ lower bound",
        "0.5B DP4 CP8 BS64 C26K | wikipedia | skrull",
        "0.5B DP4 CP8 BS64 C26K | lmsys | deepspeed",
        "0.5B DP4 CP8 BS64 C26K | chatqa2 | packed",
        "7B DP4 CP8 BS64 C13K | wikipedia | sorted",
        "7B DP4 CP8 BS64 C13K | lmsys | roundrobin",
        "7B DP2 CP16 BS40 C13K | chatqa2 | skrull",
        "| 7.54x |",
        "| 1.35x |",
        "**overall average**",
        "**3.76x**",
        "Case study",
        "0.5B DP1 CP8 BS64 C26K | chatqa2 | roundrobin",
        "| 1.17x |",
        "| 1.40x |",
        "Lengths clipped at the 131,072 context limit and at N x C",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    for needle in [
        "0.5B DP2 CP16 BS64 C26K | wikipedia",
        "0.5B DP2 CP16 BS64 C26K | chatqa2",
        "7B DP2 CP16 BS64 C13K | lmsys",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    // 6 cells + case study + 6 CP-16 rows, each with a lower-bound row and every policy.
    assert_eq!(out.matches("*lower bound*").count(), 13);
    assert_eq!(out.matches("| skrull |").count(), 13);
    // No valid policy breaks the budget.
    assert!(!out.contains("over**"), "{out}");
}

#[test]
fn one_cell_with_a_policy_list_and_the_same_output_for_the_same_seed() {
    let args = [
        "simulate",
        "--setup",
        "7b",
        "--dataset",
        "chatqa2-hist",
        "--policy",
        "skrull,packed",
        "--iterations",
        "4",
        "--seed",
        "7",
    ];
    let a = ok(&args);
    assert!(
        a.contains("| 7B DP4 CP8 BS64 C13K | chatqa2-hist | skrull |"),
        "{a}"
    );
    assert!(a.contains("| packed |"));
    assert!(!a.contains("| roundrobin |") && !a.contains("| deepspeed |"));
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("scheduled and evaluated"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&a), strip(&ok(&args)));
    for dataset in [
        "lmsys-real",
        "lmsys-model",
        "wikipedia-model",
        "llama3-sft",
        "longalpaca",
        "chatqa2-model",
    ] {
        let out = ok(&[
            "simulate",
            "--setup",
            "0.5b",
            "--dataset",
            dataset,
            "--iterations",
            "2",
        ]);
        assert!(out.contains(&format!("| {dataset} | skrull |")), "{out}");
    }
}

#[test]
fn simulate_compares_sub_groups_on_request_only() {
    let args = |extra: &[&'static str]| {
        let mut a = vec!["simulate", "--setup", "7b-cp16", "--iterations", "2"];
        a.extend_from_slice(extra);
        a
    };
    let strip = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("scheduled and evaluated"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let plain = ok(&args(&[]));
    assert!(!plain.contains("Sub-groups"), "{plain}");
    assert_eq!(strip(&plain), strip(&ok(&args(&["--subgroups", "on"]))));
    let cmp = ok(&args(&["--subgroups", "compare"]));
    // The default output, unchanged, with one section added before the closing line.
    let start = cmp.find("Sub-groups: ").expect("the comparison section");
    let end = start + cmp[start..].find("|\n\n").expect("its end") + 3;
    let section = &cmp[start..end];
    assert_eq!(
        strip(&format!("{}{}", &cmp[..start], &cmp[end..])),
        strip(&plain)
    );
    for needle in [
        "| setup | dataset | without sub-groups (ms) | with sub-groups (ms) | speedup \
         | without ÷ lower bound | with ÷ lower bound | sub-group shards per iteration |",
        "| **CP-16 geometric mean** (3 rows) | | | | **",
    ] {
        assert!(section.contains(needle), "missing {needle:?} in\n{section}");
    }
    // 'with' is the balanced row of the default table, 'without' that of --subgroups off.
    let off = ok(&args(&["--subgroups", "off"]));
    let cell = |text: &str, prefix: &str, col: usize| -> String {
        let row = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?} in\n{text}"));
        row.split('|').nth(col).expect("column").trim().to_string()
    };
    for dataset in ["wikipedia", "lmsys", "chatqa2"] {
        let row = format!("| 7B DP2 CP16 BS40 C13K | {dataset} | ");
        let balanced = format!("{row}balanced |");
        assert_eq!(cell(section, &row, 4), cell(&plain, &balanced, 4));
        assert_eq!(cell(section, &row, 3), cell(&off, &balanced, 4));
        assert_eq!(cell(section, &row, 7), cell(&plain, &balanced, 7));
        assert_eq!(cell(section, &row, 6), cell(&off, &balanced, 7));
    }
    let out = skrull(&args(&["--subgroups", "both"]));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("'both' is not on|off|compare"));
}

#[test]
fn simulate_draws_a_well_formed_gantt_chart() {
    let svg = tmp("gantt.svg");
    let path = svg.to_str().expect("utf-8 path");
    let out = ok(&[
        "simulate",
        "--setup",
        "case-study",
        "--dataset",
        "chatqa2",
        "--iterations",
        "2",
        "--svg",
        path,
    ]);
    assert!(out.contains("Gantt chart"));
    let doc = std::fs::read_to_string(&svg).expect("svg written");
    assert_eq!(check_xml(&doc), Ok("svg".to_string()));
    assert!(doc.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    for needle in [
        "local attention",
        "sharded attention",
        "CP comm exposed",
        "fixed overhead",
        "time (ms)",
        "DP0 CP7",
        "skrull:",
        "deepspeed:",
        "packed:",
        "roundrobin:",
    ] {
        assert!(doc.contains(needle), "missing {needle}");
    }
    // A bigger layout, every policy including sorted.
    let out = ok(&[
        "simulate",
        "--setup",
        "0.5b",
        "--dataset",
        "lmsys",
        "--iterations",
        "2",
        "--policy",
        "skrull,deepspeed,packed,sorted,roundrobin",
        "--svg",
        path,
    ]);
    assert!(out.contains("Gantt chart"));
    let doc = std::fs::read_to_string(&svg).expect("svg written");
    assert_eq!(check_xml(&doc), Ok("svg".to_string()));
    assert!(doc.contains("DP3 (CP0-7)") && doc.contains("sorted:"));
}

/// The `y` of every `<rect>` filled with `color`.
fn rect_ys(doc: &str, color: &str) -> Vec<f64> {
    doc.lines()
        .flat_map(|l| l.split("<rect ").skip(1))
        .filter(|r| r.contains(&format!("fill=\"{color}\"")))
        .map(|r| {
            let y = &r[r.find(" y=\"").expect("y") + 4..];
            y[..y.find('"').expect("end")].parse().expect("number")
        })
        .collect()
}

#[test]
fn the_gantt_chart_draws_sub_group_shards_in_their_lanes() {
    use skrull_cli::svg::{Panel, gantt};
    use skrull_core::config::cost::Overlap;
    let cfg = Config::new(1, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
    let lengths = [60_000u32, 40_000, 9000, 5000, 700];
    let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
        dp_rank: 0,
        micro_batch,
        cp_rank,
        cp_first,
        cp_size,
    };
    // Micro-batch 0: one shard over all 8 ranks, one over ranks 4-7, one over 0-1, one local
    // on rank 2; micro-batch 1: a single shard over all 8.
    let placements = [
        p(0, -1, 0, 0),
        p(0, -1, 4, 4),
        p(0, -1, 0, 2),
        p(0, 2, 0, 0),
        p(1, -1, 0, 0),
    ];
    for overlap in [Overlap::LocalAttention, Overlap::AllAttention] {
        let mut cost = CostModel::h100(&cfg.model);
        cost.overlap = overlap;
        let cfg = cfg.with_cost(cost);
        let tm = TimeModel::new(&cost, &cfg);
        let mut bufs = OwnedEval::default();
        let ev = bufs.evaluate(&cfg, &lengths, &placements).expect("eval");
        let panel = Panel::new("by hand".into(), 1, 8, &ev, &tm);
        assert!(panel.has_subgroups());
        assert_eq!(panel.rings[1], []);
        let rings: Vec<(u32, u32, u64)> = panel.rings[0]
            .iter()
            .map(|r| (r.first, r.size, r.tokens))
            .collect();
        assert_eq!(rings, [(0, 2, 9000), (4, 4, 40_000)]);
        // The whole group's ring plus the sub-groups' make the micro-batch's communication.
        let total = panel.whole_comm[0] + panel.rings[0].iter().map(|r| r.comm).sum::<f64>();
        assert!((total - ev.micro_batches[0].comm).abs() <= 1e-12 * total);
        let doc = gantt("sub-groups", &[panel]);
        assert_eq!(check_xml(&doc), Ok("svg".to_string()));
        for needle in [
            "sub-group shard attention",
            "sub-group shard GEMMs",
            "sub-group ring comm (top stripe)",
            "sub-group ring: the ranks a sequence is sharded over",
            "DP 0 micro-batch 0: ring over CP ranks 4-7 (40000 tokens sharded over 4 ranks",
            "DP 0 micro-batch 0: ring over CP ranks 0-1 (9000 tokens sharded over 2 ranks",
        ] {
            assert!(doc.contains(needle), "missing {needle}");
        }
        // Lanes are 12 px from y = 96 + 22 (three legend rows, the panel title); the legend's
        // swatches sit above them.
        let lanes = |color: &str| {
            let mut v: Vec<i64> = rect_ys(&doc, color)
                .into_iter()
                .filter(|&y| y >= 118.0)
                .map(|y| ((y - 118.0) / 12.0).floor() as i64)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        // Sub-group attention, GEMMs and ring communication in the groups' lanes only.
        for color in ["#6a3d9a", "#c5a8e0", "#e377c2"] {
            assert_eq!(lanes(color), [0, 1, 4, 5, 6, 7], "{color} {overlap:?}");
        }
        // The whole group's shards on every lane, and its ring: hidden under every lane's
        // attention, or (hidden under local attention only) exposed where there is none.
        let ring = match overlap {
            Overlap::AllAttention => "#ff9f1c",
            Overlap::LocalAttention => "#d62728",
        };
        for color in ["#1f5fb4", "#8fb8e8", ring] {
            assert_eq!(
                lanes(color),
                (0..8).collect::<Vec<_>>(),
                "{color} {overlap:?}"
            );
        }
    }
}

#[test]
fn simulate_rejects_bad_flags() {
    for args in [
        vec!["simulate", "--dataset", "nope"],
        vec!["simulate", "--setup", "70b"],
        vec!["simulate", "--policy", "skrull,fifo"],
        vec!["simulate", "--iterations", "0"],
        vec!["simulate", "--gpu", "a100"],
        vec!["simulate", "--frobnicate", "1"],
    ] {
        let out = skrull(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!out.stderr.is_empty());
    }
}

fn write_plan(policy: &str) -> (PathBuf, String) {
    let plan = ok(&["plan", "--format", "json", "--policy", policy]);
    let path = tmp(&format!("plan-{policy}.json"));
    std::fs::write(&path, &plan).expect("write plan");
    (path, plan)
}

#[test]
fn evaluate_matches_the_core_evaluator_on_a_plan_from_skrull_plan() {
    let (path, _) = write_plan("skrull");
    let p = path.to_str().expect("utf-8");
    let text = ok(&["evaluate", "--plan", p]);
    for needle in [
        "estimated iteration time:",
        "lower bound:",
        "per DP rank (ms):",
        "CP communication:",
        "BucketSize:               respected",
        "| DP | micro-batch |",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["evaluate", "--plan", p, "--format", "json"])).expect("json");
    let t = json["iteration_time_s"].as_f64().expect("time");
    let lb = json["lower_bound_s"].as_f64().expect("bound");
    assert!(t >= lb && lb > 0.0);
    assert_eq!(json["dp_times_s"].as_array().map(Vec::len), Some(4));
    assert_eq!(json["within_budget"], serde_json::Value::Bool(true));

    // The same plan through the library.
    let cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
    let lengths = skrull_kit::batch::default_lengths(cfg.cp, cfg.bucket);
    let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
    let plan = bufs.schedule(&cfg, &lengths).expect("plan");
    let mut ev = OwnedEval::default();
    let r = ev
        .evaluate(&cfg, &lengths, plan.placements())
        .expect("eval")
        .report;
    // serde_json (without `float_roundtrip`) may read a printed float back one ulp off.
    let same = |a: f64, b: f64| (a - b).abs() <= 4.0 * f64::EPSILON * a.abs();
    assert!(same(r.iteration_time, t), "{} vs {t}", r.iteration_time);
    assert!(
        same(r.lower_bound.value, lb),
        "{} vs {lb}",
        r.lower_bound.value
    );

    // Lengths from a file must agree with the plan's.
    let lens = tmp("lengths.txt");
    let text: Vec<String> = lengths.iter().map(u32::to_string).collect();
    std::fs::write(&lens, text.join("\n")).expect("write");
    ok(&[
        "evaluate",
        "--plan",
        p,
        "--lengths",
        lens.to_str().expect("utf-8"),
    ]);
    std::fs::write(&lens, "1 2 3").expect("write");
    assert!(
        !skrull(&[
            "evaluate",
            "--plan",
            p,
            "--lengths",
            lens.to_str().expect("utf-8")
        ])
        .status
        .success()
    );
}

#[test]
fn evaluate_flags_a_plan_over_budget() {
    let (_, plan) = write_plan("deepspeed");
    // Make every sequence local on CP rank 0 of one micro-batch per DP rank.
    let mut v: serde_json::Value = serde_json::from_str(&plan).expect("json");
    for p in v["placements"].as_array_mut().expect("placements") {
        p["cp"] = 0.into();
        p["cp_first"] = 0.into();
        p["cp_size"] = 1.into();
        p["micro_batch"] = 0.into();
    }
    let path = tmp("over.json");
    std::fs::write(&path, v.to_string()).expect("write");
    let p = path.to_str().expect("utf-8");
    let text = ok(&["evaluate", "--plan", p]);
    assert!(
        text.contains("BucketSize:               VIOLATED"),
        "{text}"
    );
    assert!(text.contains("(over)"));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["evaluate", "--plan", p, "--format", "json"])).expect("json");
    assert_eq!(json["within_budget"], serde_json::Value::Bool(false));
    // Flags override the plan's layout; a plan with a CP rank beyond --cp is refused.
    let out = skrull(&["evaluate", "--plan", p, "--cp", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut bad = v.clone();
    bad["placements"][0]["cp"] = 9.into();
    bad["placements"][0]["cp_first"] = 9.into();
    std::fs::write(&path, bad.to_string()).expect("write");
    let out = skrull(&["evaluate", "--plan", p]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"));
}

#[test]
fn evaluate_reads_sub_group_shards_and_matches_the_core_evaluator() {
    let (_, plan) = write_plan("deepspeed");
    let mut v: serde_json::Value = serde_json::from_str(&plan).expect("json");
    assert_eq!(v["config"]["subgroups"], serde_json::Value::Bool(true));
    // Deepspeed shards every sequence over the whole group; move one in three (those that
    // fit) onto a half of the CP group (4 ranks of 8) and another one in three onto a pair.
    let cfg = Config::new(4, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B).with_policy(Policy::DeepSpeed);
    let mut placements = Vec::new();
    let mut lengths = Vec::new();
    for (i, p) in v["placements"]
        .as_array_mut()
        .expect("placements")
        .iter_mut()
        .enumerate()
    {
        assert_eq!(
            (
                p["cp"].as_i64(),
                p["cp_first"].as_u64(),
                p["cp_size"].as_u64()
            ),
            (Some(-1), Some(0), Some(8))
        );
        let len = p["len"].as_u64().expect("len") as u32;
        let (first, size) = match i % 3 {
            1 if len <= 4 * cfg.bucket => (4 * (i as u16 / 3 % 2), 4),
            2 if len <= 2 * cfg.bucket => (2 * (i as u16 / 3 % 4), 2),
            _ => (0, 0),
        };
        if size > 0 {
            p["cp_first"] = first.into();
            p["cp_size"] = size.into();
        } else if i % 2 == 0 {
            // A whole-group shard may also leave the group out.
            let o = p.as_object_mut().expect("object");
            o.remove("cp_first");
            o.remove("cp_size");
        }
        placements.push(Placement {
            dp_rank: p["dp"].as_u64().expect("dp") as u32,
            micro_batch: p["micro_batch"].as_u64().expect("mb") as u32,
            cp_rank: -1,
            cp_first: first,
            cp_size: size,
        });
        lengths.push(len);
    }
    let subgroups = placements.iter().filter(|p| p.cp_size > 0).count();
    assert!(subgroups > 50, "{subgroups}");
    let path = tmp("subgroups.json");
    std::fs::write(&path, v.to_string()).expect("write");
    let p = path.to_str().expect("utf-8");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["evaluate", "--plan", p, "--format", "json"])).expect("json");
    assert_eq!(json["subgroup_sequences"], subgroups);
    let mut ev = OwnedEval::default();
    let e = ev.evaluate(&cfg, &lengths, &placements).expect("eval");
    let same = |a: f64, b: f64| (a - b).abs() <= 4.0 * f64::EPSILON * a.abs();
    let r = &e.report;
    for (key, want) in [
        ("iteration_time_s", r.iteration_time),
        ("lower_bound_s", r.lower_bound.value),
        ("comm_s", r.comm),
        ("exposed_comm_s", r.exposed_comm),
    ] {
        let got = json[key].as_f64().expect(key);
        assert!(same(got, want), "{key}: {got} vs {want}");
    }
    let dp: Vec<f64> = json["dp_times_s"]
        .as_array()
        .expect("dp times")
        .iter()
        .map(|t| t.as_f64().expect("time"))
        .collect();
    assert!(dp.iter().zip(e.dp_times.iter()).all(|(&a, &b)| same(a, b)));
    assert_eq!(json["peak_tokens"], r.peak_tokens);
    // Sub-groups make the plan faster than sharding everything over the whole group.
    let (whole, _) = write_plan("deepspeed");
    let whole: serde_json::Value = serde_json::from_str(&ok(&[
        "evaluate",
        "--plan",
        whole.to_str().expect("utf-8"),
        "--format",
        "json",
    ]))
    .expect("json");
    assert!(json["iteration_time_s"].as_f64() < whole["iteration_time_s"].as_f64());
    let text = ok(&["evaluate", "--plan", p]);
    assert!(
        text.contains(&format!("256 sequences ({subgroups} over sub-groups)")),
        "{text}"
    );

    // Sub-groups off (flag or plan config) refuse the plan; bad groups are named.
    let err = |v: &serde_json::Value, extra: &[&str]| {
        std::fs::write(&path, v.to_string()).expect("write");
        let mut args = vec!["evaluate", "--plan", p];
        args.extend_from_slice(extra);
        let out = skrull(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&v, &["--subgroups", "off"]);
    assert!(e.contains("but sub-groups are off"), "{e}");
    let mut off = v.clone();
    off["config"]["subgroups"] = false.into();
    assert!(err(&off, &[]).contains("but sub-groups are off"));
    std::fs::write(&path, off.to_string()).expect("write");
    ok(&["evaluate", "--plan", p, "--subgroups", "on"]);
    for (first, size, needle) in [
        (2, 4, "CP ranks 2-5 are not a valid group of CP 8"),
        (0, 3, "a sub-group size 2, 4 with cp_first a multiple of it"),
        (6, 1, "is local (\"cp\": 6)"),
        (4, 8, "starts at rank 0"),
    ] {
        let mut bad = v.clone();
        bad["placements"][1]["cp_first"] = first.into();
        bad["placements"][1]["cp_size"] = size.into();
        let e = err(&bad, &[]);
        assert!(e.contains("plan: sequence 1 (cp -1"), "{e}");
        assert!(e.contains(needle), "{needle}: {e}");
    }
    let e = err(&v, &["--subgroups", "maybe"]);
    assert!(e.contains("'maybe' is not on|off"), "{e}");
    // --cp 16 turns the pairs and halves into other groups of a larger CP group: still valid,
    // a group of 8 is now a sub-group too.
    std::fs::write(&path, v.to_string()).expect("write");
    ok(&["evaluate", "--plan", p, "--cp", "16"]);
}

#[test]
fn plan_json_carries_the_groups_and_the_subgroups_switch() {
    let on: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--format", "json", "--policy", "balanced"]))
            .expect("json");
    assert_eq!(on["config"]["subgroups"], serde_json::Value::Bool(true));
    let mut kinds = [0; 2];
    for p in on["placements"].as_array().expect("placements") {
        let (cp, first, size) = (
            p["cp"].as_i64().expect("cp"),
            p["cp_first"].as_i64().expect("cp_first"),
            p["cp_size"].as_i64().expect("cp_size"),
        );
        if cp == -1 {
            assert_eq!((first, size), (0, 8));
            kinds[0] += 1;
        } else {
            assert_eq!((first, size), (cp, 1));
            kinds[1] += 1;
        }
    }
    assert!(kinds[0] > 0 && kinds[1] > 0, "{kinds:?}");
    let off: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--format", "json", "--subgroups", "off"]))
            .expect("json");
    assert_eq!(off["config"]["subgroups"], serde_json::Value::Bool(false));
    let out = skrull(&["plan", "--subgroups", "compare"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("skrull simulate only"));
}

#[test]
fn calibrate_recovers_a_known_model_and_its_output_feeds_the_other_commands() {
    let shape = ModelShape::QWEN2_5_7B;
    let base = CostModel::h100(&shape);
    // "Measurements" from a model 1.5x slower in GEMMs, 1.2x in attention, 30 ms fixed.
    let mut truth = base;
    truth.gemm_efficiency /= 1.5;
    truth.hbm_bandwidth /= 1.5;
    truth.attention = truth.attention.slowed(1.2);
    truth.kernel_launch_s = 0.03 / (28.0 * truth.kernels_per_layer);
    let t = TimeModel::for_shape(&truth, &shape, 1, ShardPadding::None);
    let mut csv = String::from("# kind,size,seconds\nkind,size,seconds\n");
    for s in [128u32, 1024, 4096, 8192, 16384, 32768, 65536] {
        csv.push_str(&format!("compute,{s},{}\n", t.alone_whole(s)));
    }
    for (mib, us) in SKRULL_TABLE5_ALL_GATHER {
        csv.push_str(&format!("collective,{},{}\n", mib * 1_048_576.0, us * 1e-6));
    }
    let samples = tmp("samples.csv");
    std::fs::write(&samples, csv).expect("write");
    let out = ok(&[
        "calibrate",
        "--samples",
        samples.to_str().expect("utf-8"),
        "--model",
        "qwen2.5-7b",
    ]);
    assert!(out.contains("\"_comment\""));
    let fitted = parse_cost_model(&out, &base).expect("the output parses as a cost model");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
    assert!(
        close(fitted.gemm_efficiency, truth.gemm_efficiency),
        "{fitted:?}"
    );
    assert!(close(fitted.attention.fwd[3], truth.attention.fwd[3]));
    assert!(close(fitted.kernel_launch_s, truth.kernel_launch_s));
    // The Table 5 samples give back the defaults.
    assert!((fitted.ring_step_latency_s / base.ring_step_latency_s - 1.0).abs() < 2e-3);
    assert!((fitted.intra_node_bandwidth / base.intra_node_bandwidth - 1.0).abs() < 2e-3);

    let model = tmp("fitted.json");
    std::fs::write(&model, &out).expect("write");
    let m = model.to_str().expect("utf-8");
    let sim = ok(&[
        "simulate",
        "--setup",
        "7b",
        "--dataset",
        "lmsys",
        "--iterations",
        "2",
        "--cost-model",
        m,
    ]);
    assert!(
        sim.contains("with ") && sim.contains("fitted.json on top"),
        "{sim}"
    );
    let (plan, _) = write_plan("packed");
    ok(&[
        "evaluate",
        "--plan",
        plan.to_str().expect("utf-8"),
        "--cost-model",
        m,
        "--model",
        "qwen2.5-7b",
    ]);

    // Too few samples, and a bad file, are errors that name the problem.
    std::fs::write(&samples, "1024,0.1\n2048,0.2\n").expect("write");
    let out = skrull(&["calibrate", "--samples", samples.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 3"));
    std::fs::write(&model, "{\"peak_flop\": 1}").expect("write");
    let out = skrull(&["simulate", "--iterations", "1", "--cost-model", m]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("peak_flop"));
}

/// `sharded` and `step` rows give the fixed costs per sharded sequence and per step: a line
/// through exact "measurements" comes back, in the model file and its comment.
#[test]
fn calibrate_fits_the_per_sequence_and_per_step_costs() {
    let shape = ModelShape::QWEN2_5_0_5B;
    let base = CostModel::h100(&shape);
    let t = TimeModel::for_shape(&base, &shape, 4, ShardPadding::None);
    let layers = f64::from(shape.layers);
    let mut csv = String::from("kind,size,value,extra\n");
    // 4 ms per sequence per layer beyond its shards' attention, 2 ms per call.
    for count in [1u32, 2, 4, 8] {
        let s = 0.002 + f64::from(count) * (0.004 + t.attention_shard(512) / layers);
        csv.push_str(&format!("sharded,{count},{s},512\n"));
    }
    // 5 ms + 1 ns per parameter.
    for p in [1e6, 8e6] {
        csv.push_str(&format!("step,{p},{}\n", 0.005 + p * 1e-9));
    }
    let samples = tmp("fixed_samples.csv");
    std::fs::write(&samples, csv).expect("write");
    let out = ok(&[
        "calibrate",
        "--samples",
        samples.to_str().expect("utf-8"),
        "--group",
        "4",
    ]);
    let fitted = parse_cost_model(&out, &base).expect("the output parses as a cost model");
    assert!(
        (fitted.sharded_sequence_s - 0.004 * layers).abs() < 1e-9,
        "{out}"
    );
    let params = skrull_cli::fixed_fits::parameters(&shape);
    assert!((fitted.iteration_fixed_s - (0.005 + params * 1e-9)).abs() < 1e-9);
    assert!(out.contains("per sharded sequence: 4.000 ms per layer") && out.contains("per step"));
    assert_eq!(fitted.gemm_efficiency, base.gemm_efficiency);
}

/// The example model file in docs/cost_model.md is the full H100 preset for Qwen2.5-7B as
/// the file printer writes it (15 significant digits): parsed over a different base, it gives
/// what the printed preset reads back as.
#[test]
fn the_documented_model_file_is_the_h100_7b_preset() {
    use skrull_cli::calibrate::cost_model_json;
    let doc = include_str!("../../docs/cost_model.md");
    let start = doc.find("```json\n").map(|i| i + 8).expect("a json block");
    let end = start + doc[start..].find("```").expect("its end");
    let base = CostModel::h200(&ModelShape::QWEN2_5_0_5B);
    let parsed = parse_cost_model(&doc[start..end], &base).expect("the documented file parses");
    let preset = CostModel::h100(&ModelShape::QWEN2_5_7B);
    let printed = parse_cost_model(&cost_model_json(&preset, "preset"), &base).expect("printed");
    assert_eq!(parsed, printed);
}

/// `(x, y, width)` of every `<rect>` filled with `fill`.
fn rects(doc: &str, fill: &str) -> Vec<(f64, f64, f64)> {
    let attr = |r: &str, name: &str| -> f64 {
        let v = &r[r.find(&format!(" {name}=\"")).expect(name) + name.len() + 3..];
        v[..v.find('"').expect("end")].parse().expect("number")
    };
    doc.lines()
        .flat_map(|l| l.split("<rect ").skip(1))
        .filter(|r| r.contains(&format!("fill=\"{fill}\"")))
        .map(|r| {
            (
                attr(&format!(" {r}"), "x"),
                attr(&format!(" {r}"), "y"),
                attr(&format!(" {r}"), "width"),
            )
        })
        .collect()
}

#[test]
fn the_gantt_chart_draws_chunked_passes_hatched_after_the_micro_batch() {
    use skrull_cli::svg::{Panel, gantt};
    let mut cfg = Config::new(1, 8, 26 * 1024, ModelShape::QWEN2_5_0_5B);
    cfg.chunking = skrull_core::Chunking::new(8192, 1);
    let lengths = [900u32, 40_000, 60_000, 3000];
    let p = |micro_batch, cp_rank, cp_first, cp_size| Placement {
        dp_rank: 0,
        micro_batch,
        cp_rank,
        cp_first,
        cp_size,
    };
    // Micro-batch 0: a local sequence on rank 0, 40,000 tokens chunked on rank 3 alone and
    // 60,000 on ranks 4-7; micro-batch 1: one shard over all 8.
    let placements = [
        p(0, 0, 0, 0),
        p(0, -2, 3, 1),
        p(0, -2, 4, 4),
        p(1, -1, 0, 0),
    ];
    let cost = CostModel::h100(&cfg.model);
    let cfg = cfg.with_cost(cost);
    let tm = TimeModel::new(&cost, &cfg);
    let mut bufs = OwnedEval::default();
    let ev = bufs.evaluate(&cfg, &lengths, &placements).expect("eval");
    let panel = Panel::new("chunked".into(), 1, 8, &ev, &tm);
    assert!(panel.has_chunked() && !panel.has_subgroups());
    let doc = gantt("chunked", &[panel]);
    assert_eq!(check_xml(&doc), Ok("svg".to_string()));
    assert!(doc.contains("<pattern id=\"chunked\""), "{doc}");
    assert!(doc.contains("chunked passes, after the rest of the micro-batch"));
    assert!(doc.contains("3 sequences (0 sharded, 2 chunked)"), "{doc}");
    // Lanes are 12 px from y = 96 + 22 (two legend rows and the chunk row, the panel title).
    let lane = |y: f64| ((y - 118.0) / 12.0).floor() as i64;
    let hatched: Vec<(f64, f64, f64)> = rects(&doc, "url(#chunked)")
        .into_iter()
        .filter(|r| r.1 >= 118.0)
        .collect();
    let mut lanes: Vec<i64> = hatched.iter().map(|r| lane(r.1)).collect();
    lanes.dedup();
    assert_eq!(lanes, [3, 4, 5, 6, 7]);
    // Each lane's chunked passes start where its fixed overhead (the end of the rest of the
    // micro-batch) ends.
    let fixed = rects(&doc, "#9a9a9a");
    for &(x, y, _) in &hatched {
        let end = fixed
            .iter()
            .filter(|f| lane(f.1) == lane(y) && f.0 < x)
            .map(|f| f.0 + f.2)
            .fold(f64::NAN, f64::max);
        assert!(
            (end - x).abs() < 0.02,
            "lane {}: fixed ends {end}, chunks start {x}",
            lane(y)
        );
    }
    // No chunk, no hatching and no legend row.
    let plain = Panel::new("plain".into(), 1, 8, &ev, &tm);
    let mut plain = plain;
    plain.ranks.iter_mut().for_each(|s| s.chunked_time = 0.0);
    let doc = gantt("plain", &[plain]);
    assert!(!doc.contains("chunked passes") && !doc.contains("url(#chunked)"));
}
