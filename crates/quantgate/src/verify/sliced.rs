//! llama.cpp's forward on the F32 expansion, a slice of layers at a time, so that verify's
//! scratch disk is one slice, not the whole expansion (4 bytes per weight: 32 GB at 8B).
//!
//! Slice k is a model of its own ([`expand::write_slice`]). The first takes the token rows of
//! the stored `token_embd.weight` as input embeddings (`llama_batch.embd`), the values
//! llama.cpp's `get_rows` would give its first layer; each slice's last layer output (the
//! graph node `l_out-IL`, read by the eval callback) is the next slice's input; the last
//! slice gives the logits. Each slice runs over every sequence and its file is removed before
//! the next is written. The same kernels see the same inputs, so the logits equal the whole
//! expansion's bit for bit (tested in `it::scale`).
//!
//! Only architectures whose decoder layers are all alike and whose graph takes an input
//! embedding as is: llama, qwen2, qwen3. gemma3 scales its input embedding in the graph,
//! phi3 and the MoE and BERT graphs were not checked: they keep the whole expansion.

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use gguf::{Gguf, Value};
use llama_runtime::{Context, ContextParams, Model};

use super::expand;

/// Architectures run in slices (see the module docs).
const SLICEABLE: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// llama.cpp's forward: one model, or a file's F32 expansion in slices.
#[derive(Clone, Copy)]
pub enum Runner<'a> {
    /// One loaded model.
    Model(&'a Model),
    /// Slices, written and run in turn.
    Sliced(&'a SlicedRun),
}

/// A [`Runner`] made ready for a set of sequences: the model that gives the logits and, for
/// slices, each sequence's input embeddings to it.
pub struct Ready<'a> {
    prepared: Option<Prepared>,
    model: Option<&'a Model>,
}

impl<'a> Runner<'a> {
    /// Runs what comes before the logits for `seqs` (nothing for one model).
    ///
    /// Errors: as [`SlicedRun::prepare`].
    pub fn ready(self, seqs: &[&[u32]], n_ctx: u32, threads: i32) -> Result<Ready<'a>> {
        Ok(match self {
            Runner::Model(m) => Ready {
                prepared: None,
                model: Some(m),
            },
            Runner::Sliced(r) => Ready {
                prepared: Some(r.prepare(seqs, n_ctx, threads)?),
                model: None,
            },
        })
    }
}

impl Ready<'_> {
    /// The model that gives the logits.
    pub fn model(&self) -> &Model {
        match (&self.prepared, self.model) {
            (Some(p), _) => &p.model,
            (None, Some(m)) => m,
            (None, None) => unreachable!("made with one of the two"),
        }
    }

    /// Logits of positions `first..n` of sequence `i` (`ids`, the same as given to
    /// [`Runner::ready`]), `n − first` rows of `n_vocab`.
    ///
    /// Errors: a failed decode.
    pub fn logits(
        &self,
        ctx: &mut Context,
        i: usize,
        ids: &[u32],
        first: usize,
    ) -> Result<Vec<Vec<f32>>> {
        Ok(match &self.prepared {
            Some(p) => ctx.logits_from_embd(&p.hidden[i], first)?,
            None => {
                let ids: Vec<i32> = ids.iter().map(|x| *x as i32).collect();
                ctx.logits_from(&ids, first)?
            }
        })
    }
}

/// The slices of a file's layers and where their files go.
pub struct SlicedRun {
    src: Gguf,
    arch: String,
    /// Consecutive layer ranges covering `0..block_count`.
    pub ranges: Vec<Range<usize>>,
    dir: PathBuf,
}

/// The last slice loaded, and every sequence's input to it (`n × n_embd` floats each).
pub struct Prepared {
    /// The last slice (its file already removed: the mapping keeps it until dropped).
    pub model: Model,
    /// Per sequence, the output of the last layer before this slice (or the token rows).
    pub hidden: Vec<Vec<f32>>,
}

impl SlicedRun {
    /// A run of `src` in slices whose files go in `dir`, each at most `budget` bytes of F32
    /// layers (at least one layer each; the last also holds the f32 output matrix). `None`
    /// when the architecture is not sliceable, the file has fewer than 2 layers, a key holds
    /// one value per layer, or a tensor is neither `blk.N.*` nor a model-level tensor this
    /// writer knows.
    pub fn plan(src: &Path, dir: &Path, budget: u64) -> Result<Option<SlicedRun>> {
        let src = Gguf::open(src)?;
        let Some(arch) = src
            .header
            .metadata
            .iter()
            .find(|(k, _)| k == gguf::keys::general::ARCHITECTURE)
            .and_then(|(_, v)| v.as_str())
            .map(str::to_owned)
        else {
            return Ok(None);
        };
        let Some(ranges) = layer_ranges(&src, &arch, budget) else {
            return Ok(None);
        };
        Ok(Some(SlicedRun {
            src,
            arch,
            ranges,
            dir: dir.to_path_buf(),
        }))
    }

    /// The largest slice file's size, bytes: the scratch disk the run needs.
    pub fn scratch_bytes(&self) -> Result<u64> {
        let mut most = 0;
        for (k, r) in self.ranges.iter().enumerate() {
            let last = k + 1 == self.ranges.len();
            let layers = file_layers(r, last);
            most = most.max(expand::slice_bytes(&self.src, &self.arch, layers, last)?);
        }
        Ok(most)
    }

    /// Runs every slice but the last over `seqs` (token ids, each at most `n_ctx` long) and
    /// loads the last.
    ///
    /// Errors: a slice that cannot be written or loaded, a decode that fails, a node not found.
    pub fn prepare(&self, seqs: &[&[u32]], n_ctx: u32, threads: i32) -> Result<Prepared> {
        let mut hidden = seqs
            .iter()
            .map(|s| expand::embedding_rows(&self.src, s))
            .collect::<Result<Vec<_>>>()?;
        let n = self.ranges.len();
        for (k, r) in self.ranges.iter().enumerate() {
            let path = self.dir.join(format!("slice-{k}-of-{n}.gguf"));
            crate::progress::report("F32 expansion: slice", k, n);
            expand::write_slice(
                &self.src,
                &self.arch,
                file_layers(r, k + 1 == n),
                k + 1 == n,
                &path,
            )?;
            let model = Model::load(&path, false);
            // Mapped (or refused): the file's blocks are freed when the mapping goes.
            std::fs::remove_file(&path).with_context(|| format!("{}", path.display()))?;
            let model = model?;
            if k + 1 == n {
                return Ok(Prepared { model, hidden });
            }
            let params = ContextParams::logits(n_ctx, 512, threads);
            let mut ctx = Context::with_layer_output(&model, params, r.len() - 1)?;
            for h in hidden.iter_mut() {
                *h = ctx
                    .layer_output_from_embd(h)
                    .with_context(|| format!("slice {k} (layers {r:?})"))?;
            }
        }
        unreachable!("a plan has at least one slice")
    }
}

/// The layers slice `r`'s file holds: a slice before the last holds the next slice's first
/// layer too, so that the layer it hands on is not its model's last (llama.cpp keeps only the
/// output rows in a model's last layer; the slice asks for one output, and the eval callback
/// stops the graph before that extra layer runs).
fn file_layers(r: &Range<usize>, last: bool) -> Range<usize> {
    if last {
        r.clone()
    } else {
        r.start..r.end + 1
    }
}

/// Consecutive ranges of at most `budget` bytes of F32 layers each (the last counting the
/// output matrix too), or `None` when the file is not sliceable (see [`SlicedRun::plan`]).
fn layer_ranges(src: &Gguf, arch: &str, budget: u64) -> Option<Vec<Range<usize>>> {
    if !SLICEABLE.contains(&arch) {
        return None;
    }
    let key = gguf::keys::arch_key(gguf::keys::llm::BLOCK_COUNT, arch);
    let n_layer = src
        .header
        .metadata
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| match v {
            Value::U32(n) => Some(*n as usize),
            _ => None,
        })?;
    // A per-layer array (e.g. head counts that vary by layer) would need slicing too.
    let per_layer = src.header.metadata.iter().any(|(_, v)| {
        matches!(v, Value::Array(t, a) if a.len() == n_layer && *t != gguf::ValueType::String)
    });
    if n_layer < 2 || per_layer {
        return None;
    }
    let mut layer = vec![0u64; n_layer];
    let mut output = 0;
    let tied = !src.header.tensors.iter().any(|t| t.name == "output.weight");
    for t in &src.header.tensors {
        let f32_bytes = t.n_elements() * 4;
        match (expand::layer_of(&t.name), t.name.as_str()) {
            (Some(l), _) if l < n_layer => layer[l] += f32_bytes,
            (None, "output.weight") => output = f32_bytes,
            (None, "token_embd.weight") if tied => output = f32_bytes,
            (None, "token_embd.weight" | "output_norm.weight" | "rope_freqs.weight") => {}
            _ => return None,
        }
    }
    Some(pack(&layer, output, budget))
}

/// Consecutive ranges over layers of `layer[l]` bytes each, greedy from the last layer back so
/// the last slice (which also holds `output` bytes) is full: each at most `budget` bytes, or
/// one layer when a layer alone is over it.
fn pack(layer: &[u64], output: u64, budget: u64) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let (mut end, mut size) = (layer.len(), output);
    for l in (0..layer.len()).rev() {
        if size + layer[l] > budget && end > l + 1 {
            ranges.push(l + 1..end);
            (end, size) = (l + 1, 0);
        }
        size += layer[l];
    }
    ranges.push(0..end);
    ranges.reverse();
    ranges
}

#[cfg(test)]
mod tests {
    use super::pack;

    #[test]
    fn ranges_cover_every_layer_once_within_the_budget() {
        let layer = [10u64, 10, 10, 10, 10];
        assert_eq!(pack(&layer, 0, 20), vec![0..1, 1..3, 3..5]);
        assert_eq!(pack(&layer, 5, 25), vec![0..1, 1..3, 3..5]);
        assert_eq!(pack(&layer, 5, 100), vec![0..5]);
        // A layer over the budget is a slice of its own, as is an output matrix over it.
        assert_eq!(pack(&layer, 0, 5), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
        assert_eq!(pack(&layer, 50, 40), vec![0..4, 4..5]);
    }
}
