//! HF safetensors, memory-mapped, read one tensor at a time: each read copies the tensor out
//! (candle's own safetensors conversion), then tells the kernel the mapped pages are no longer
//! needed (`madvise(MADV_DONTNEED)`). The file stays in the page cache, but the process's
//! resident set holds at most the tensor being read, not every page a forward has touched, so a
//! forward that streams layers also streams its resident memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype, TensorView};

use crate::{RefError, Result};

/// Where one tensor's bytes are: its shard, dtype, shape and byte range in the shard's map.
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// The tensors of one or more safetensors shards by name.
pub struct MmapWeights {
    maps: Vec<memmap2::Mmap>,
    paths: Vec<PathBuf>,
    index: HashMap<String, Entry>,
}

impl MmapWeights {
    /// Maps every file and reads its header (safetensors format: u64 LE header length, JSON
    /// header with `dtype`, `shape`, `data_offsets` relative to the end of the header).
    ///
    /// Errors: a file that cannot be opened or mapped, or a header the safetensors crate
    /// refuses, naming the file. A name in two shards keeps the first.
    pub fn open(files: &[PathBuf]) -> Result<MmapWeights> {
        let mut w = MmapWeights {
            maps: Vec::new(),
            paths: files.to_vec(),
            index: HashMap::new(),
        };
        for (i, path) in files.iter().enumerate() {
            let err = |detail: String| RefError::File {
                path: path.clone(),
                detail,
            };
            let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
            // SAFETY: a read-only map of a source file nobody writes during verification; the
            // same hazard candle's own mmap loader accepts.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| err(e.to_string()))?;
            let (n, meta) = safetensors::SafeTensors::read_metadata(&map)
                .map_err(|e| err(format!("safetensors header: {e}")))?;
            for (name, info) in meta.tensors() {
                let (start, end) = (8 + n + info.data_offsets.0, 8 + n + info.data_offsets.1);
                w.index.entry(name).or_insert(Entry {
                    file: i,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start,
                    end,
                });
            }
            w.maps.push(map);
        }
        Ok(w)
    }

    fn entry(&self, name: &str) -> candle_core::Result<&Entry> {
        self.index
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            })
    }

    /// The stored dtype, shape and bytes of tensor `name` (not released: for the small
    /// integer tensors of packed checkpoints).
    pub fn raw(&self, name: &str) -> Option<(Dtype, &[usize], &[u8])> {
        let e = self.index.get(name)?;
        Some((e.dtype, &e.shape, &self.maps[e.file][e.start..e.end]))
    }

    /// Whether a tensor of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The tensor `name` in its stored dtype (candle's conversion, the same values
    /// `VarBuilder::from_mmaped_safetensors` gives), its mapped pages released afterwards.
    ///
    /// Errors: an unknown name, or bytes that do not match the header's dtype and shape.
    pub fn load(&self, name: &str) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        let map = &self.maps[e.file];
        let view =
            TensorView::new(e.dtype, e.shape.clone(), &map[e.start..e.end]).map_err(|err| {
                candle_core::Error::Msg(format!(
                    "{}: tensor {name}: {err}",
                    self.paths[e.file].display()
                ))
            })?;
        let t = view.load(&Device::Cpu)?;
        // SAFETY: a read-only file mapping; dropped pages are read again from the file if
        // touched, so no data is lost. `t` owns a copy of the values.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, e.start, e.end - e.start)
        };
        Ok(t)
    }
}

impl MmapWeights {
    /// The tensor `name` of a 16/32-bit float dtype as f32, decoded straight from the mapped
    /// bytes (one allocation, not a stored-dtype copy and then an f32 one: the output matrix of
    /// a 150k vocabulary is 0.5 GB in f32). BF16 and F16 widen to f32 exactly, so the values
    /// are those of [`MmapWeights::load`] then `to_dtype(F32)`. `None` for other dtypes.
    ///
    /// Errors: an unknown name, or a byte count that disagrees with the shape.
    pub fn load_f32(&self, name: &str) -> candle_core::Result<Option<Tensor>> {
        match self.decode_f32(name)? {
            Some((v, shape)) => Tensor::from_vec(v, shape, &Device::Cpu).map(Some),
            None => Ok(None),
        }
    }

    /// As [`MmapWeights::load_f32`], the values (row-major) and shape without a tensor around
    /// them.
    pub fn decode_f32(&self, name: &str) -> candle_core::Result<Option<(Vec<f32>, Vec<usize>)>> {
        let n: usize = self.entry(name)?.shape.iter().product();
        Ok(self
            .decode_f32_range(name, 0..n)?
            .map(|v| (v, self.index[name].shape.clone())))
    }

    /// Elements `range` (row-major indices) of the tensor `name` of a 16/32-bit float dtype as
    /// f32, decoded as [`MmapWeights::decode_f32`] does: a block of rows of a matrix without
    /// the rest of it. `None` for other dtypes.
    ///
    /// Errors: an unknown name, a byte count that disagrees with the shape, or a range past the
    /// tensor's end.
    pub fn decode_f32_range(
        &self,
        name: &str,
        range: std::ops::Range<usize>,
    ) -> candle_core::Result<Option<Vec<f32>>> {
        let e = self.entry(name)?;
        let width = match e.dtype {
            Dtype::BF16 | Dtype::F16 => 2,
            Dtype::F32 => 4,
            _ => return Ok(None),
        };
        let map = &self.maps[e.file];
        let n: usize = e.shape.iter().product();
        if e.end - e.start != n * width || range.start > range.end || range.end > n {
            return Err(candle_core::Error::Msg(format!(
                "{}: tensor {name}: {} bytes for shape {:?} of {:?}, elements {range:?} asked",
                self.paths[e.file].display(),
                e.end - e.start,
                e.shape,
                e.dtype
            )));
        }
        let (start, end) = (e.start + range.start * width, e.start + range.end * width);
        // Decoded 16 MiB at a time, each piece's pages released as soon as it is read: a
        // 0.27 GB BF16 matrix never has all its pages resident beside its f32 copy.
        const PIECE: usize = 16 << 20;
        let mut v: Vec<f32> = Vec::with_capacity(range.len());
        for (k, piece) in map[start..end].chunks(PIECE).enumerate() {
            match e.dtype {
                Dtype::BF16 => v.extend(
                    piece
                        .chunks_exact(2)
                        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
                ),
                Dtype::F16 => v.extend(
                    piece
                        .chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
                ),
                _ => v.extend(
                    piece
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
            }
            // SAFETY: as in `load`; `v` owns the values read so far.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start + k * PIECE,
                    piece.len(),
                )
            };
        }
        Ok(Some(v))
    }
}

impl candle_nn::var_builder::SimpleBackend for MmapWeights {
    fn get(
        &self,
        s: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self.get_unchecked(name, dtype, dev)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            });
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        if dtype == DType::F32 {
            if let Some(t) = self.load_f32(name)? {
                return t.to_device(dev);
            }
        }
        self.load(name)?.to_device(dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.contains(name)
    }
}

/// A `VarBuilder` over `files` whose tensors are read with [`MmapWeights::load`], converted to
/// `dtype` on the CPU.
pub fn var_builder(files: &[PathBuf], dtype: DType) -> Result<candle_nn::VarBuilder<'static>> {
    Ok(candle_nn::VarBuilder::from_backend(
        Box::new(MmapWeights::open(files)?),
        dtype,
        Device::Cpu,
    ))
}

/// Resident pages of this process's mapping of `path`, in bytes (from /proc/self/smaps;
/// 0 when it is not mapped or the file is unreadable): how tests see what a read left behind.
pub fn resident_bytes_of(path: &Path) -> u64 {
    let Ok(path) = path.canonicalize() else {
        return 0;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut total = 0;
    let mut inside = false;
    for line in smaps.lines() {
        if line.contains('-') && line.split_whitespace().count() >= 5 && !line.ends_with(" kB") {
            inside = line.ends_with(path.to_str().unwrap_or("\0"));
        } else if inside {
            if let Some(kb) = line.strip_prefix("Rss:") {
                total += kb
                    .trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0)
                    * 1024;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm2_weights() -> PathBuf {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/hf/SmolLM2-135M-Instruct/model.safetensors");
        assert!(p.exists(), "run scripts/build-smollm2-fixture.sh");
        p
    }

    #[test]
    fn values_equal_candles_loader_and_pages_are_released() {
        let path = smollm2_weights();
        let w = MmapWeights::open(std::slice::from_ref(&path)).unwrap();
        // SAFETY: read-only map of the fixture.
        let candle = unsafe { candle_core::safetensors::MmapedSafetensors::new(&path) }.unwrap();
        // The control: candle's loader leaves every page it read resident (about 270 MB).
        for name in w.index.keys() {
            candle.load(name, &Device::Cpu).unwrap();
        }
        let before = resident_bytes_of(&path);
        assert!(
            before > 200 << 20,
            "{before} bytes resident after candle's reads"
        );
        let name = "model.layers.3.mlp.down_proj.weight";
        let ours = w.load(name).unwrap().to_dtype(DType::F32).unwrap();
        let theirs = candle
            .load(name, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert_eq!(ours.dims(), [576, 1536]);
        let (a, b) = (
            ours.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            theirs.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        let direct = w.load_f32(name).unwrap().expect("a BF16 tensor");
        let c = direct.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(c.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        assert_eq!(direct.dims(), [576, 1536]);
        drop(candle);
        // Ours, after reading every tensor: the header's pages, and what the kernel's
        // fault-around (up to 64 KiB beside a faulting page) mapped after a neighbour's release.
        for name in w.index.keys() {
            w.load(name).unwrap();
        }
        let resident = resident_bytes_of(&path);
        let bound = (w.index.len() as u64 + 1) * (64 << 10);
        assert!(
            resident <= bound,
            "{resident} bytes of the file still resident, bound {bound}"
        );
        assert!(matches!(
            w.load("no.such.tensor"),
            Err(candle_core::Error::CannotFindTensor { .. })
        ));
    }
}
