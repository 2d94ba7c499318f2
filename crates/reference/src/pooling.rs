//! Sentence-transformers pooling of per-token hidden states (`[n_tokens, hidden]`), as
//! `1_Pooling/config.json` declares it, and the matching llama.cpp `pooling_type` ids.

use std::path::Path;

use candle_core::Tensor;

use crate::{read_json, RefError, Result};

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Average over tokens (`pooling_mode_mean_tokens`); llama.cpp id 1.
    Mean,
    /// The first token (`pooling_mode_cls_token`); llama.cpp id 2.
    Cls,
    /// The last token (`pooling_mode_lasttoken`); llama.cpp id 3.
    Last,
}

impl Pooling {
    /// llama.cpp's `llama_pooling_type` value (and `{arch}.pooling_type`).
    pub fn llama_id(self) -> u32 {
        match self {
            Pooling::Mean => 1,
            Pooling::Cls => 2,
            Pooling::Last => 3,
        }
    }

    /// The pooling for a llama.cpp id.
    pub fn from_llama_id(id: u32) -> Option<Pooling> {
        Some(match id {
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            _ => return None,
        })
    }

    /// Reads the pooling of a sentence-transformers folder: the Pooling module named in
    /// `modules.json` (usually `1_Pooling/config.json`). `None` when the folder has none.
    ///
    /// Errors: unreadable files, or a config with no mode (or several) set.
    pub fn from_sentence_transformers(dir: &Path) -> Result<Option<Pooling>> {
        let modules = dir.join("modules.json");
        let pool_dir = if crate::present(&modules)? {
            let m = read_json(&modules)?;
            let path = m.as_array().into_iter().flatten().find_map(|e| {
                let ty = e["type"].as_str().unwrap_or("");
                ty.ends_with("Pooling")
                    .then(|| e["path"].as_str().unwrap_or("").to_string())
            });
            match path {
                Some(p) => dir.join(p),
                None => return Ok(None),
            }
        } else {
            dir.join("1_Pooling")
        };
        let cfg_path = pool_dir.join("config.json");
        if !crate::present(&cfg_path)? {
            return Ok(None);
        }
        let cfg = read_json(&cfg_path)?;
        let on = |k: &str| cfg[k].as_bool().unwrap_or(false);
        let modes: Vec<Pooling> = [
            ("pooling_mode_mean_tokens", Pooling::Mean),
            ("pooling_mode_cls_token", Pooling::Cls),
            ("pooling_mode_lasttoken", Pooling::Last),
        ]
        .into_iter()
        .filter(|(k, _)| on(k))
        .map(|(_, p)| p)
        .collect();
        match modes.as_slice() {
            [p] => Ok(Some(*p)),
            _ => Err(RefError::File {
                path: cfg_path,
                detail: format!(
                    "expected exactly one of mean/cls/lasttoken pooling, found {modes:?}"
                ),
            }),
        }
    }

    /// Pools `hidden` (`[n_tokens, dim]`) into a `dim` vector.
    pub fn apply(self, hidden: &Tensor) -> Result<Vec<f32>> {
        let n = hidden.dim(0)?;
        let v = match self {
            Pooling::Mean => hidden.mean(0)?,
            Pooling::Cls => hidden.get(0)?,
            Pooling::Last => hidden.get(n - 1)?,
        };
        Ok(v.to_vec1::<f32>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_cls_and_last_pool_the_right_rows() {
        let h = Tensor::from_vec(
            vec![1f32, 2., 3., 4., 5., 9.],
            (3, 2),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        assert_eq!(Pooling::Mean.apply(&h).unwrap(), vec![3.0, 5.0]);
        assert_eq!(Pooling::Cls.apply(&h).unwrap(), vec![1.0, 2.0]);
        assert_eq!(Pooling::Last.apply(&h).unwrap(), vec![5.0, 9.0]);
        for p in [Pooling::Mean, Pooling::Cls, Pooling::Last] {
            assert_eq!(Pooling::from_llama_id(p.llama_id()), Some(p));
        }
        assert_eq!(Pooling::from_llama_id(4), None);
    }

    #[test]
    fn reads_sentence_transformers_pooling_configs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/hf");
        assert_eq!(
            Pooling::from_sentence_transformers(&dir.join("bge-small-en-v1.5")).unwrap(),
            Some(Pooling::Cls)
        );
        assert_eq!(
            Pooling::from_sentence_transformers(&dir.join("Qwen3-Embedding-0.6B")).unwrap(),
            Some(Pooling::Last)
        );
        assert_eq!(
            Pooling::from_sentence_transformers(&dir.join("Qwen3-0.6B")).unwrap(),
            None
        );
    }
}
