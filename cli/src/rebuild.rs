//! A [`Plan`] rebuilt from bare placements (a plan file, or placements written by hand): the
//! micro-batch table, the members and the per-rank token loads recounted from the
//! placements, then validated by the core ([`Plan::from_parts`]).

use skrull_core::{Config, MicroBatch, Placement, Plan, PlanParts};

/// The owned slices of a rebuilt plan; [`RebuiltPlan::plan`] views them.
#[derive(Debug, Clone, Default)]
pub struct RebuiltPlan {
    placements: Vec<Placement>,
    micro_batches: Vec<MicroBatch>,
    members: Vec<u32>,
    rank_tokens: Vec<u32>,
    per_dp: Vec<u32>,
}

impl RebuiltPlan {
    /// Recounts the plan of `placements` (one per sequence of `lengths`): members in
    /// (DP rank, micro-batch, sequence) order, each DP rank running micro-batches up to the
    /// highest index it uses (every rank the longest count with [`Config::lockstep`]), and
    /// every GPU's tokens under `cfg`'s budget (a chunked sequence charges each GPU of its
    /// group its chunked peak, [`Budget::chunked`](skrull_core::Budget::chunked)).
    /// Whole-group shards and local sequences are normalised to `cp_first = cp_size = 0`, as
    /// the policies write them; a chunked sequence keeps its group.
    pub fn new(cfg: &Config, lengths: &[u32], placements: &[Placement]) -> RebuiltPlan {
        let cp = cfg.cp as usize;
        let placements: Vec<Placement> = placements
            .iter()
            .map(|p| {
                if p.is_subgroup(cfg.cp) || p.is_chunked() {
                    *p
                } else {
                    Placement {
                        cp_first: 0,
                        cp_size: 0,
                        ..*p
                    }
                }
            })
            .collect();
        let mut per_dp = vec![0u32; cfg.dp as usize];
        for p in &placements {
            if let Some(c) = per_dp.get_mut(p.dp_rank as usize) {
                *c = (*c).max(p.micro_batch.saturating_add(1));
            }
        }
        if cfg.uniform_counts() {
            let longest = per_dp.iter().copied().max().unwrap_or(0);
            let count = if cfg.micro_batches != 0 {
                cfg.micro_batches
            } else {
                longest
            };
            per_dp.iter_mut().for_each(|c| *c = count);
        }
        let mut order: Vec<u32> = (0..placements.len() as u32).collect();
        order.sort_by_key(|&s| {
            let p = &placements[s as usize];
            (p.dp_rank, p.micro_batch, s)
        });
        let budget = cfg.budget();
        let mut micro_batches: Vec<MicroBatch> = Vec::new();
        let mut rank_tokens: Vec<u32> = Vec::new();
        for (i, &s) in order.iter().enumerate() {
            let p = &placements[s as usize];
            let opens = micro_batches
                .last()
                .is_none_or(|m| (m.dp_rank, m.index) != (p.dp_rank, p.micro_batch));
            if opens {
                micro_batches.push(MicroBatch {
                    dp_rank: p.dp_rank,
                    index: p.micro_batch,
                    first: i as u32,
                    count: 0,
                });
                rank_tokens.resize(rank_tokens.len() + cp, 0);
            }
            if let Some(m) = micro_batches.last_mut() {
                m.count += 1;
            }
            let len = lengths.get(s as usize).copied().unwrap_or(0);
            let at = rank_tokens.len() - cp;
            let tokens = &mut rank_tokens[at..];
            if p.is_chunked() {
                let group = p.group(cfg.cp);
                let peak = budget.chunked(&cfg.chunking, len, group.size);
                let peak = u32::try_from(peak).unwrap_or(u32::MAX);
                let ranks = tokens.iter_mut().skip(group.first as usize);
                for t in ranks.take(group.size as usize) {
                    *t = t.saturating_add(peak);
                }
            } else if p.is_sharded() {
                let group = p.group(cfg.cp);
                let share = budget.for_group(group.size).share(len);
                let ranks = tokens.iter_mut().skip(group.first as usize);
                for t in ranks.take(group.size as usize) {
                    *t = t.saturating_add(share);
                }
            } else if let Some(t) = tokens.get_mut(p.cp_rank as usize) {
                *t = t.saturating_add(budget.local(len));
            }
        }
        RebuiltPlan {
            placements,
            micro_batches,
            members: order,
            rank_tokens,
            per_dp,
        }
    }

    /// The plan, once the core's checker accepts it for `cfg` and `lengths` (the same ones
    /// [`RebuiltPlan::new`] was given).
    ///
    /// # Errors
    /// The checker's finding, as text (e.g. a GPU over BucketSize, or a sub-group that is not
    /// a valid shard of the CP group).
    pub fn plan(&self, cfg: &Config, lengths: &[u32]) -> Result<Plan<'_>, String> {
        let parts = PlanParts {
            placements: &self.placements,
            micro_batches: &self.micro_batches,
            members: &self.members,
            rank_tokens: &self.rank_tokens,
            micro_batches_per_dp: &self.per_dp,
            rollbacks: 0,
        };
        Plan::from_parts(&skrull_kit::setup_of(cfg), lengths, parts).map_err(|e| format!("{e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skrull_core::{Chunking, ModelShape, Policy};
    use skrull_kit::OwnedBuffers;

    #[test]
    fn a_scheduled_plan_rebuilds_to_itself() {
        let policies = [
            Policy::Skrull,
            Policy::Balanced,
            Policy::DeepSpeed,
            Policy::ChunkFlow,
        ];
        for policy in policies {
            for lockstep in [false, true] {
                let mut cfg = Config::new(2, 4, 4096, ModelShape::QWEN2_5_7B).with_policy(policy);
                cfg.lockstep = lockstep;
                if policy == Policy::ChunkFlow {
                    cfg.chunking = Chunking::new(2048, 1);
                }
                let lengths = [100u32, 9000, 3000, 50, 4096, 12_000, 7, 1, 2];
                let mut bufs = OwnedBuffers::for_batch(lengths.len(), &cfg);
                let plan = bufs.schedule(&cfg, &lengths).unwrap();
                let again = RebuiltPlan::new(&cfg, &lengths, plan.placements());
                let rebuilt = again.plan(&cfg, &lengths).unwrap();
                assert_eq!(rebuilt.placements(), plan.placements());
                let chunked = plan.placements().iter().filter(|p| p.is_chunked()).count();
                assert_eq!(chunked > 0, policy == Policy::ChunkFlow, "{policy:?}");
                assert_eq!(rebuilt.micro_batches_per_dp(), plan.micro_batches_per_dp());
                assert_eq!(rebuilt.micro_batches().len(), plan.micro_batches().len());
                for g in 0..plan.micro_batches().len() {
                    assert_eq!(rebuilt.rank_tokens(g), plan.rank_tokens(g));
                }
            }
        }
    }

    #[test]
    fn sub_group_shards_load_their_ranks_only() {
        let cfg = Config::new(1, 8, 1000, ModelShape::QWEN2_5_0_5B);
        let lengths = [800u32, 400, 100];
        let sub = |first, size| Placement {
            cp_rank: -1,
            cp_first: first,
            cp_size: size,
            ..Placement::default()
        };
        let placements = [
            sub(0, 0),
            sub(4, 4),
            Placement {
                cp_rank: 1,
                ..Placement::default()
            },
        ];
        let rebuilt = RebuiltPlan::new(&cfg, &lengths, &placements);
        let plan = rebuilt.plan(&cfg, &lengths).unwrap();
        assert_eq!(
            plan.rank_tokens(0),
            &[100, 200, 100, 100, 200, 200, 200, 200]
        );
        assert!(plan.placements()[1].is_subgroup(cfg.cp));
        // A misaligned group is refused by the checker.
        let bad = [sub(0, 0), sub(2, 4), placements[2]];
        let err = RebuiltPlan::new(&cfg, &lengths, &bad)
            .plan(&cfg, &lengths)
            .unwrap_err();
        assert!(err.contains("OutOfRange"), "{err}");
    }
}
