//! BERT encoder forward (HF `BertModel`) in f32 on candle ops: every position's final hidden
//! state, for any sentence-transformers pooling.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, Module, VarBuilder};

use crate::{read_json, var_builder, RefError, Result};

/// The config.json fields the forward needs.
#[derive(Clone, Debug)]
pub struct BertConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: String,
}

impl BertConfig {
    /// Reads `config.json` of an HF BERT folder.
    pub fn from_json(path: &Path) -> Result<BertConfig> {
        let v = read_json(path)?;
        let int = |k: &str| crate::config_usize(&v, path, k);
        Ok(BertConfig {
            hidden_size: int("hidden_size")?,
            num_hidden_layers: int("num_hidden_layers")?,
            num_attention_heads: int("num_attention_heads")?,
            layer_norm_eps: crate::hf_config::Hparams::from_config(&v)?.layer_norm_eps,
            hidden_act: v["hidden_act"].as_str().unwrap_or("gelu").to_string(),
        })
    }
}

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    up: Linear,
    down: Linear,
    out_norm: LayerNorm,
}

/// A loaded BERT encoder.
pub struct Bert {
    cfg: BertConfig,
    word: Embedding,
    pos: Embedding,
    token_type: Embedding,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// Loads config.json and the safetensors of `dir` (names with or without a `bert.` prefix).
    pub fn load(dir: &Path) -> Result<Bert> {
        let cfg = BertConfig::from_json(&dir.join("config.json"))?;
        let vb = var_builder(dir)?;
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        Self::from_vb(cfg, vb)
    }

    /// config.json of `dir` with the weights given as f32 tensors under their HF names (e.g.
    /// the values a GGUF stores, dequantized). Errors: a missing tensor or wrong shape.
    pub fn from_tensors(
        dir: &Path,
        tensors: std::collections::HashMap<String, Tensor>,
    ) -> Result<Bert> {
        let cfg = BertConfig::from_json(&dir.join("config.json"))?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        Self::from_vb(cfg, vb)
    }

    fn from_vb(cfg: BertConfig, vb: VarBuilder) -> Result<Bert> {
        let h = cfg.hidden_size;
        let e = vb.pp("embeddings");
        let dims = |name: &str| -> Result<(usize, usize)> {
            let t = e.pp(name).get_unchecked_dtype("weight", DType::F32)?;
            Ok(t.dims2()?)
        };
        let (n_vocab, _) = dims("word_embeddings")?;
        let (n_pos, _) = dims("position_embeddings")?;
        let (n_types, _) = dims("token_type_embeddings")?;
        let word = embedding(n_vocab, h, e.pp("word_embeddings"))?;
        let pos = embedding(n_pos, h, e.pp("position_embeddings"))?;
        let token_type = embedding(n_types, h, e.pp("token_type_embeddings"))?;
        let emb_norm = layer_norm(h, cfg.layer_norm_eps, e.pp("LayerNorm"))?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let a = l.pp("attention");
            let inter = l.pp("intermediate.dense");
            let n_ff = inter.get_unchecked_dtype("weight", DType::F32)?.dim(0)?;
            layers.push(Layer {
                q: linear(h, h, a.pp("self.query"))?,
                k: linear(h, h, a.pp("self.key"))?,
                v: linear(h, h, a.pp("self.value"))?,
                attn_out: linear(h, h, a.pp("output.dense"))?,
                attn_norm: layer_norm(h, cfg.layer_norm_eps, a.pp("output.LayerNorm"))?,
                up: linear(h, n_ff, inter)?,
                down: linear(n_ff, h, l.pp("output.dense"))?,
                out_norm: layer_norm(h, cfg.layer_norm_eps, l.pp("output.LayerNorm"))?,
            });
        }
        Ok(Bert {
            cfg,
            word,
            pos,
            token_type,
            emb_norm,
            layers,
        })
    }

    /// Final hidden states `[n_tokens, hidden]` of one sequence (token type 0 everywhere, no
    /// padding, so no attention mask).
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor> {
        let dev = Device::Cpu;
        let n = ids.len();
        let ids_t = Tensor::new(ids, &dev)?;
        let pos = Tensor::arange(0u32, n as u32, &dev)?;
        let types = Tensor::zeros(n, DType::U32, &dev)?;
        let x = (self.word.forward(&ids_t)? + self.pos.forward(&pos)?)?;
        let x = (x + self.token_type.forward(&types)?)?;
        let mut x = self.emb_norm.forward(&x)?;
        let heads = self.cfg.num_attention_heads;
        let d = self.cfg.hidden_size / heads;
        let scale = 1.0 / (d as f64).sqrt();
        for l in &self.layers {
            let split = |t: Tensor| -> Result<Tensor> {
                Ok(t.reshape((n, heads, d))?.transpose(0, 1)?.contiguous()?)
            };
            let q = split(l.q.forward(&x)?)?;
            let k = split(l.k.forward(&x)?)?;
            let v = split(l.v.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?;
            let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let ctx = probs.matmul(&v)?.transpose(0, 1)?.reshape((n, heads * d))?;
            let a = l.attn_out.forward(&ctx)?;
            x = l.attn_norm.forward(&(a + &x)?)?;
            let up = l.up.forward(&x)?;
            let act = match self.cfg.hidden_act.as_str() {
                "gelu" => up.gelu_erf()?,
                "gelu_new" | "gelu_pytorch_tanh" => up.gelu()?,
                "relu" => up.relu()?,
                other => {
                    return Err(RefError::Unsupported(format!("hidden_act {other:?}")));
                }
            };
            let down = l.down.forward(&act)?;
            x = l.out_norm.forward(&(down + &x)?)?;
        }
        Ok(x)
    }
}
