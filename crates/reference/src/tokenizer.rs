//! HF `tokenizer.json` through the `tokenizers` crate, with padding and truncation turned off
//! so ids are exactly what the tokenizer produces for one text.

use std::path::Path;

use crate::{RefError, Result};

/// A loaded HF tokenizer.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
}

impl HfTokenizer {
    /// Loads `tokenizer.json`. Errors name the file.
    pub fn from_file(path: &Path) -> Result<HfTokenizer> {
        let mut inner = tokenizers::Tokenizer::from_file(path).map_err(|e| RefError::File {
            path: path.into(),
            detail: e.to_string(),
        })?;
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| RefError::Tokenizer(e.to_string()))?;
        Ok(HfTokenizer { inner })
    }

    /// Wraps an already built tokenizer (padding and truncation are turned off).
    pub fn from_tokenizer(mut inner: tokenizers::Tokenizer) -> Result<HfTokenizer> {
        inner.with_padding(None);
        inner
            .with_truncation(None)
            .map_err(|e| RefError::Tokenizer(e.to_string()))?;
        Ok(HfTokenizer { inner })
    }

    /// Token ids of `text`; `add_special_tokens` runs the post-processor (BOS/CLS/EOS …).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| RefError::Tokenizer(e.to_string()))
    }

    /// The underlying tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}
