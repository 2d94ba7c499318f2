//! The source's safetensors as the verifier reads them: the reference's reader
//! ([`reference::weights::MmapWeights`], candle's conversion), not the converter's, one map per
//! shard opened on first use, each tensor's pages released after it is read so that Gate 1's
//! resident memory stays near one tensor whatever the model's size.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::source::hf::HfDir;

/// The shards of one HF folder, mapped lazily.
pub struct SourceMaps<'a> {
    hf: &'a HfDir,
    maps: BTreeMap<PathBuf, reference::weights::MmapWeights>,
}

impl<'a> SourceMaps<'a> {
    /// Nothing is mapped until a tensor is read.
    pub fn new(hf: &'a HfDir) -> SourceMaps<'a> {
        SourceMaps {
            hf,
            maps: BTreeMap::new(),
        }
    }

    /// The folder whose tensors these are.
    pub fn hf(&self) -> &'a HfDir {
        self.hf
    }

    /// The map of tensor `ti`'s shard, opened on first use, and the tensor's name.
    fn shard(&mut self, ti: usize) -> Result<(&reference::weights::MmapWeights, &'a str)> {
        let t = &self.hf.tensors[ti];
        let path = self.hf.file_of(t).to_path_buf();
        if !self.maps.contains_key(&path) {
            let w = reference::weights::MmapWeights::open(std::slice::from_ref(&path))
                .with_context(|| path.display().to_string())?;
            self.maps.insert(path.clone(), w);
        }
        Ok((&self.maps[&path], t.name.as_str()))
    }

    /// Tensor `ti` of the folder's table, in its stored dtype.
    ///
    /// Errors: the shard cannot be mapped or its header is refused (naming the file), or the
    /// tensor's bytes do not match its header.
    pub fn load(&mut self, ti: usize) -> Result<candle_core::Tensor> {
        let (w, name) = self.shard(ti)?;
        Ok(w.load(name)?)
    }

    /// Tensor `ti` as f32, flattened (row-major); float dtypes are widened straight from the
    /// mapped bytes ([`reference::weights::MmapWeights::load_f32`]).
    pub fn load_f32(&mut self, ti: usize) -> Result<Vec<f32>> {
        let (w, name) = self.shard(ti)?;
        Ok(match w.decode_f32(name)? {
            Some((v, _)) => v,
            None => w
                .load(name)?
                .to_dtype(candle_core::DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?,
        })
    }

    /// Elements `range` (row-major) of tensor `ti` as f32, for a 16/32-bit float source (else
    /// `None`): a block of rows read without the rest of the tensor.
    ///
    /// Errors: as [`SourceMaps::load_f32`], or a range past the tensor's end.
    pub fn load_f32_range(
        &mut self,
        ti: usize,
        range: std::ops::Range<usize>,
    ) -> Result<Option<Vec<f32>>> {
        let (w, name) = self.shard(ti)?;
        Ok(w.decode_f32_range(name, range)?)
    }
}
