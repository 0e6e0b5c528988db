//! A Gantt chart of one iteration as SVG: one panel per plan, one row per (DP rank, CP rank),
//! micro-batches as outlined boxes; inside each, a rank's local work, sharded work, exposed
//! communication and fixed overhead in different colours, on one shared time axis. A
//! sequence sharded over a sub-group of the CP ranks is drawn in the lanes of that group's
//! ranks only, in its own colours, with its ring's communication there and a dashed outline
//! around the ring's lanes. A chunked sequence's passes run after the rest of the
//! micro-batch on each GPU of its group: drawn hatched, with the ring communication they
//! cannot hide as a red stripe on top.

use std::fmt::Write;

use skrull_core::config::cost::Overlap;
use skrull_core::model::TimeModel;
use skrull_core::model::eval::{Evaluation, GROUP_LEVELS, MicroBatchTime, RankSlot};

/// One sub-group ring of a micro-batch: the sequences sharded over CP ranks
/// `first..first + size`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PanelRing {
    /// The group's first CP rank.
    pub first: u32,
    /// Its size.
    pub size: u32,
    /// Tokens of the sequences sharded over it, whole.
    pub tokens: u64,
    /// Its ring's communication, seconds.
    pub comm: f64,
}

/// One plan to draw: the evaluator's per-micro-batch and per-rank results, copied.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Heading of the panel (policy, time).
    pub title: String,
    /// DP size.
    pub dp: u32,
    /// CP size.
    pub cp: u32,
    /// Every micro-batch slot, grouped by DP rank.
    pub micro_batches: Vec<MicroBatchTime>,
    /// Per (slot, CP rank).
    pub ranks: Vec<RankSlot>,
    /// The fixed cost per micro-batch, seconds.
    pub fixed: f64,
    /// Which compute hides the communication.
    pub overlap: Overlap,
    /// The iteration time, seconds.
    pub iteration_time: f64,
    /// Per micro-batch slot: the communication of the ring over the whole CP group, seconds
    /// (the slot's `comm` less its sub-group rings').
    pub whole_comm: Vec<f64>,
    /// Per micro-batch slot: its sub-group rings.
    pub rings: Vec<Vec<PanelRing>>,
}

impl Panel {
    /// A panel from an evaluation `ev` made under `tm` (the time model of the configuration
    /// evaluated: its fixed cost, overlap and rings).
    pub fn new(title: String, dp: u32, cp: u32, ev: &Evaluation<'_>, tm: &TimeModel) -> Panel {
        let n = cp as usize;
        let mut whole_comm = Vec::with_capacity(ev.micro_batches.len());
        let mut rings = Vec::with_capacity(ev.micro_batches.len());
        for (g, mb) in ev.micro_batches.iter().enumerate() {
            let d = mb.dp_rank;
            whole_comm.push(tm.comm(mb.sharded_len, tm.group_ring(d)));
            let slots = ev.ranks.get(g * n..(g + 1) * n).unwrap_or(&[]);
            let mut here = Vec::new();
            for (r, slot) in slots.iter().enumerate() {
                for level in 0..GROUP_LEVELS {
                    let tokens = slot.group_len[level];
                    let size = 2u32 << level;
                    let first = r as u32 & !(size - 1);
                    if tokens > 0 && mb.sequences > 0 && first == r as u32 {
                        let comm = tm.comm(tokens, tm.ring(d, first, size));
                        here.push(PanelRing {
                            first,
                            size,
                            tokens,
                            comm,
                        });
                    }
                }
            }
            rings.push(here);
        }
        Panel {
            title,
            dp,
            cp,
            micro_batches: ev.micro_batches.to_vec(),
            ranks: ev.ranks.to_vec(),
            fixed: tm.fixed(),
            overlap: tm.cost.overlap,
            iteration_time: ev.report.iteration_time,
            whole_comm,
            rings,
        }
    }

    /// Whether some micro-batch shards a sequence over a sub-group.
    pub fn has_subgroups(&self) -> bool {
        self.rings.iter().any(|r| !r.is_empty())
    }

    /// Whether some GPU runs chunked passes.
    pub fn has_chunked(&self) -> bool {
        self.ranks.iter().any(|s| s.chunked_time > 0.0)
    }
}

const LOCAL_ATTN: &str = "#1b7f3b";
const LOCAL_GEMM: &str = "#7fcf8f";
const SHARD_ATTN: &str = "#1f5fb4";
const SHARD_GEMM: &str = "#8fb8e8";
const EXPOSED: &str = "#d62728";
const HIDDEN: &str = "#ff9f1c";
const FIXED: &str = "#9a9a9a";
const SUB_ATTN: &str = "#6a3d9a";
const SUB_GEMM: &str = "#c5a8e0";
const SUB_COMM: &str = "#e377c2";
/// The chunked passes: brown hatching ([`CHUNK_DEFS`]).
const CHUNKED: &str = "url(#chunked)";
const CHUNK_LINE: &str = "#8c510a";
/// The hatch pattern of the chunked passes.
const CHUNK_DEFS: &str = "<defs><pattern id=\"chunked\" width=\"4\" height=\"4\" \
    patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"4\" \
    height=\"4\" fill=\"#dfc27d\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"4\" \
    stroke=\"#8c510a\" stroke-width=\"2\"/></pattern></defs>";

/// Escapes text for XML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

/// A "nice" tick step (1, 2 or 5 x 10^k) for about `target` ticks over `span`.
fn tick_step(span: f64, target: f64) -> f64 {
    if span.is_nan() || span <= 0.0 {
        return 1.0;
    }
    let raw = span / target;
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let k = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * p
}

fn fmt_ms(v: f64) -> String {
    let ms = v * 1e3;
    if ms >= 100.0 || ms == 0.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

struct Canvas {
    out: String,
    x0: f64,
    scale: f64,
}

impl Canvas {
    fn rect(&mut self, t0: f64, dt: f64, y: f64, h: f64, fill: &str) {
        let w = dt * self.scale;
        if w < 0.02 {
            return;
        }
        let _ = writeln!(
            self.out,
            "<rect x=\"{:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" height=\"{h:.2}\" fill=\"{fill}\"/>",
            self.x0 + t0 * self.scale
        );
    }
}

/// Draws `panels` on one time axis, under `title`.
pub fn gantt(title: &str, panels: &[Panel]) -> String {
    let width = 1200.0;
    let (left, right) = (96.0, 24.0);
    let rows: u32 = panels.iter().map(|p| p.dp * p.cp).sum();
    let row_h = if rows <= 48 {
        12.0
    } else if rows <= 128 {
        8.0
    } else {
        5.0
    };
    let tmax = panels
        .iter()
        .map(|p| p.iteration_time)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let plot_w = width - left - right;
    let scale = plot_w / tmax;
    let step = tick_step(tmax, 10.0);
    let subgroups = panels.iter().any(Panel::has_subgroups);
    let chunked = panels.iter().any(Panel::has_chunked);
    // One legend row more for sub-groups, one for chunked passes.
    let chunk_row = if subgroups { 88.0 } else { 70.0 };
    let head = 78.0 + if subgroups { 18.0 } else { 0.0 } + if chunked { 18.0 } else { 0.0 };
    let panel_head = 22.0;
    let dp_gap = 3.0;
    let axis_h = 34.0;
    let heights: Vec<f64> = panels
        .iter()
        .map(|p| panel_head + f64::from(p.dp * p.cp) * row_h + f64::from(p.dp) * dp_gap + axis_h)
        .collect();
    let height = head + heights.iter().sum::<f64>() + 10.0;
    let mut c = Canvas {
        out: String::new(),
        x0: left,
        scale,
    };
    let _ = writeln!(
        c.out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(c.out, "<title>{}</title>", escape(title));
    if chunked {
        let _ = writeln!(c.out, "{CHUNK_DEFS}");
    }
    let _ = writeln!(
        c.out,
        "<rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{height:.0}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        c.out,
        "<text x=\"{left}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        escape(title)
    );
    // Legend.
    let legend = [
        (LOCAL_ATTN, "local attention"),
        (LOCAL_GEMM, "local GEMMs"),
        (SHARD_ATTN, "sharded attention"),
        (SHARD_GEMM, "sharded GEMMs"),
        (HIDDEN, "CP comm hidden (top stripe)"),
        (EXPOSED, "CP comm exposed"),
        (FIXED, "fixed overhead"),
    ];
    let mut lx = left;
    for (i, (color, label)) in legend.iter().enumerate() {
        if i == 4 {
            lx = left;
        }
        let ly = if i < 4 { 34.0 } else { 52.0 };
        let _ = writeln!(
            c.out,
            "<rect x=\"{lx:.1}\" y=\"{ly}\" width=\"14\" height=\"11\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 18.0,
            ly + 9.5,
            escape(label)
        );
        lx += 26.0 + 7.0 * label.len() as f64;
    }
    let _ = writeln!(
        c.out,
        "<text x=\"{lx:.1}\" y=\"61.5\" fill=\"#444\">boxes: micro-batches; white inside a box: idle \
         (waiting for the slowest CP rank)</text>"
    );
    if subgroups {
        // Only charts with a sub-group shard get the third row.
        let sub = [
            (SUB_ATTN, "sub-group shard attention"),
            (SUB_GEMM, "sub-group shard GEMMs"),
            (SUB_COMM, "sub-group ring comm (top stripe)"),
        ];
        let mut lx = left;
        for (color, label) in sub {
            let _ = writeln!(
                c.out,
                "<rect x=\"{lx:.1}\" y=\"70\" width=\"14\" height=\"11\" fill=\"{color}\"/>\
                 <text x=\"{:.1}\" y=\"79.5\">{}</text>",
                lx + 18.0,
                escape(label)
            );
            lx += 26.0 + 7.0 * label.len() as f64;
        }
        let _ = writeln!(
            c.out,
            "<rect x=\"{lx:.1}\" y=\"70\" width=\"14\" height=\"11\" fill=\"none\" stroke=\"{SUB_ATTN}\" \
             stroke-dasharray=\"3,2\"/><text x=\"{:.1}\" y=\"79.5\">sub-group ring: the ranks a \
             sequence is sharded over</text>",
            lx + 18.0
        );
    }
    if chunked {
        let _ = writeln!(
            c.out,
            "<rect x=\"{left:.1}\" y=\"{chunk_row}\" width=\"14\" height=\"11\" fill=\"{CHUNKED}\" \
             stroke=\"{CHUNK_LINE}\" stroke-width=\"0.5\"/><text x=\"{:.1}\" y=\"{:.1}\">chunked \
             passes, after the rest of the micro-batch (red top stripe: their exposed ring comm)</text>",
            left + 18.0,
            chunk_row + 9.5
        );
    }

    let mut y = head;
    for (p, &h) in panels.iter().zip(&heights) {
        let _ = writeln!(
            c.out,
            "<text x=\"{left}\" y=\"{:.1}\" font-size=\"12\" font-weight=\"bold\">{}</text>",
            y + 15.0,
            escape(&p.title)
        );
        let top = y + panel_head;
        let plot_h = h - panel_head - axis_h;
        // Grid and axis.
        let mut t = 0.0;
        while t <= tmax * 1.0001 {
            let x = left + t * scale;
            let _ = writeln!(
                c.out,
                "<line x1=\"{x:.2}\" y1=\"{top:.1}\" x2=\"{x:.2}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/>\
                 <text x=\"{x:.2}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                top + plot_h + 4.0,
                top + plot_h + 16.0,
                fmt_ms(t)
            );
            t += step;
        }
        let _ = writeln!(
            c.out,
            "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">time (ms)</text>",
            top + plot_h + 2.0,
            left + plot_w,
            top + plot_h + 2.0,
            left + plot_w,
            top + plot_h + 29.0
        );
        let cp = p.cp as usize;
        for d in 0..p.dp {
            let dp_top = top + f64::from(d) * (f64::from(p.cp) * row_h + dp_gap);
            for r in 0..p.cp {
                let ry = dp_top + f64::from(r) * row_h;
                // Small rows: one label per DP rank.
                let label = if p.cp > 1 && row_h >= 8.0 {
                    format!("DP{d} CP{r}")
                } else if p.cp > 1 {
                    format!("DP{d} (CP0-{})", p.cp - 1)
                } else {
                    format!("DP{d}")
                };
                if row_h >= 8.0 || r == 0 {
                    let _ = writeln!(
                        c.out,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"{:.0}\">{label}</text>",
                        left - 6.0,
                        ry + row_h * 0.8,
                        (row_h * 0.85).clamp(7.0, 11.0)
                    );
                }
            }
            for (g, mb) in p.micro_batches.iter().enumerate() {
                if mb.dp_rank != d || mb.sequences == 0 {
                    continue;
                }
                let inner = row_h - 1.0;
                let whole_comm = p.whole_comm.get(g).copied().unwrap_or(mb.comm);
                for (r, slot) in p.ranks.iter().skip(g * cp).take(cp).enumerate() {
                    let ry = dp_top + r as f64 * row_h + 0.5;
                    let mut t = mb.start;
                    // The GEMMs of the main part, split by its tokens (the chunked peaks
                    // are not in them).
                    let main_tokens = slot.tokens.saturating_sub(slot.chunked_tokens);
                    let share = |part: u64| {
                        if main_tokens > 0 {
                            part as f64 / main_tokens as f64
                        } else {
                            0.0
                        }
                    };
                    // The whole group's shards, then this rank's sub-group shards.
                    let (sharded_attn, sub_attn) = (mb.sharded_attention, slot.group_attention);
                    let window = match p.overlap {
                        Overlap::LocalAttention => slot.local_attention,
                        Overlap::AllAttention => slot.local_attention + sharded_attn + sub_attn,
                    };
                    c.rect(t, slot.local_attention, ry, inner, LOCAL_ATTN);
                    if p.overlap == Overlap::AllAttention {
                        let at = t + slot.local_attention;
                        c.rect(at, sharded_attn, ry, inner, SHARD_ATTN);
                        c.rect(at + sharded_attn, sub_attn, ry, inner, SUB_ATTN);
                    }
                    // The rings through this rank run from the micro-batch's start, the
                    // whole group's first (its hidden part striped), then the sub-groups'
                    // (striped whole, on top: hidden under the window, then exposed).
                    let stripe = (inner * 0.3).max(1.0);
                    c.rect(t, whole_comm.min(window), ry, stripe, HIDDEN);
                    let sub_comm = t + whole_comm;
                    t += window;
                    let main_exposed = (slot.exposed_comm - slot.chunked_exposed_comm).max(0.0);
                    c.rect(t, main_exposed, ry, inner, EXPOSED);
                    t += main_exposed;
                    for (tokens, color) in [
                        (slot.local_tokens, LOCAL_GEMM),
                        (mb.sharded_tokens, SHARD_GEMM),
                        (slot.group_tokens, SUB_GEMM),
                    ] {
                        let dt = slot.gemm * share(tokens);
                        c.rect(t, dt, ry, inner, color);
                        t += dt;
                    }
                    if p.overlap == Overlap::LocalAttention {
                        c.rect(t, sharded_attn, ry, inner, SHARD_ATTN);
                        c.rect(t + sharded_attn, sub_attn, ry, inner, SUB_ATTN);
                        t += sharded_attn + sub_attn;
                    }
                    c.rect(t, p.fixed, ry, inner, FIXED);
                    c.rect(sub_comm, slot.group_comm, ry, stripe, SUB_COMM);
                    // The chunked passes of this GPU's groups end its time in the micro-batch.
                    let t = mb.start + slot.time - slot.chunked_time;
                    c.rect(t, slot.chunked_time, ry, inner, CHUNKED);
                    c.rect(t, slot.chunked_exposed_comm, ry, stripe, EXPOSED);
                }
                for ring in p.rings.get(g).map_or(&[][..], Vec::as_slice) {
                    let _ = writeln!(
                        c.out,
                        "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"none\" \
                         stroke=\"{SUB_ATTN}\" stroke-width=\"1\" stroke-dasharray=\"3,2\"><title>DP {d} \
                         micro-batch {}: ring over CP ranks {}-{} ({} tokens sharded over {} ranks, \
                         comm {} ms)</title></rect>",
                        left + mb.start * scale + 0.5,
                        dp_top + f64::from(ring.first) * row_h + 0.5,
                        (mb.time * scale - 1.0).max(0.5),
                        (f64::from(ring.size) * row_h - 1.0).max(0.5),
                        mb.index,
                        ring.first,
                        ring.first + ring.size - 1,
                        ring.tokens,
                        ring.size,
                        fmt_ms(ring.comm)
                    );
                }
                let _ = writeln!(
                    c.out,
                    "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"none\" \
                     stroke=\"#222\" stroke-width=\"0.6\"><title>DP {d} micro-batch {}: {} ms, {} \
                     sequences ({} sharded{}), peak {} tokens/GPU, comm {} ms ({} ms exposed)</title></rect>",
                    left + mb.start * scale,
                    dp_top,
                    (mb.time * scale).max(0.5),
                    f64::from(p.cp) * row_h,
                    mb.index,
                    fmt_ms(mb.time),
                    mb.sequences,
                    mb.sharded,
                    if mb.chunked > 0 {
                        format!(", {} chunked", mb.chunked)
                    } else {
                        String::new()
                    },
                    mb.peak_tokens,
                    fmt_ms(mb.comm),
                    fmt_ms(mb.exposed_comm)
                );
            }
        }
        y += h;
    }
    c.out.push_str("</svg>\n");
    c.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice() {
        assert_eq!(tick_step(1.0, 10.0), 0.1);
        assert_eq!(tick_step(0.75, 10.0), 0.1);
        assert_eq!(tick_step(0.03, 10.0), 0.005);
        assert_eq!(tick_step(0.0, 10.0), 1.0);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
