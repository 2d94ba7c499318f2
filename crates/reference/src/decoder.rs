//! Decoder-only transformer forward (HF `LlamaForCausalLM`, `Qwen2*`, `Qwen3*`) in f32 on
//! candle ops, returning every position: final-norm hidden states and logits.
//!
//! Per-architecture differences: qwen2 has q/k/v biases; qwen3 has per-head RMS norms on q and
//! k (`q_norm`, `k_norm`) and an explicit `head_dim`. RoPE is HF's rotate-half form for all three
//! (llama.cpp's Q/K row permutation for llama is a storage detail of GGUF, not of HF weights).

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{embedding, linear_b, linear_no_bias, Embedding, Linear, Module, VarBuilder};

use crate::{read_json, var_builder, RefError, Result};

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
    pub tie_word_embeddings: bool,
    /// q/k/v projections have biases (qwen2).
    pub qkv_bias: bool,
    /// Per-head RMS norms on q and k (qwen3).
    pub qk_norm: bool,
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
            "qwen3" => (false, true),
            other => return Err(RefError::Unsupported(format!("model_type {other:?}"))),
        };
        let hidden = int("hidden_size")?;
        let heads = int("num_attention_heads")?;
        let hp = crate::hf_config::Hparams::from_config(&v)?;
        if hp.rope_type != "default" {
            return Err(RefError::Unsupported(format!(
                "{}: rope type {:?}: the reference computes default RoPE only",
                path.display(),
                hp.rope_type
            )));
        }
        Ok(DecoderConfig {
            hidden_size: hidden,
            num_hidden_layers: int("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: int("num_key_value_heads").unwrap_or(heads),
            head_dim: int("head_dim").unwrap_or(hidden / heads),
            rms_norm_eps: hp.rms_norm_eps,
            rope_theta: hp.rope_theta.0,
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
            qkv_bias,
            qk_norm,
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
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A loaded decoder.
pub struct Decoder {
    cfg: DecoderConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
}

/// Output of one forward pass.
pub struct DecoderOutput {
    /// Final-norm hidden states `[n_tokens, hidden]`.
    pub hidden: Tensor,
    /// Logits `[n_tokens, n_vocab]`.
    pub logits: Tensor,
}

impl Decoder {
    /// Loads config.json and the safetensors of `dir` (with or without a `model.` prefix).
    /// An MLX affine-quantized folder (config.json `quantization`) is dequantized to f32 by
    /// [`crate::mlx`].
    pub fn load(dir: &Path) -> Result<Decoder> {
        let cfg_path = dir.join("config.json");
        let cfg = DecoderConfig::from_json(&cfg_path)?;
        let raw = read_json(&cfg_path)?;
        let vb = if crate::mlx::is_mlx_quantized(&raw) {
            crate::mlx::var_builder(dir, &raw)?
        } else {
            var_builder(dir)?
        };
        Self::from_vb(cfg, vb)
    }

    /// config.json of `dir` with the weights given as f32 tensors under their HF names (e.g.
    /// the values a GGUF stores, dequantized). Errors: a missing tensor or wrong shape.
    pub fn from_tensors(
        dir: &Path,
        tensors: std::collections::HashMap<String, Tensor>,
    ) -> Result<Decoder> {
        let cfg = DecoderConfig::from_json(&dir.join("config.json"))?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        Self::from_vb(cfg, vb)
    }

    fn from_vb(cfg: DecoderConfig, root: VarBuilder) -> Result<Decoder> {
        let m = if root.contains_tensor("model.embed_tokens.weight") {
            root.pp("model")
        } else {
            root.clone()
        };
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let emb_w = m.get_unchecked_dtype("embed_tokens.weight", DType::F32)?;
        let n_vocab = emb_w.dim(0)?;
        let embed = embedding(n_vocab, h, m.pp("embed_tokens"))?;
        let n_ff = m
            .get_unchecked_dtype("layers.0.mlp.gate_proj.weight", DType::F32)?
            .dim(0)?;
        let lin = |vb: VarBuilder, i: usize, o: usize, bias: bool| -> Result<Linear> {
            Ok(linear_b(i, o, bias, vb)?)
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = m.pp(format!("layers.{i}"));
            let a = l.pp("self_attn");
            let mlp = l.pp("mlp");
            layers.push(Layer {
                attn_norm: l.get(h, "input_layernorm.weight")?,
                q: lin(a.pp("q_proj"), h, nh * hd, cfg.qkv_bias)?,
                k: lin(a.pp("k_proj"), h, nkv * hd, cfg.qkv_bias)?,
                v: lin(a.pp("v_proj"), h, nkv * hd, cfg.qkv_bias)?,
                o: linear_no_bias(nh * hd, h, a.pp("o_proj"))?,
                q_norm: if cfg.qk_norm {
                    Some(a.get(hd, "q_norm.weight")?)
                } else {
                    None
                },
                k_norm: if cfg.qk_norm {
                    Some(a.get(hd, "k_norm.weight")?)
                } else {
                    None
                },
                ffn_norm: l.get(h, "post_attention_layernorm.weight")?,
                gate: linear_no_bias(h, n_ff, mlp.pp("gate_proj"))?,
                up: linear_no_bias(h, n_ff, mlp.pp("up_proj"))?,
                down: linear_no_bias(n_ff, h, mlp.pp("down_proj"))?,
            });
        }
        let norm = m.get(h, "norm.weight")?;
        let lm_head = if !cfg.tie_word_embeddings && root.contains_tensor("lm_head.weight") {
            root.get((n_vocab, h), "lm_head.weight")?
        } else {
            emb_w
        };
        Ok(Decoder {
            cfg,
            embed,
            layers,
            norm,
            lm_head,
        })
    }

    /// Runs one sequence (positions 0..n, causal attention).
    pub fn forward(&self, ids: &[u32]) -> Result<DecoderOutput> {
        let dev = Device::Cpu;
        let n = ids.len();
        let cfg = &self.cfg;
        let (nh, nkv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let eps = cfg.rms_norm_eps as f32;
        // RoPE tables: angle[p, i] = p · θ^(−2i/hd), i < hd/2 (HF rotate-half layout).
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| (1.0 / cfg.rope_theta.powf(2.0 * i as f64 / hd as f64)) as f32)
            .collect();
        let inv = Tensor::new(inv.as_slice(), &dev)?.reshape((1, hd / 2))?;
        let pos = Tensor::arange(0u32, n as u32, &dev)?
            .to_dtype(DType::F32)?
            .reshape((n, 1))?;
        let angles = pos.broadcast_mul(&inv)?;
        let (cos, sin) = (angles.cos()?, angles.sin()?);
        let mask: Vec<f32> = (0..n)
            .flat_map(|i| (0..n).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
            .collect();
        let mask = Tensor::from_vec(mask, (n, n), &dev)?;
        let ids_t = Tensor::new(ids, &dev)?;
        let mut x = self.embed.forward(&ids_t)?;
        let scale = 1.0 / (hd as f64).sqrt();
        for l in &self.layers {
            let a = candle_nn::ops::rms_norm(&x, &l.attn_norm, eps)?;
            // [n, heads·hd] → [1, heads, n, hd]
            let heads = |t: Tensor, k: usize| -> Result<Tensor> {
                Ok(t.reshape((n, k, hd))?
                    .transpose(0, 1)?
                    .contiguous()?
                    .unsqueeze(0)?)
            };
            let mut q = heads(l.q.forward(&a)?, nh)?;
            let mut k = heads(l.k.forward(&a)?, nkv)?;
            let v = heads(l.v.forward(&a)?, nkv)?;
            if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                q = candle_nn::ops::rms_norm(&q, qn, eps)?;
                k = candle_nn::ops::rms_norm(&k, kn, eps)?;
            }
            let q = candle_nn::rotary_emb::rope(&q.contiguous()?, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k.contiguous()?, &cos, &sin)?;
            // Grouped-query attention: each kv head serves nh/nkv query heads.
            let rep = nh / nkv;
            let expand = |t: Tensor| -> Result<Tensor> {
                Ok(t.squeeze(0)?
                    .unsqueeze(1)?
                    .expand((nkv, rep, n, hd))?
                    .reshape((nh, n, hd))?)
            };
            let (q, k, v) = (q.squeeze(0)?, expand(k)?, expand(v)?);
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&mask)?;
            let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let ctx = probs.matmul(&v)?.transpose(0, 1)?.reshape((n, nh * hd))?;
            x = (x + l.o.forward(&ctx)?)?;
            let f = candle_nn::ops::rms_norm(&x, &l.ffn_norm, eps)?;
            let g = candle_nn::ops::silu(&l.gate.forward(&f)?)?;
            let ff = l.down.forward(&(g * l.up.forward(&f)?)?)?;
            x = (x + ff)?;
        }
        let hidden = candle_nn::ops::rms_norm(&x, &self.norm, eps)?;
        let logits = hidden.matmul(&self.lm_head.t()?)?;
        Ok(DecoderOutput { hidden, logits })
    }
}
