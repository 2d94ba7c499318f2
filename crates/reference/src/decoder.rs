//! Decoder-only transformer forward (HF `LlamaForCausalLM`, `Qwen2*`, `Qwen3*`) in f32 on
//! candle ops, returning every position: final-norm hidden states and logits.
//!
//! Per-architecture differences: qwen2 has q/k/v biases; qwen3 has per-head RMS norms on q and
//! k (`q_norm`, `k_norm`) and an explicit `head_dim`. RoPE is HF's rotate-half form for all
//! (llama.cpp's Q/K row permutation for llama is a storage detail of GGUF, not of HF weights).
//! gemma3 (transformers `modeling_gemma3.py`, `Gemma3ForCausalLM`): RMS norms scale by `1 + w`;
//! embeddings times √hidden; norms after attention and after the FFN as well as before; Q/K
//! norms; tanh GELU; queries scaled by `query_pre_attn_scalar^-1/2`; sliding-window layers
//! (`layer_types`) attend to the last `sliding_window` positions with their own RoPE base
//! (`rope_local_base_freq`).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::{linear_b, linear_no_bias, Embedding, Linear, Module, VarBuilder};

mod attention;
mod phi3;

use crate::longrope::LongRope;
use crate::moe::{Moe, MoeConfig, Routing};
use crate::rope::Llama3;
use crate::{read_json, var_builder, RefError, Result};
use attention::{attend, SeqTables};
use phi3::{fused_qkv, phi3_rotation, rotate};

/// The config.json fields the forward needs.
#[derive(Clone, Debug)]
pub struct DecoderConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Llama 3 frequency scaling (`rope_type = "llama3"`), `None` for plain RoPE.
    pub rope_llama3: Option<Llama3>,
    pub tie_word_embeddings: bool,
    /// q/k/v projections have biases (qwen2).
    pub qkv_bias: bool,
    /// Per-head RMS norms on q and k (qwen3, gemma3).
    pub qk_norm: bool,
    /// gemma3's differences, `None` for the others.
    pub gemma: Option<GemmaConfig>,
    /// qwen3_moe: every layer's FFN is a routed set of experts ([`crate::moe`]).
    pub moe: Option<MoeConfig>,
    /// phi3: the fused `self_attn.qkv_proj` and `mlp.gate_up_proj` (gate rows first).
    pub fused: bool,
    /// Rotated dimensions per head, the first ones (phi3's `partial_rotary_factor`;
    /// `head_dim` for the others).
    pub rotary_dim: usize,
    /// LongRoPE (phi3), `None` for the others.
    pub longrope: Option<Box<LongRope>>,
    /// phi3: transformers masks attention to the last `sliding_window` positions.
    pub window: Option<usize>,
}

/// What gemma3 adds to a decoder's config.
#[derive(Clone, Debug)]
pub struct GemmaConfig {
    /// Per layer: whether it is a sliding-window layer (`layer_types`).
    pub sliding: Vec<bool>,
    /// Tokens a sliding-window layer sees, the current one included (`sliding_window`).
    pub window: usize,
    /// RoPE base of the sliding-window layers (`rope_local_base_freq`, or v5
    /// `rope_parameters.sliding_attention.rope_theta`).
    pub local_rope_theta: f64,
    /// Queries are scaled by this to the power −1/2 (`query_pre_attn_scalar`).
    pub query_pre_attn_scalar: f64,
}

impl GemmaConfig {
    fn from_json(v: &serde_json::Value, path: &Path, n_layer: usize, hd: usize) -> Result<Self> {
        let f = |k: &str| crate::hf_config::field(v, k);
        let missing =
            |k: &str| RefError::Unsupported(format!("{}: field {k} is missing", path.display()));
        let sliding: Vec<bool> = match f("layer_types").and_then(|l| l.as_array()) {
            Some(l) => l.iter().map(|t| t == "sliding_attention").collect(),
            None => {
                let p = f("sliding_window_pattern")
                    .or_else(|| f("_sliding_window_pattern"))
                    .and_then(|x| x.as_u64())
                    .unwrap_or(6) as usize;
                (0..n_layer).map(|i| (i + 1) % p.max(1) != 0).collect()
            }
        };
        let sliding_rope = f("rope_parameters").and_then(|r| r.get("sliding_attention"));
        if let Some(t) = sliding_rope.and_then(|s| s.get("rope_type").or_else(|| s.get("type"))) {
            if !(t.is_null() || t == "default") {
                return Err(RefError::Unsupported(format!(
                    "{}: field rope_parameters.sliding_attention.rope_type = {t}: the reference computes default RoPE only",
                    path.display()
                )));
            }
        }
        let local = sliding_rope
            .and_then(|s| s.get("rope_theta"))
            .or_else(|| f("rope_local_base_freq"))
            .and_then(|x| x.as_f64())
            .ok_or_else(|| missing("rope_local_base_freq"))?;
        Ok(GemmaConfig {
            sliding,
            window: f("sliding_window")
                .and_then(|x| x.as_u64())
                .ok_or_else(|| missing("sliding_window"))? as usize,
            local_rope_theta: local,
            query_pre_attn_scalar: f("query_pre_attn_scalar")
                .and_then(|x| x.as_f64())
                .unwrap_or(hd as f64),
        })
    }
}

impl DecoderConfig {
    /// Reads `config.json` (either transformers generation, [`crate::hf_config`]); the
    /// architecture comes from `model_type`.
    pub fn from_json(path: &Path) -> Result<DecoderConfig> {
        let v = read_json(path)?;
        let int = |k: &str| crate::config_usize(&v, path, k);
        let model_type = v["model_type"].as_str().unwrap_or("");
        let (qkv_bias, qk_norm) = match model_type {
            "llama" | "mistral" => (false, false),
            "qwen2" => (true, false),
            "qwen3" | "gemma3_text" | "qwen3_moe" => (false, true),
            "phi3" => (false, false),
            other => return Err(RefError::Unsupported(format!("model_type {other:?}"))),
        };
        let hidden = int("hidden_size")?;
        let heads = int("num_attention_heads")?;
        let hp = crate::hf_config::Hparams::from_config(&v)?;
        let n_layer = int("num_hidden_layers")?;
        let head_dim = int("head_dim").unwrap_or(hidden / heads);
        let rope_llama3 = match hp.rope_type.as_str() {
            "default" => None,
            "longrope" | "su" if model_type == "phi3" => None,
            "llama3" => {
                let at = match crate::hf_config::field(&v, "rope_parameters") {
                    Some(_) => "rope_parameters",
                    None => "rope_scaling",
                };
                Some(Llama3::from_params(
                    &hp.rope_params,
                    at,
                    hp.rope_theta.0,
                    head_dim,
                )?)
            }
            other => {
                return Err(RefError::Unsupported(format!(
                    "{}: rope type {other:?}: the reference computes default and llama3 RoPE only",
                    path.display()
                )))
            }
        };
        let phi3 = model_type == "phi3";
        let (rotary_dim, window) = match phi3 {
            true => phi3_rotation(&v, &hp, head_dim)?,
            false => (head_dim, None),
        };
        let gemma = (model_type == "gemma3_text")
            .then(|| GemmaConfig::from_json(&v, path, n_layer, head_dim))
            .transpose()?;
        Ok(DecoderConfig {
            hidden_size: hidden,
            num_hidden_layers: n_layer,
            num_attention_heads: heads,
            num_key_value_heads: int("num_key_value_heads").unwrap_or(heads),
            head_dim,
            rms_norm_eps: hp.rms_norm_eps,
            rope_theta: hp.rope_theta.0,
            rope_llama3,
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
            qkv_bias,
            qk_norm,
            gemma,
            moe: crate::moe::config(&v, path)?,
            fused: phi3,
            rotary_dim,
            longrope: LongRope::from_config(&v)?.map(Box::new),
            window,
        })
    }
}

impl DecoderConfig {
    /// An RMS norm's weight as the forward multiplies by it: `1 + w` for gemma3
    /// (`Gemma3RMSNorm`), `w` otherwise.
    fn norm_weight(&self, w: Tensor) -> Result<Tensor> {
        Ok(match self.gemma {
            Some(_) => (w + 1.0)?,
            None => w,
        })
    }
}

struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    ffn_norm: Tensor,
    /// gemma3: the norms of the attention output and of the FFN output.
    post_norms: Option<(Tensor, Tensor)>,
    /// gemma3: a sliding-window layer.
    sliding: bool,
    ffn: Ffn,
}

/// A layer's feed-forward block.
enum Ffn {
    /// SwiGLU (gemma3: tanh-GELU-gated): gate, up, down.
    Dense(Linear, Linear, Linear),
    /// Routed experts (qwen3_moe).
    Moe(Moe),
}

/// A decoder whose weights stay where they are (memory-mapped safetensors, or a caller's
/// backend) until a forward pass reads them, one layer at a time.
pub struct Decoder {
    cfg: DecoderConfig,
    /// The root builder (`lm_head.weight` lives here).
    root: VarBuilder<'static>,
    /// The builder under the model prefix (`model.` or none).
    m: VarBuilder<'static>,
}

/// Output of one forward pass.
pub struct DecoderOutput {
    /// Final-norm hidden states `[n_tokens, hidden]`.
    pub hidden: Tensor,
    /// Logits `[n_tokens, n_vocab]`.
    pub logits: Tensor,
    /// MoE models: how each layer routed the tokens, layer by layer (empty otherwise).
    pub routing: Vec<Routing>,
}

impl Layer {
    /// Reads layer `i`'s weights (under `l`) as f32, checking every shape against the config
    /// (the FFN width from `mlp.gate_proj.weight`).
    fn load(l: VarBuilder, i: usize, cfg: &DecoderConfig) -> Result<Layer> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let a = l.pp("self_attn");
        let mlp = l.pp("mlp");
        let lin = |vb: VarBuilder, i: usize, o: usize, bias: bool| -> Result<Linear> {
            Ok(linear_b(i, o, bias, vb)?)
        };
        let norm = |vb: &VarBuilder, name: &str| -> Result<Option<Tensor>> {
            Ok(if cfg.qk_norm {
                Some(cfg.norm_weight(vb.get(hd, name)?)?)
            } else {
                None
            })
        };
        let gemma = cfg.gemma.as_ref();
        let ffn_norm = match gemma {
            Some(_) => "pre_feedforward_layernorm.weight",
            None => "post_attention_layernorm.weight",
        };
        let post_norms = match gemma {
            Some(_) => Some((
                cfg.norm_weight(l.get(h, "post_attention_layernorm.weight")?)?,
                cfg.norm_weight(l.get(h, "post_feedforward_layernorm.weight")?)?,
            )),
            None => None,
        };
        let (q, k, v) = match cfg.fused {
            true => fused_qkv(&a, h, (nh * hd, nkv * hd))?,
            false => (
                lin(a.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                lin(a.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                lin(a.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
            ),
        };
        Ok(Layer {
            attn_norm: cfg.norm_weight(l.get(h, "input_layernorm.weight")?)?,
            q,
            k,
            v,
            o: linear_no_bias(nh * hd, h, a.pp("o_proj"))?,
            q_norm: norm(&a, "q_norm.weight")?,
            k_norm: norm(&a, "k_norm.weight")?,
            ffn_norm: cfg.norm_weight(l.get(h, ffn_norm)?)?,
            post_norms,
            sliding: gemma.is_some_and(|g| g.sliding.get(i).copied().unwrap_or(false)),
            ffn: Ffn::load(mlp, h, cfg)?,
        })
    }

    /// `x` `[n, hidden]` through attention and FFN with their residuals.
    fn forward(
        &self,
        x: &Tensor,
        t: &SeqTables,
        cfg: &DecoderConfig,
    ) -> Result<(Tensor, Option<Routing>)> {
        let n = x.dim(0)?;
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let eps = cfg.rms_norm_eps as f32;
        let scale = match &cfg.gemma {
            Some(g) => 1.0 / g.query_pre_attn_scalar.sqrt(),
            None => 1.0 / (hd as f64).sqrt(),
        };
        let t = match (&t.local, self.sliding) {
            (Some(local), true) => local.as_ref(),
            _ => t,
        };
        let a = candle_nn::ops::rms_norm(x, &self.attn_norm, eps)?;
        // [n, heads·hd] → [1, heads, n, hd]
        let heads = |t: Tensor, k: usize| -> Result<Tensor> {
            Ok(t.reshape((n, k, hd))?
                .transpose(0, 1)?
                .contiguous()?
                .unsqueeze(0)?)
        };
        let mut q = heads(self.q.forward(&a)?, nh)?;
        let mut k = heads(self.k.forward(&a)?, nkv)?;
        let v = heads(self.v.forward(&a)?, nkv)?;
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = candle_nn::ops::rms_norm(&q, qn, eps)?;
            k = candle_nn::ops::rms_norm(&k, kn, eps)?;
        }
        let (q, k) = (
            rotate(&q, t, cfg.rotary_dim)?,
            rotate(&k, t, cfg.rotary_dim)?,
        );
        // Grouped-query attention: each kv head serves nh/nkv query heads.
        let rep = nh / nkv;
        let expand = |t: Tensor| -> Result<Tensor> {
            Ok(t.squeeze(0)?
                .unsqueeze(1)?
                .expand((nkv, rep, n, hd))?
                .reshape((nh, n, hd))?)
        };
        let (q, k, v) = (q.squeeze(0)?, expand(k)?, expand(v)?);
        let ctx = attend(&q, &k, &v, scale, t)?
            .transpose(0, 1)?
            .reshape((n, nh * hd))?;
        let mut attn = self.o.forward(&ctx)?;
        if let Some((post_attn, _)) = &self.post_norms {
            attn = candle_nn::ops::rms_norm(&attn, post_attn, eps)?;
        }
        let x = (x + attn)?;
        let f = candle_nn::ops::rms_norm(&x, &self.ffn_norm, eps)?;
        let mut routing = None;
        let mut ff = match &self.ffn {
            Ffn::Dense(gate, up, down) => {
                let g = match cfg.gemma {
                    // gelu_pytorch_tanh; candle's gelu is the tanh approximation.
                    Some(_) => gate.forward(&f)?.gelu()?,
                    None => candle_nn::ops::silu(&gate.forward(&f)?)?,
                };
                down.forward(&(g * up.forward(&f)?)?)?
            }
            Ffn::Moe(m) => {
                let (y, r) = m.forward(&f)?;
                routing = Some(r);
                y
            }
        };
        if let Some((_, post_ffn)) = &self.post_norms {
            ff = candle_nn::ops::rms_norm(&ff, post_ffn, eps)?;
        }
        Ok(((x + ff)?, routing))
    }
}

impl Ffn {
    /// The FFN under `mlp` (hidden size `h`): the experts for a MoE config, else the dense
    /// SwiGLU whose width comes from `gate_proj.weight`.
    fn load(mlp: VarBuilder, h: usize, cfg: &DecoderConfig) -> Result<Ffn> {
        if let Some(m) = cfg.moe {
            return Ok(Ffn::Moe(Moe::load(mlp, h, m)?));
        }
        if cfg.fused {
            // phi3's `gate_up_proj`: the gate's rows, then the up projection's
            // (`Phi3MLP`: `gate, up = up_states.chunk(2, dim=-1)`).
            let w = mlp.get_unchecked_dtype("gate_up_proj.weight", DType::F32)?;
            let n_ff = w.dim(0)? / 2;
            let w = mlp.get((2 * n_ff, h), "gate_up_proj.weight")?;
            return Ok(Ffn::Dense(
                Linear::new(w.narrow(0, 0, n_ff)?, None),
                Linear::new(w.narrow(0, n_ff, n_ff)?, None),
                linear_no_bias(n_ff, h, mlp.pp("down_proj"))?,
            ));
        }
        let n_ff = mlp
            .get_unchecked_dtype("gate_proj.weight", DType::F32)?
            .dim(0)?;
        Ok(Ffn::Dense(
            linear_no_bias(h, n_ff, mlp.pp("gate_proj"))?,
            linear_no_bias(h, n_ff, mlp.pp("up_proj"))?,
            linear_no_bias(n_ff, h, mlp.pp("down_proj"))?,
        ))
    }
}

impl Decoder {
    /// config.json and the safetensors of `dir` (with or without a `model.` prefix),
    /// memory-mapped and read layer by layer during a forward. An MLX affine-quantized folder
    /// (config.json `quantization`) is dequantized to f32 by [`crate::mlx`] up front; a GPTQ /
    /// AWQ / compressed-tensors one module by module by [`crate::packed`].
    pub fn load(dir: &Path) -> Result<Decoder> {
        let cfg_path = dir.join("config.json");
        let raw = read_json(&cfg_path)?;
        let vb = if crate::mlx::is_mlx_quantized(&raw) {
            crate::mlx::var_builder(dir, &raw)?
        } else if let Some(s) = crate::packed::scheme(&raw, &cfg_path)? {
            crate::packed::var_builder(dir, s)?
        } else {
            var_builder(dir)?
        };
        Self::from_var_builder(dir, vb)
    }

    /// config.json of `dir` with the weights given as f32 tensors under their HF names (e.g.
    /// the values a GGUF stores, dequantized). Errors: a missing tensor or wrong shape, when a
    /// forward reads it.
    pub fn from_tensors(
        dir: &Path,
        tensors: std::collections::HashMap<String, Tensor>,
    ) -> Result<Decoder> {
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        Self::from_var_builder(dir, vb)
    }

    /// config.json of `dir` with the weights from `vb` (any candle backend, e.g. one that
    /// dequantizes a tensor when it is asked for), read layer by layer during a forward.
    ///
    /// Errors: config.json unreadable or of an unsupported architecture.
    pub fn from_var_builder(dir: &Path, root: VarBuilder<'static>) -> Result<Decoder> {
        let cfg = DecoderConfig::from_json(&dir.join("config.json"))?;
        let m = if root.contains_tensor("model.embed_tokens.weight") {
            root.pp("model")
        } else {
            root.clone()
        };
        Ok(Decoder { cfg, root, m })
    }

    /// Whether the layers' FFNs are routed experts (their routing is then in each output).
    pub fn is_moe(&self) -> bool {
        self.cfg.moe.is_some()
    }

    /// Runs one sequence (positions 0..n, causal attention).
    pub fn forward(&self, ids: &[u32]) -> Result<DecoderOutput> {
        let mut out = self.forward_many(&[ids])?;
        Ok(out.pop().expect("one output per sequence"))
    }

    /// Runs each sequence on its own (positions 0..n each, causal attention), layer by layer:
    /// every sequence passes through layer i before layer i + 1 is read, so at most one
    /// layer's weights (or the embedding / output matrix) are in memory as f32 at a time.
    /// Each sequence's arithmetic is that of a forward on its own.
    ///
    /// Errors: a missing tensor or a shape that disagrees with config.json.
    pub fn forward_many(&self, seqs: &[&[u32]]) -> Result<Vec<DecoderOutput>> {
        let mut outs = Vec::with_capacity(seqs.len());
        self.forward_each(seqs, |_, out| -> Result<()> {
            outs.push(out);
            Ok(())
        })?;
        Ok(outs)
    }

    /// As [`Decoder::forward_many`], but hands each sequence's output to `f` (with its index)
    /// as soon as its logits exist and drops it afterwards: only one sequence's logits
    /// (`n × n_vocab` f32) are in memory at a time. The arithmetic is the same.
    ///
    /// Errors: as [`Decoder::forward_many`], or the first error `f` returns.
    pub fn forward_each<E: From<RefError>>(
        &self,
        seqs: &[&[u32]],
        mut f: impl FnMut(usize, DecoderOutput) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let (xs, mut routings, n_vocab) = self.layers(seqs)?;
        let (norm, lm_head) = self.output_head(n_vocab)?;
        for (i, x) in xs.into_iter().enumerate() {
            let hidden = candle_nn::ops::rms_norm(&x, &norm, self.cfg.rms_norm_eps as f32)
                .map_err(RefError::from)?;
            let logits = hidden.matmul(&lm_head.t().map_err(RefError::from)?);
            let logits = logits.map_err(RefError::from)?;
            let routing = std::mem::take(&mut routings[i]);
            f(
                i,
                DecoderOutput {
                    hidden,
                    logits,
                    routing,
                },
            )?;
        }
        Ok(())
    }

    /// Logits of positions `first..n` of one sequence (`[n − first, n_vocab]`), after the
    /// forward of all `n` positions: a long context's tail without the `n × n_vocab` matrix of
    /// every position. The arithmetic of each row is that of [`Decoder::forward`].
    ///
    /// Errors: `first ≥ n`, or as [`Decoder::forward_many`].
    pub fn forward_tail(&self, ids: &[u32], first: usize) -> Result<Tensor> {
        if first >= ids.len() {
            return Err(RefError::Unsupported(format!(
                "logits from position {first} of a sequence of {}",
                ids.len()
            )));
        }
        let (mut xs, _, n_vocab) = self.layers(&[ids])?;
        let x = xs.pop().expect("one output per sequence");
        let x = x.narrow(0, first, ids.len() - first)?;
        let (norm, lm_head) = self.output_head(n_vocab)?;
        let hidden = candle_nn::ops::rms_norm(&x, &norm, self.cfg.rms_norm_eps as f32)?;
        Ok(hidden.matmul(&lm_head.t()?)?)
    }

    /// The final norm's weight (`hidden`) and the output matrix (`n_vocab × hidden`):
    /// `lm_head.weight`, or the embedding matrix when the embeddings are tied.
    fn output_head(&self, n_vocab: usize) -> Result<(Tensor, Tensor)> {
        let (cfg, h) = (&self.cfg, self.cfg.hidden_size);
        let norm = cfg.norm_weight(self.m.get(h, "norm.weight")?)?;
        let lm_head = if !cfg.tie_word_embeddings && self.root.contains_tensor("lm_head.weight") {
            self.root.get((n_vocab, h), "lm_head.weight")?
        } else {
            self.m.get((n_vocab, h), "embed_tokens.weight")?
        };
        Ok((norm, lm_head))
    }

    /// The embedding lookup and every layer, for each sequence: the last layer's output
    /// (`n × hidden`, before the final norm) and the vocabulary size.
    #[allow(clippy::type_complexity)]
    fn layers(&self, seqs: &[&[u32]]) -> Result<(Vec<Tensor>, Vec<Vec<Routing>>, usize)> {
        let cfg = &self.cfg;
        let h = cfg.hidden_size;
        let emb_w = self
            .m
            .get_unchecked_dtype("embed_tokens.weight", DType::F32)?;
        let n_vocab = emb_w.dim(0)?;
        if emb_w.dims() != [n_vocab, h] {
            return Err(candle_core::Error::UnexpectedShape {
                msg: "embed_tokens.weight".into(),
                expected: (n_vocab, h).into(),
                got: emb_w.shape().clone(),
            }
            .into());
        }
        let mut xs = {
            // Dropped after the lookup; the output matrix is read again at the end.
            let embed = Embedding::new(emb_w, h);
            seqs.iter()
                .map(|ids| {
                    let x = embed.forward(&Tensor::new(*ids, &Device::Cpu)?)?;
                    // gemma3 scales the embeddings by √hidden (as an f32 constant).
                    Ok(match cfg.gemma {
                        Some(_) => (x * (h as f64).sqrt())?,
                        None => x,
                    })
                })
                .collect::<Result<Vec<Tensor>>>()?
        };
        let tables = seqs
            .iter()
            .map(|ids| SeqTables::new(ids.len(), cfg))
            .collect::<Result<Vec<_>>>()?;
        let mut routings: Vec<Vec<Routing>> = vec![Vec::new(); seqs.len()];
        for i in 0..cfg.num_hidden_layers {
            let layer = Layer::load(self.m.pp(format!("layers.{i}")), i, cfg)?;
            for (k, (x, t)) in xs.iter_mut().zip(&tables).enumerate() {
                let (y, r) = layer.forward(x, t, cfg)?;
                *x = y;
                routings[k].extend(r);
            }
        }
        Ok((xs, routings, n_vocab))
    }
}

#[cfg(test)]
mod tests {
    use super::attention::ATTN_ROWS;
    use super::*;
    use candle_core::D;
    use std::path::PathBuf;
    use std::sync::Mutex;

    fn smollm2() -> PathBuf {
        let p =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/hf/SmolLM2-135M-Instruct");
        assert!(
            p.join("config.json").exists(),
            "run scripts/build-smollm2-fixture.sh"
        );
        p
    }

    /// The fixture's weights, logging every tensor name read, in order.
    struct Logged {
        inner: VarBuilder<'static>,
        names: Mutex<Vec<String>>,
    }

    impl candle_nn::var_builder::SimpleBackend for Logged {
        fn get(
            &self,
            s: candle_core::Shape,
            name: &str,
            _: candle_nn::Init,
            dtype: DType,
            _: &Device,
        ) -> candle_core::Result<Tensor> {
            self.names.lock().unwrap().push(name.to_string());
            self.inner.get(s, name)?.to_dtype(dtype)
        }
        fn get_unchecked(
            &self,
            name: &str,
            dtype: DType,
            _: &Device,
        ) -> candle_core::Result<Tensor> {
            self.names.lock().unwrap().push(name.to_string());
            self.inner.get_unchecked_dtype(name, dtype)
        }
        fn contains_tensor(&self, name: &str) -> bool {
            self.inner.contains_tensor(name)
        }
    }

    /// Blocked attention (n > ATTN_ROWS) against one full score matrix, causal and sliding.
    #[test]
    fn attention_in_blocks_equals_one_full_block() {
        let n = ATTN_ROWS + 476;
        let dev = Device::Cpu;
        let r = |seed: u64| {
            // A fixed LCG: values in [-2, 2), scores large enough to make softmax peaked.
            let mut x = seed;
            let v: Vec<f32> = (0..2 * n * 8)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
                })
                .collect();
            Tensor::from_vec(v, (2, n, 8), &dev).unwrap()
        };
        let (q, k, v) = (r(1), r(2), r(3));
        for window in [None, Some(100)] {
            let t = SeqTables::with(n, &[1.0; 4], window).unwrap();
            let blocked = attend(&q, &k, &v, 0.5, &t).unwrap();
            let scores = (q.matmul(&k.t().unwrap()).unwrap() * 0.5)
                .unwrap()
                .broadcast_add(&t.mask_rows(0, n).unwrap())
                .unwrap();
            let full = candle_nn::ops::softmax(&scores, D::Minus1)
                .unwrap()
                .matmul(&v)
                .unwrap();
            let d = (blocked - full)
                .unwrap()
                .abs()
                .unwrap()
                .flatten_all()
                .unwrap()
                .max(0)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(d < 1e-5, "window {window:?}: max |Δ| {d}");
        }
        // The last row of the sliding mask sees exactly 100 keys.
        let t = SeqTables::with(n, &[1.0; 4], Some(100)).unwrap();
        let m = t.mask_rows(n - 1, n).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(m[0].iter().filter(|x| **x == 0.0).count(), 100);
    }

    #[test]
    fn many_sequences_read_each_layer_once_in_order_with_unchanged_arithmetic() {
        let dir = smollm2();
        let seqs: [&[u32]; 3] = [&[1, 504, 3458, 30], &[1, 2], &[9, 8, 7, 6, 5, 4, 3]];
        let log = std::sync::Arc::new(Logged {
            inner: var_builder(&dir).unwrap(),
            names: Mutex::new(Vec::new()),
        });
        struct Shared(std::sync::Arc<Logged>);
        impl candle_nn::var_builder::SimpleBackend for Shared {
            fn get(
                &self,
                s: candle_core::Shape,
                n: &str,
                h: candle_nn::Init,
                d: DType,
                dev: &Device,
            ) -> candle_core::Result<Tensor> {
                self.0.get(s, n, h, d, dev)
            }
            fn get_unchecked(
                &self,
                n: &str,
                d: DType,
                dev: &Device,
            ) -> candle_core::Result<Tensor> {
                self.0.get_unchecked(n, d, dev)
            }
            fn contains_tensor(&self, n: &str) -> bool {
                self.0.contains_tensor(n)
            }
        }
        let vb = VarBuilder::from_backend(Box::new(Shared(log.clone())), DType::F32, Device::Cpu);
        let d = Decoder::from_var_builder(&dir, vb).unwrap();
        let many = d.forward_many(&seqs).unwrap();
        // Layer i's tensors are all read before layer i + 1's, each layer read once for all
        // three sequences: llama's 9 weight tensors, plus gate_proj read first for the FFN
        // width.
        let names = log.names.lock().unwrap().clone();
        let layer_of = |n: &str| -> Option<usize> {
            n.strip_prefix("model.layers.")?
                .split('.')
                .next()?
                .parse()
                .ok()
        };
        let layers: Vec<usize> = names.iter().filter_map(|n| layer_of(n)).collect();
        assert!(layers.windows(2).all(|w| w[0] <= w[1]), "{names:?}");
        let per_layer = layers.iter().filter(|l| **l == 0).count();
        assert_eq!(per_layer, 10, "{names:?}");
        assert_eq!(layers.len(), 10 * d.cfg.num_hidden_layers);
        // Each output equals the single-sequence forward, bit for bit.
        let one = Decoder::load(&dir).unwrap();
        for (ids, out) in seqs.iter().zip(&many) {
            let o = one.forward(ids).unwrap();
            assert_eq!(
                o.logits.to_vec2::<f32>().unwrap(),
                out.logits.to_vec2::<f32>().unwrap()
            );
            assert_eq!(
                o.hidden.to_vec2::<f32>().unwrap(),
                out.hidden.to_vec2::<f32>().unwrap()
            );
        }
    }
}
