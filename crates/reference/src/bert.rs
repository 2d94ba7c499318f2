//! BERT encoder forward (HF `BertModel`, and `XLMRobertaModel`, which differs only in how it
//! numbers positions) in f32 on candle ops: every position's final hidden state, for any
//! sentence-transformers pooling.

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
    /// XLM-RoBERTa (`model_type` `xlm-roberta`): `pad_token_id`, from which transformers'
    /// `create_position_ids_from_input_ids` numbers positions (a non-pad token's position is
    /// `pad + its count of non-pad tokens so far`, a pad token's is `pad`). `None` for BERT,
    /// whose positions are 0, 1, ….
    pub position_padding_idx: Option<u32>,
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
            position_padding_idx: match v["model_type"].as_str() {
                Some("xlm-roberta") => Some(
                    v["pad_token_id"]
                        .as_u64()
                        .and_then(|p| u32::try_from(p).ok())
                        .ok_or_else(|| {
                            RefError::Unsupported(format!(
                                "{}: field pad_token_id: an xlm-roberta model needs it to number positions",
                                path.display()
                            ))
                        })?,
                ),
                _ => None,
            },
        })
    }
}

/// `vb` under the prefix its checkpoint uses for the encoder (`bert.`, `roberta.`), if any.
fn unprefixed(vb: VarBuilder) -> VarBuilder {
    for p in ["bert", "roberta"] {
        if vb.contains_tensor(&format!("{p}.embeddings.word_embeddings.weight")) {
            return vb.pp(p);
        }
    }
    vb
}

/// Position ids of `ids`: 0, 1, … for BERT; transformers' XLM-R numbering with `padding_idx`
/// (see [`BertConfig::position_padding_idx`]).
pub fn positions(ids: &[u32], padding_idx: Option<u32>) -> Vec<u32> {
    let Some(pad) = padding_idx else {
        return (0..ids.len() as u32).collect();
    };
    let mut seen = 0;
    ids.iter()
        .map(|&t| {
            if t == pad {
                pad
            } else {
                seen += 1;
                pad + seen
            }
        })
        .collect()
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
    /// Loads config.json and the safetensors of `dir` (names with or without a `bert.` or
    /// `roberta.` prefix).
    pub fn load(dir: &Path) -> Result<Bert> {
        let cfg = BertConfig::from_json(&dir.join("config.json"))?;
        Self::from_vb(cfg, unprefixed(var_builder(dir)?))
    }

    /// config.json of `dir` with the weights given as f32 tensors under their HF names (e.g.
    /// the values a GGUF stores, dequantized). Errors: a missing tensor or wrong shape.
    pub fn from_tensors(
        dir: &Path,
        tensors: std::collections::HashMap<String, Tensor>,
    ) -> Result<Bert> {
        let cfg = BertConfig::from_json(&dir.join("config.json"))?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        Self::from_vb(cfg, unprefixed(vb))
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
        let pos = Tensor::new(
            positions(ids, self.cfg.position_padding_idx).as_slice(),
            &dev,
        )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xlmr_positions_start_after_the_pad_id_and_skip_pads() {
        assert_eq!(positions(&[0, 35378, 8999, 2], None), [0, 1, 2, 3]);
        // transformers: cumsum(ids != pad) * (ids != pad) + pad.
        assert_eq!(positions(&[0, 35378, 8999, 2], Some(1)), [2, 3, 4, 5]);
        assert_eq!(positions(&[0, 1, 8999, 2], Some(1)), [2, 1, 3, 4]);
    }
}
