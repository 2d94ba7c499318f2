//! Mixture-of-experts FFN (transformers `Qwen3MoeSparseMoeBlock`): a linear router
//! (`mlp.gate`, no bias) gives each token a softmax over the experts, the `top_k` largest are
//! kept (renormalised to sum 1 when `norm_topk_prob`), and the token's output is the weighted
//! sum of those experts' SwiGLU FFNs (`mlp.experts.E.{gate,up,down}_proj`). In f32 throughout.
//!
//! Ties: the top-k choice keeps the lower expert index among equal probabilities. Routing is
//! returned with each forward so a caller can see how close the choices were
//! ([`Routing::min_margin`]).

use candle_core::{Device, Tensor, D};
use candle_nn::{linear_no_bias, Linear, Module, VarBuilder};

use crate::Result;

/// The MoE fields of config.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeConfig {
    /// Experts per layer (`num_experts`, v5 `num_local_experts`).
    pub n_expert: usize,
    /// Experts per token (`num_experts_per_tok`).
    pub top_k: usize,
    /// One expert's FFN width (`moe_intermediate_size`).
    pub n_ff: usize,
    /// Renormalise the kept weights to sum 1 (`norm_topk_prob`).
    pub norm_topk_prob: bool,
}

/// One layer's router and experts.
pub struct Moe {
    cfg: MoeConfig,
    router: Linear,
    experts: Vec<(Linear, Linear, Linear)>,
}

/// How one forward routed its tokens.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Routing {
    /// Per token: the chosen experts, best first.
    pub chosen: Vec<Vec<u32>>,
    /// Per token: the k-th largest router probability minus the (k+1)-th (0 for a tie);
    /// `f32::INFINITY` when every expert is chosen.
    pub margin: Vec<f32>,
}

impl Routing {
    /// The smallest margin over the tokens (`INFINITY` for none).
    pub fn min_margin(&self) -> f32 {
        self.margin.iter().copied().fold(f32::INFINITY, f32::min)
    }
}

impl Moe {
    /// Reads the router and every expert under `mlp` (hidden size `h`).
    ///
    /// Errors: a missing tensor or a shape that disagrees with the config.
    pub fn load(mlp: VarBuilder, h: usize, cfg: MoeConfig) -> Result<Moe> {
        let router = linear_no_bias(h, cfg.n_expert, mlp.pp("gate"))?;
        let experts = (0..cfg.n_expert)
            .map(|e| {
                let x = mlp.pp(format!("experts.{e}"));
                Ok((
                    linear_no_bias(h, cfg.n_ff, x.pp("gate_proj"))?,
                    linear_no_bias(h, cfg.n_ff, x.pp("up_proj"))?,
                    linear_no_bias(cfg.n_ff, h, x.pp("down_proj"))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Moe {
            cfg,
            router,
            experts,
        })
    }

    /// `x` `[n, hidden]` → (`[n, hidden]`, how it was routed).
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, Routing)> {
        let probs = candle_nn::ops::softmax(&self.router.forward(x)?, D::Minus1)?;
        let routing = self.route(&probs.to_vec2::<f32>()?);
        let probs = probs.to_vec2::<f32>()?;
        let mut out = x.zeros_like()?;
        for (e, (gate, up, down)) in self.experts.iter().enumerate() {
            // The tokens routed to expert e, and each one's weight.
            let (rows, weights): (Vec<u32>, Vec<f32>) = routing
                .chosen
                .iter()
                .enumerate()
                .filter(|(_, c)| c.contains(&(e as u32)))
                .map(|(t, c)| (t as u32, self.weight(&probs[t], c, e)))
                .unzip();
            if rows.is_empty() {
                continue;
            }
            let idx = Tensor::new(rows.as_slice(), &Device::Cpu)?;
            let xe = x.index_select(&idx, 0)?;
            let g = candle_nn::ops::silu(&gate.forward(&xe)?)?;
            let y = down.forward(&(g * up.forward(&xe)?)?)?;
            let w = Tensor::new(weights.as_slice(), &Device::Cpu)?.reshape((rows.len(), 1))?;
            out = out.index_add(&idx, &y.broadcast_mul(&w)?, 0)?;
        }
        Ok((out, routing))
    }

    /// The top-k experts of each token's probabilities (ties to the lower index) and the
    /// margin to the first one left out.
    fn route(&self, probs: &[Vec<f32>]) -> Routing {
        let k = self.cfg.top_k.clamp(1, self.cfg.n_expert.max(1));
        let mut r = Routing::default();
        for p in probs {
            let mut order: Vec<u32> = (0..p.len() as u32).collect();
            order.sort_by(|a, b| p[*b as usize].total_cmp(&p[*a as usize]).then(a.cmp(b)));
            let margin = match order.get(k) {
                Some(next) => p[order[k - 1] as usize] - p[*next as usize],
                None => f32::INFINITY,
            };
            order.truncate(k);
            r.chosen.push(order);
            r.margin.push(margin);
        }
        r
    }

    /// Expert `e`'s weight for a token with probabilities `p` and choice `chosen`.
    fn weight(&self, p: &[f32], chosen: &[u32], e: usize) -> f32 {
        if !self.cfg.norm_topk_prob {
            return p[e];
        }
        let sum: f32 = chosen.iter().map(|c| p[*c as usize]).sum();
        p[e] / sum
    }
}

/// The MoE fields of a qwen3_moe config (`None` for a model without experts).
///
/// Errors: a qwen3_moe config missing one of them, naming the field.
pub fn config(v: &serde_json::Value, path: &std::path::Path) -> Result<Option<MoeConfig>> {
    if v["model_type"] != "qwen3_moe" {
        return Ok(None);
    }
    let int = |k: &str| crate::config_usize(v, path, k);
    let n_expert = crate::hf_config::field(v, "num_local_experts")
        .and_then(|x| x.as_u64())
        .map(|x| Ok(x as usize))
        .unwrap_or_else(|| int("num_experts"))?;
    let top_k = int("num_experts_per_tok")?;
    if !(1..=n_expert).contains(&top_k) {
        return Err(crate::RefError::Unsupported(format!(
            "{}: field num_experts_per_tok = {top_k}: must be 1 to the {n_expert} experts",
            path.display()
        )));
    }
    Ok(Some(MoeConfig {
        n_expert,
        top_k,
        n_ff: int("moe_intermediate_size")?,
        norm_topk_prob: crate::hf_config::field(v, "norm_topk_prob")
            .and_then(|x| x.as_bool())
            .unwrap_or(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;

    /// Two experts that add 1 and 2 to the output of a one-dimensional model, chosen by a
    /// router that prefers expert 1 for positive inputs.
    #[test]
    fn routes_top_k_with_renormalised_weights_and_names_the_margin() {
        let dev = Device::Cpu;
        let mut t = std::collections::HashMap::new();
        // Router logits: expert 0 gets -x, expert 1 gets +x.
        t.insert(
            "gate.weight".to_string(),
            Tensor::new(&[[-1f32], [1f32]], &dev).unwrap(),
        );
        for (e, scale) in [(0, 1f32), (1, 2f32)] {
            // silu(g·x)·(u·x) then down: with g = u = 1, down = scale.
            for p in ["gate_proj", "up_proj"] {
                t.insert(
                    format!("experts.{e}.{p}.weight"),
                    Tensor::new(&[[1f32]], &dev).unwrap(),
                );
            }
            t.insert(
                format!("experts.{e}.down_proj.weight"),
                Tensor::new(&[[scale]], &dev).unwrap(),
            );
        }
        let vb = VarBuilder::from_tensors(t, DType::F32, &dev);
        let cfg = MoeConfig {
            n_expert: 2,
            top_k: 1,
            n_ff: 1,
            norm_topk_prob: true,
        };
        let m = Moe::load(vb, 1, cfg).unwrap();
        let x = Tensor::new(&[[1f32], [-1f32], [0f32]], &dev).unwrap();
        let (y, r) = m.forward(&x).unwrap();
        // Token 0 → expert 1 (weight 1 after renormalising): 2·silu(1)·1; token 1 → expert 0:
        // silu(-1)·(-1); token 2: a tie, the lower index, output 0.
        assert_eq!(r.chosen, vec![vec![1], vec![0], vec![0]]);
        let silu = |v: f32| v / (1.0 + (-v).exp());
        let y = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!((y[0] - 2.0 * silu(1.0)).abs() < 1e-6, "{y:?}");
        assert!((y[1] - (-silu(-1.0))).abs() < 1e-6, "{y:?}");
        assert_eq!(y[2], 0.0);
        assert_eq!(r.min_margin(), 0.0);
        let p1 = 1.0 / (1.0 + (-2f32).exp());
        assert!((r.margin[0] - (2.0 * p1 - 1.0)).abs() < 1e-6);
    }
}
