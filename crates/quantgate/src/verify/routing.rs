//! Gate 2 for mixture-of-experts models: the experts llama.cpp routed each token to in each
//! layer (read from its graph, `llama_runtime::routing`) against the reference's choice on the
//! same weights (`reference::moe`). A different set where the reference's k-th and
//! (k+1)-th router probabilities are far apart is a bug (a wrong `expert_used_count`, a
//! swapped expert or router row); at a near-tie either choice is right, and llama.cpp's own
//! arithmetic (F16 KV cache, its matmul order) decides it.

use serde::{Deserialize, Serialize};

/// A near-tie: a reference margin (k-th minus (k+1)-th router probability) below this may
/// route differently in llama.cpp. Fixed from the measurement on the seeded Qwen3-MoE
/// fixture before any tampered file was judged (see [`MAX_DIFFERING`]).
pub const NEAR_TIE: f32 = 1e-3;

/// The largest fraction of (token, layer) routings allowed to differ at near-ties.
pub const MAX_DIFFERING: f64 = 0.01;

/// What was compared and how often the choices differed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RoutingReport {
    /// (token, layer) pairs compared.
    pub pairs: usize,
    /// Pairs whose sets of chosen experts differ.
    pub differing: usize,
    /// Of those, how many had a reference margin of at least [`NEAR_TIE`].
    pub differing_clear: usize,
    /// The smallest reference margin over all pairs.
    pub min_margin: f32,
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
                min_margin: f32::INFINITY,
                ..RoutingReport::default()
            },
            text: 0,
        }
    }

    /// One text: the reference's routing per layer and llama.cpp's log of the same decode.
    /// A layer or token llama.cpp did not report counts as differing.
    pub fn add(
        &mut self,
        reference: &[reference::moe::Routing],
        llama: &llama_runtime::routing::RoutingLog,
    ) {
        for (layer, r) in reference.iter().enumerate() {
            let got = llama.layers.get(&layer);
            for (pos, want) in r.chosen.iter().enumerate() {
                let margin = r.margin[pos];
                self.r.pairs += 1;
                self.r.min_margin = self.r.min_margin.min(margin);
                let mut w: Vec<i32> = want.iter().map(|e| *e as i32).collect();
                w.sort_unstable();
                let mut g = got.and_then(|g| g.get(pos)).cloned().unwrap_or_default();
                g.sort_unstable();
                if g == w {
                    continue;
                }
                self.r.differing += 1;
                self.r.differing_clear += usize::from(margin >= NEAR_TIE);
                if self.r.first_difference.is_none() {
                    self.r.first_difference = Some(format!(
                        "text {} position {pos} layer {layer}: reference {w:?}, llama.cpp {g:?}, reference margin {margin:.2e}",
                        self.text
                    ));
                }
            }
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
