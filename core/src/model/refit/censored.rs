//! Pessimism where the window cannot see: a ring's cost that hides behind compute on every
//! measured micro-batch is only bounded from above by the measurements (any cost up to the
//! compute it hides behind explains them equally). A fit would leave it where the model in
//! use put it, and a plan that exposes more of it than the window ever did would pay
//! whatever it really is. So a fit's communication coefficients of a ring kind (inside a
//! node, across nodes) that no measurement shows exposed are raised to the largest value the
//! window allows: the one at which the tightest measured micro-batch stops hiding it
//! ([`RefitState::pessimistic`]). The model then never plans more exposed communication than
//! the measurements bound, and a measurement that shows it exposed identifies it.
//!
//! A ring kind the configuration can use but the window has not measured at all has no bound:
//! switching the overlap rule to `all-attention` would hide its cost behind more compute on
//! no evidence, so that switch waits until every usable ring kind was measured
//! ([`RefitState::unmeasured_kinds`]).

use crate::config::Config;
use crate::config::cost::CostModel;
use crate::config::cp_group::CpGroup;
use crate::model::refit::features::{BW_INTER, BW_INTRA, LAT_INTER, LAT_INTRA, Subset};
use crate::model::refit::solve::{Coefs, MAX_SCALE, comm, decay, predict, window};
use crate::model::refit::{Coef, RefitState, Row};
use crate::model::time::TimeModel;

/// The weighted share of a ring kind's measurements that must show its communication exposed
/// (on the communication side of `max(comm, window)`) for its cost to count as measured.
pub const EXPOSED_SHARE: f64 = 0.05;

/// The two ring kinds: latency and bandwidth features and coefficients.
const KINDS: [(usize, usize, Coef, Coef); 2] = [
    (
        LAT_INTRA,
        BW_INTRA,
        Coef::IntraLatency,
        Coef::IntraBandwidth,
    ),
    (
        LAT_INTER,
        BW_INTER,
        Coef::InterLatency,
        Coef::InterBandwidth,
    ),
];

impl RefitState {
    /// Raises the communication coefficients of each ring kind whose measurements in `subset`
    /// (weights `forgetting^age`) are exposed under `c` on less than [`EXPOSED_SHARE`] of them
    /// to the largest common factor that keeps every one of them hidden (see the
    /// [module docs](self)). Returns the bits of the coefficients raised.
    pub fn pessimistic(&self, rows: &[Row], c: &mut Coefs, subset: Subset) -> u32 {
        let mut bits = 0;
        for (lat, bw, cl, cb) in KINDS {
            let (cl, cb) = (cl as usize, cb as usize);
            let (mut seen, mut exposed) = (0.0, 0.0);
            let mut room = f64::INFINITY;
            for (age, row) in self.window_of(rows, subset) {
                let x = &row.x;
                let own = c[cl] * x[lat] + c[cb] * x[bw];
                if own <= 0.0 {
                    continue;
                }
                let w = decay(self.params.forgetting, age);
                seen += w;
                let (_, comm_side) = predict(c, row);
                if comm_side {
                    exposed += w;
                    continue;
                }
                // The other kind's communication on this GPU, and what hides it.
                room = room.min((window(c, row) - (comm(c, row) - own)) / own);
            }
            if seen <= 0.0 || exposed >= EXPOSED_SHARE * seen || room.is_nan() || room <= 1.0 {
                continue;
            }
            let f = room.min(MAX_SCALE / c[cl].max(c[cb]).max(1e-300));
            if f > 1.0 {
                c[cl] *= f;
                c[cb] *= f;
                bits |= (1 << cl) | (1 << cb);
            }
        }
        bits | self.no_faster_across_nodes(c)
    }

    /// A ring across nodes rides intra-node hops too, and is as slow as its slowest hop: its
    /// step latency and time per byte are never below those of a ring inside a node. Raises
    /// the inter-node coefficients of `c` to that floor (where the configuration can use
    /// such rings); returns the bits raised.
    pub fn no_faster_across_nodes(&self, c: &mut Coefs) -> u32 {
        if self.ring_kinds & 2 == 0 {
            return 0;
        }
        let p = &self.prior;
        let (il, ib) = (Coef::IntraLatency as usize, Coef::IntraBandwidth as usize);
        let (xl, xb) = (Coef::InterLatency as usize, Coef::InterBandwidth as usize);
        let mut bits = 0;
        // Seconds per step and per byte, relative to the prior's inter-node ones.
        if p.inter_node_ring_step_latency_s > 0.0 {
            let floor = c[il] * p.ring_step_latency_s / p.inter_node_ring_step_latency_s;
            if c[xl] < floor {
                c[xl] = floor.min(MAX_SCALE);
                bits |= 1 << xl;
            }
        }
        let floor = c[ib] * p.inter_node_bandwidth / p.intra_node_bandwidth;
        if c[xb] < floor {
            c[xb] = floor.min(MAX_SCALE);
            bits |= 1 << xb;
        }
        bits
    }
}

/// The ring kinds `cfg`'s plans can use under `cost`'s topology: bit 0 a ring inside a node,
/// bit 1 a ring across nodes (the whole CP group of every DP rank, and with sub-groups every
/// aligned sub-group).
pub fn ring_kinds(cost: &CostModel, cfg: &Config) -> u32 {
    if cfg.cp <= 1 {
        return 0;
    }
    let tm = TimeModel::new(cost, cfg);
    let mut bits = 0;
    // The pattern of node crossings repeats every `gpus_per_node` DP ranks at most.
    let period = cfg.dp.min(cost.gpus_per_node.max(1));
    for d in 0..period {
        let mut note = |first: u32, size: u32| {
            bits |= if tm.ring(d, first, size).crosses_nodes {
                2
            } else {
                1
            };
        };
        note(0, cfg.cp);
        if cfg.subgroups {
            for size in CpGroup::sub_sizes(cfg.cp) {
                for g in CpGroup::aligned(cfg.cp, size) {
                    note(g.first, g.size);
                }
            }
        }
    }
    bits
}

impl RefitState {
    /// The ring kinds the configuration can use (bit 0 inside a node, bit 1 across nodes)
    /// that no measurement of `subset` in the window rode.
    pub fn unmeasured_kinds(&self, rows: &[Row], subset: Subset) -> u32 {
        let mut seen = 0;
        for (_, row) in self.window_of(rows, subset) {
            if row.x[LAT_INTRA] > 0.0 || row.x[BW_INTRA] > 0.0 {
                seen |= 1;
            }
            if row.x[LAT_INTER] > 0.0 || row.x[BW_INTER] > 0.0 {
                seen |= 2;
            }
            if seen == self.ring_kinds {
                break;
            }
        }
        self.ring_kinds & !seen
    }
}
