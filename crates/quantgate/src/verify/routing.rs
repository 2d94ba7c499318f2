//! Gate 2 for mixture-of-experts models: the experts llama.cpp routed each token to in each
//! layer (read from its graph, `llama_runtime::routing`) against the reference's choice on the
//! same weights (`reference::moe`). A different set where the reference's k-th and
//! (k+1)-th router probabilities are far apart is a bug (a wrong `expert_used_count`, a
//! swapped expert or router row); at a near-tie either choice is right, and llama.cpp's own
//! arithmetic (F16 KV cache, its matmul order) decides it.

use serde::{Deserialize, Serialize};

/// A near-tie: a reference margin (k-th minus (k+1)-th router probability) below this may
/// route differently in llama.cpp. Declared with [`MAX_DIFFERING`] before the first routing
/// measurement; measured since on the seeded Qwen3-MoE fixture: F16 and Q4_K_M each 2 of 794
/// (token, layer) choices differ, at margins 1.5e-5 and 2.1e-5.
pub const NEAR_TIE: f32 = 1e-3;

/// The largest fraction of (token, layer) routings allowed to differ at near-ties.
pub const MAX_DIFFERING: f64 = 0.01;

/// What was compared and how often the choices differed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RoutingReport {
    /// (token, layer) pairs judged: those no earlier difference can have reached.
    pub pairs: usize,
    /// Judged pairs whose sets of chosen experts differ.
    pub differing: usize,
    /// Of those, how many had a reference margin of at least [`NEAR_TIE`].
    pub differing_clear: usize,
    /// Pairs not judged: in a later layer, at or after the position of a difference in an
    /// earlier layer (llama.cpp's hidden state there already differs from the reference's,
    /// through that token's residual stream and causal attention).
    #[serde(default)]
    pub downstream: usize,
    /// The smallest reference margin over the judged pairs (NaN, written `null`, for none or
    /// when every expert is chosen).
    #[serde(deserialize_with = "crate::serde_nan::f64")]
    pub min_margin: f64,
    /// The first differing pair: text, position, layer, both choices and the margin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<String>,
}

/// Running comparison over the texts.
pub struct Tally {
    r: RoutingReport,
    text: usize,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            r: RoutingReport {
                min_margin: f64::NAN,
                ..RoutingReport::default()
            },
            text: 0,
        }
    }

    /// One text: the reference's routing per layer and llama.cpp's log of the same decode.
    /// A layer or token llama.cpp did not report counts as differing. Layers are taken in
    /// order; once a layer differs at position `t`, later layers are judged only before `t`.
    pub fn add(
        &mut self,
        reference: &[reference::moe::Routing],
        llama: &llama_runtime::routing::RoutingLog,
    ) {
        // The first differing position over the layers judged so far.
        let mut reached = usize::MAX;
        for (layer, r) in reference.iter().enumerate() {
            let got = llama.layers.get(&layer);
            let mut first_here = usize::MAX;
            for (pos, want) in r.chosen.iter().enumerate() {
                if pos >= reached {
                    self.r.downstream += 1;
                    continue;
                }
                let margin = r.margin[pos];
                self.r.pairs += 1;
                if margin.is_finite()
                    && (self.r.min_margin.is_nan() || (margin as f64) < self.r.min_margin)
                {
                    self.r.min_margin = margin as f64;
                }
                let mut w: Vec<i32> = want.iter().map(|e| *e as i32).collect();
                w.sort_unstable();
                let mut g = got.and_then(|g| g.get(pos)).cloned().unwrap_or_default();
                g.sort_unstable();
                if g == w {
                    continue;
                }
                first_here = first_here.min(pos);
                self.r.differing += 1;
                self.r.differing_clear += usize::from(margin >= NEAR_TIE);
                if self.r.first_difference.is_none() {
                    self.r.first_difference = Some(format!(
                        "text {} position {pos} layer {layer}: reference {w:?}, llama.cpp {g:?}, reference margin {margin:.2e}",
                        self.text
                    ));
                }
            }
            reached = reached.min(first_here);
        }
        self.text += 1;
    }

    pub fn report(self) -> RoutingReport {
        self.r
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

/// Why `r` fails, if it does: a difference at a clear margin, or more near-tie differences
/// than [`MAX_DIFFERING`].
pub fn failure(r: &RoutingReport) -> Option<String> {
    let frac = r.differing as f64 / r.pairs.max(1) as f64;
    if r.differing_clear > 0 || frac > MAX_DIFFERING || r.pairs == 0 {
        Some(format!(
            "{} of {} (token, layer) routings differ ({} with a reference margin ≥ {NEAR_TIE}; at most {} near-ties allowed){}",
            r.differing,
            r.pairs,
            r.differing_clear,
            MAX_DIFFERING,
            r.first_difference
                .as_ref()
                .map(|d| format!("; first: {d}"))
                .unwrap_or_default()
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::moe::Routing;

    fn routing(chosen: &[&[u32]], margin: &[f32]) -> Routing {
        Routing {
            chosen: chosen.iter().map(|c| c.to_vec()).collect(),
            margin: margin.to_vec(),
        }
    }

    #[test]
    fn later_layers_are_judged_only_before_the_first_difference() {
        // 3 tokens, 2 layers; llama.cpp differs at layer 0 position 1 (a near-tie).
        let reference = [
            routing(&[&[0, 1], &[1, 2], &[2, 3]], &[0.1, 1e-5, 0.1]),
            routing(&[&[0, 1], &[1, 2], &[2, 3]], &[0.1, 0.1, 0.1]),
        ];
        let mut log = llama_runtime::routing::RoutingLog::default();
        log.layers
            .insert(0, vec![vec![1, 0], vec![1, 3], vec![3, 2]]);
        // Layer 1 differs at positions 1 and 2 at a clear margin, but after the flip.
        log.layers
            .insert(1, vec![vec![0, 1], vec![0, 3], vec![0, 3]]);
        let mut t = Tally::new();
        t.add(&reference, &log);
        let r = t.report();
        assert_eq!(
            (r.pairs, r.differing, r.differing_clear, r.downstream),
            (4, 1, 0, 2)
        );
        assert_eq!(r.min_margin, 1e-5f32 as f64);
        assert!(failure(&r).is_some(), "1 of 4 is over 1% of near-ties");
        assert!(r
            .first_difference
            .as_deref()
            .unwrap()
            .starts_with("text 0 position 1 layer 0"));
        // 1 near-tie in 600 judged pairs passes; one clear difference fails.
        let mut t = Tally::new();
        for _ in 0..200 {
            t.add(&reference[..1], &log);
        }
        let r = t.report();
        assert_eq!((r.pairs, r.differing, r.differing_clear), (600, 200, 0));
        let mut ok = Tally::new();
        ok.add(&reference[..1], &log);
        for _ in 0..199 {
            let mut same = log.clone();
            same.layers
                .insert(0, vec![vec![0, 1], vec![1, 2], vec![2, 3]]);
            ok.add(&reference[..1], &same);
        }
        let r = ok.report();
        assert_eq!((r.pairs, r.differing), (600, 1));
        assert!(failure(&r).is_none(), "{r:?}");
        let mut clear = log.clone();
        clear
            .layers
            .insert(0, vec![vec![0, 1], vec![1, 2], vec![0, 1]]);
        let mut t = Tally::new();
        t.add(&reference[..1], &clear);
        let r = t.report();
        assert_eq!(r.differing_clear, 1);
        assert!(failure(&r).is_some());
    }
}
