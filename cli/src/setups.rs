//! The paper's setups and the summary statistics every simulator table shares: the layouts
//! (`0.5b`, `7b`, the CP-16 rows, the case study), the paper's reported cells, and means.

use skrull_core::{Config, ModelShape};

use crate::args::model_name;

/// A parallel layout and budget from the paper.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Setup {
    /// Name used on the command line.
    pub name: &'static str,
    /// Model shape.
    pub model: ModelShape,
    /// DP size.
    pub dp: u32,
    /// CP size.
    pub cp: u32,
    /// Sequences per DP rank per iteration.
    pub batch_size: u32,
    /// BucketSize, tokens per GPU.
    pub bucket: u32,
}

impl Setup {
    /// A short label: model and layout.
    pub fn label(&self) -> String {
        let m = if self.model == ModelShape::QWEN2_5_0_5B {
            "0.5B".to_string()
        } else if self.model == ModelShape::QWEN2_5_7B {
            "7B".to_string()
        } else {
            model_name(&self.model)
        };
        format!(
            "{m} DP{} CP{} BS{} C{}K",
            self.dp,
            self.cp,
            self.batch_size,
            self.bucket / 1024
        )
    }
}

/// A kibi-token: 1,024 tokens.
pub const K: u32 = 1024;

/// The paper's layouts: `0.5b` and `7b` (DP 4, CP 8, BatchSize 64, BucketSize 26K / 13K),
/// `7b-cp16` (the 7B ChatQA2 run: DP 2, CP 16, BatchSize 40) and `case-study` (0.5B, DP 1);
/// and two of ours with rings that cross 8-GPU nodes: `0.5b-cp16` and `7b-cp16-bs64` (DP 2,
/// CP 16, BatchSize 64).
pub const SETUPS: [Setup; 6] = [
    Setup {
        name: "0.5b",
        model: ModelShape::QWEN2_5_0_5B,
        dp: 4,
        cp: 8,
        batch_size: 64,
        bucket: 26 * K,
    },
    Setup {
        name: "7b",
        model: ModelShape::QWEN2_5_7B,
        dp: 4,
        cp: 8,
        batch_size: 64,
        bucket: 13 * K,
    },
    Setup {
        name: "7b-cp16",
        model: ModelShape::QWEN2_5_7B,
        dp: 2,
        cp: 16,
        batch_size: 40,
        bucket: 13 * K,
    },
    Setup {
        name: "0.5b-cp16",
        model: ModelShape::QWEN2_5_0_5B,
        dp: 2,
        cp: 16,
        batch_size: 64,
        bucket: 26 * K,
    },
    Setup {
        name: "7b-cp16-bs64",
        model: ModelShape::QWEN2_5_7B,
        dp: 2,
        cp: 16,
        batch_size: 64,
        bucket: 13 * K,
    },
    Setup {
        name: "case-study",
        model: ModelShape::QWEN2_5_0_5B,
        dp: 1,
        cp: 8,
        batch_size: 64,
        bucket: 26 * K,
    },
];

/// A cell of the paper's Figure 3 and its reported speedups (figure-read by a third party;
/// only the averages 5.50 / 2.03 / 3.76 and the peak 7.54 are certain).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperCell {
    /// Setup name.
    pub setup: &'static str,
    /// Dataset name.
    pub dataset: &'static str,
    /// Skrull over DeepSpeed.
    pub vs_deepspeed: f64,
    /// Skrull over sorted batching.
    pub vs_sorted: f64,
}

/// The six experiments of the paper's evaluation.
pub const PAPER_CELLS: [PaperCell; 6] = [
    PaperCell {
        setup: "0.5b",
        dataset: "wikipedia",
        vs_deepspeed: 7.54,
        vs_sorted: 6.85,
    },
    PaperCell {
        setup: "0.5b",
        dataset: "lmsys",
        vs_deepspeed: 6.17,
        vs_sorted: 5.40,
    },
    PaperCell {
        setup: "0.5b",
        dataset: "chatqa2",
        vs_deepspeed: 2.79,
        vs_sorted: 1.86,
    },
    PaperCell {
        setup: "7b",
        dataset: "wikipedia",
        vs_deepspeed: 2.60,
        vs_sorted: 2.30,
    },
    PaperCell {
        setup: "7b",
        dataset: "lmsys",
        vs_deepspeed: 2.14,
        vs_sorted: 1.90,
    },
    PaperCell {
        setup: "7b-cp16",
        dataset: "chatqa2",
        vs_deepspeed: 1.35,
        vs_sorted: 1.20,
    },
];

/// The case study's reported speedups over the baseline (Table 3).
pub const CASE_STUDY_PAPER: [(&str, f64); 2] = [("roundrobin", 1.17), ("skrull", 1.40)];

/// The longest sequence that fits sharded: `N x C`, less if shard padding needs it
/// ([`Budget::max_sharded_len`](skrull_core::config::budget::Budget::max_sharded_len); 0
/// when nothing fits).
pub fn sharded_limit(cfg: &Config) -> u32 {
    cfg.budget().max_sharded_len()
}

/// Mean iteration time and lower bound of one policy run over a cell's batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunMeans {
    /// Mean iteration time, seconds.
    pub mean_time: f64,
    /// Mean lower bound under the run's configuration, seconds.
    pub mean_bound: f64,
}

impl RunMeans {
    /// The mean time over the mean lower bound.
    pub fn gap(&self) -> f64 {
        self.mean_time / self.mean_bound.max(1e-300)
    }
}

/// The geometric mean of `xs` (NaN when empty).
pub fn geometric_mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

/// The arithmetic mean of `xs` (NaN when empty).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        f64::NAN
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Milliseconds, one decimal below 10 s.
pub fn ms(s: f64) -> String {
    if s >= 10.0 {
        format!("{:.0}", s * 1e3)
    } else {
        format!("{:.1}", s * 1e3)
    }
}
