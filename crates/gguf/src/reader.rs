//! GGUF reader: parses and validates the whole header up front, then hands out borrowed tensor
//! data from a memory map.
//!
//! Layout and rules per `ggml/src/gguf.cpp` (`gguf_init_from_file_impl`) and
//! `docs/llamacpp-spec.md` §5. Every count and length is checked against the bytes
//! left in the file before anything is allocated, so a hostile file cannot make us allocate
//! more than a small multiple of its own size.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{short, Error, Result};
use crate::types::GgmlType;
use crate::value::{Value, ValueType};

/// `GGUF` read as a little-endian u32.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent (gguf.h `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest tensor name: `GGML_MAX_NAME` (64) minus the NUL.
pub const MAX_TENSOR_NAME_LEN: usize = 63;
/// `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// Deepest array nesting we accept. llama.cpp's C reader accepts none; gguf-py writes them.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Cap on elements in one metadata array (the largest real vocabularies have ~262k tokens and
/// merges lists ~1M); guards the per-element allocation, as candle caps its GGUF arrays.
pub const MAX_ARRAY_LEN: u64 = 1 << 26;
/// Cap on metadata pairs (real files have under 100; llama.cpp has no cap, but each pair costs
/// memory, so a hostile count must not).
pub const MAX_KV: u64 = 1 << 16;
/// Cap on tensors (the largest released models have tens of thousands).
pub const MAX_TENSORS: u64 = 1 << 18;
/// Cap on metadata array elements summed over the whole file (about 6× the token, score, type
/// and merge arrays of the largest vocabularies): each element is a ~32-byte value in memory,
/// so this bounds memory at a few hundred MB whatever the file holds.
pub const MAX_TOTAL_ARRAY_ELEMENTS: u64 = 1 << 23;
/// The metadata key holding the alignment.
pub const KEY_ALIGNMENT: &str = crate::keys::general::ALIGNMENT;

/// One tensor info, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Stored ggml type.
    pub ggml_type: GgmlType,
    /// `ne[0..n_dims]` exactly as stored (`ne[0]` is the contiguous row length); n_dims ≤ 4.
    pub dims: Vec<u64>,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    /// Data size in bytes, unpadded: `ne[0]/blck · type_size · ne[1] · ne[2] · ne[3]`.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// `ne` padded with 1s to four dimensions.
    pub fn ne(&self) -> [u64; 4] {
        let mut ne = [1u64; 4];
        ne[..self.dims.len()].copy_from_slice(&self.dims);
        ne
    }

    /// Number of elements (product of `ne`).
    pub fn n_elements(&self) -> u64 {
        self.ne().iter().product()
    }

    /// Number of rows: `ne[1] · ne[2] · ne[3]`.
    pub fn n_rows(&self) -> u64 {
        let ne = self.ne();
        ne[1] * ne[2] * ne[3]
    }
}

/// The parsed header: version, ordered metadata, tensor infos and data-section placement.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Metadata key/value pairs in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment in bytes (power of two).
    pub alignment: u64,
    /// Absolute byte offset of the data section.
    pub data_offset: u64,
}

impl Header {
    /// Parses and validates the header of a GGUF image held in `bytes` (a whole file).
    ///
    /// Errors: any malformed field, with its name and byte offset; tensor data that lies outside
    /// `bytes` or that breaks llama.cpp's contiguity rule.
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        Header::parse_inner(bytes, true)
    }

    /// Parses the metadata and tensor infos of a GGUF image whose tensor data may be cut
    /// short: everything [`Header::parse`] checks except that each tensor's data lies inside
    /// `bytes`. Gate 1 reads the stored metadata bytes with it, so that a truncated file is
    /// still judged (its missing tensor data is a blocker of its own).
    ///
    /// Errors: as [`Header::parse`], less the data-bounds check.
    pub fn parse_infos(bytes: &[u8]) -> Result<Header> {
        Header::parse_inner(bytes, false)
    }

    fn parse_inner(bytes: &[u8], check_data: bool) -> Result<Header> {
        let mut r = Cursor {
            buf: bytes,
            pos: 0,
            array_elements: 0,
        };
        let (version, n_tensors, n_kv) = read_preamble(&mut r)?;
        let (metadata, alignment_at) = read_metadata(&mut r, n_kv)?;
        let alignment = alignment_of(&metadata, alignment_at)?;
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = HashSet::with_capacity(n_tensors as usize);
        let mut expected_offset = 0u64;
        for i in 0..n_tensors {
            let t = read_tensor_info(&mut r, i, &mut names, expected_offset, alignment)?;
            expected_offset = pad(t.n_bytes, alignment)
                .and_then(|n| t.offset.checked_add(n))
                .ok_or_else(|| Error::Invalid {
                    field: format!("tensor_info[{i}] \"{}\"", short(&t.name)),
                    offset: r.pos as u64 - 8,
                    detail: "offset + size overflows u64".into(),
                })?;
            tensors.push(t);
        }
        let end_of_infos = r.pos as u64;
        let data_offset = pad(end_of_infos, alignment).expect("small");
        if check_data {
            check_data_section(&tensors, end_of_infos, data_offset, bytes.len() as u64)?;
        }
        Ok(Header {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get(crate::keys::general::ARCHITECTURE)
            .and_then(Value::as_str)
    }

    /// The tensor info named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// End of the tensor data: data offset + the padded size of every tensor.
    pub fn data_end(&self) -> u64 {
        self.tensors
            .last()
            .map(|t| {
                self.data_offset + t.offset + pad(t.n_bytes, self.alignment).unwrap_or(u64::MAX)
            })
            .unwrap_or(self.data_offset)
    }
}

/// Data bytes of a tensor of type `ty` and shape `dims` (`ne[0..n_dims]`):
/// `n_elements / block · type_size`, as ggml computes it.
///
/// Errors (as text): `ne[0]` not a multiple of the block size, or an element count that
/// overflows i64 by `gguf.cpp`'s rule (only factors > 1 are checked, so a zero dimension after
/// them makes the tensor empty), or a byte size that overflows u64.
pub fn tensor_n_bytes(ty: GgmlType, dims: &[u64]) -> std::result::Result<u64, String> {
    let ne0 = dims.first().copied().unwrap_or(1);
    if !ne0.is_multiple_of(ty.block_size()) {
        return Err(format!(
            "ne[0] = {ne0} is not a multiple of the {ty} block size {}",
            ty.block_size()
        ));
    }
    let mut n_elements: u64 = 1;
    for &d in dims {
        if d > 1 && (i64::MAX as u64) / d < n_elements {
            return Err("element count overflows i64".into());
        }
        n_elements *= d;
    }
    (n_elements / ty.block_size())
        .checked_mul(ty.type_size())
        .ok_or_else(|| "byte size overflows u64".to_string())
}

/// Rounds `x` up to a multiple of `align` (a power of two); `None` on overflow.
pub fn pad(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// An open, validated GGUF file backed by a read-only memory map.
pub struct Gguf {
    path: PathBuf,
    map: memmap2::Mmap,
    /// The parsed header.
    pub header: Header,
}

impl Gguf {
    /// Opens, maps and validates `path`.
    ///
    /// Errors: I/O errors and every parse error, prefixed with the path.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref().to_path_buf();
        let map = map_regular(&path)?;
        let header = Header::parse(&map).map_err(|e| e.in_file(&path))?;
        Ok(Gguf { path, map, header })
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The stored bytes of tensor `t` (length `t.n_bytes`); bounds were checked by `open`.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + t.offset) as usize;
        &self.map[start..start + t.n_bytes as usize]
    }

    /// Drops this process's mapped pages of tensor `t` (`madvise(MADV_DONTNEED)`): after a
    /// reader has copied the values out, the file stays in the page cache but no longer counts
    /// in the resident set. Reading the tensor again maps the pages again; nothing is lost.
    pub fn release(&self, t: &TensorInfo) {
        let start = (self.header.data_offset + t.offset) as usize;
        // SAFETY: a read-only file mapping; dropped pages are re-read from the file when
        // touched. Advice only: a failure changes nothing but memory.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start,
                t.n_bytes as usize,
            )
        };
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Array elements read so far (capped by `MAX_TOTAL_ARRAY_ELEMENTS`).
    array_elements: u64,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, field: impl FnOnce() -> String) -> Result<&'a [u8]> {
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(Error::Truncated {
                field: field(),
                offset: self.pos as u64,
                need: n,
                len: self.buf.len() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: impl FnOnce() -> String) -> Result<[u8; N]> {
        Ok(self.take(N as u64, field)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, field: impl FnOnce() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: impl FnOnce() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: impl FnOnce() -> String) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    /// Fails unless `count` items of at least `min_size` bytes fit in the bytes left.
    fn check_count(&self, count: u64, min_size: u64, field: &str, at: u64) -> Result<()> {
        let left = (self.buf.len() - self.pos) as u64;
        if count.checked_mul(min_size).is_none_or(|n| n > left) {
            return Err(Error::Invalid {
                field: field.into(),
                offset: at,
                detail: format!("count {count} cannot fit in the {left} bytes left in the file"),
            });
        }
        Ok(())
    }

    fn string(&mut self, field: impl Fn() -> String) -> Result<Vec<u8>> {
        let len = self.u64(|| format!("{} length", field()))?;
        Ok(self.take(len, &field)?.to_vec())
    }

    fn value(&mut self, vt: ValueType, key: &str, depth: usize) -> Result<Value> {
        // Formatted only on error: this runs once per array element.
        let qk = || format!("\"{}\"", short(key));
        let f = || format!("metadata {} {} value", qk(), vt.name());
        Ok(match vt {
            ValueType::U8 => Value::U8(self.take(1, f)?[0]),
            ValueType::I8 => Value::I8(self.take(1, f)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(f)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(f)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(f)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(f)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(f)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(f)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(f)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(f)?)),
            ValueType::Bool => {
                let at = self.pos as u64;
                match self.take(1, f)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => {
                        return Err(Error::Invalid {
                            field: format!("metadata {} bool value", qk()),
                            offset: at,
                            detail: format!("byte {b} is neither 0 nor 1"),
                        })
                    }
                }
            }
            ValueType::String => Value::String(self.string(f)?),
            ValueType::Array => {
                let at = self.pos as u64;
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::Invalid {
                        field: format!("metadata {} array", qk()),
                        offset: at,
                        detail: format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    });
                }
                let elem_id = self.u32(|| format!("metadata {} array element type", qk()))?;
                let elem = ValueType::from_id(elem_id).ok_or_else(|| Error::Invalid {
                    field: format!("metadata {} array element type", qk()),
                    offset: at,
                    detail: format!("unknown GGUF value type id {elem_id}"),
                })?;
                let count_at = self.pos as u64;
                let count = self.u64(|| format!("metadata {} array length", qk()))?;
                self.array_elements = self.array_elements.saturating_add(count);
                if self.array_elements > MAX_TOTAL_ARRAY_ELEMENTS {
                    return Err(Error::Invalid {
                        field: format!("metadata {} array length", qk()),
                        offset: count_at,
                        detail: format!(
                            "{count} more elements exceed the cap of {MAX_TOTAL_ARRAY_ELEMENTS} array elements per file"
                        ),
                    });
                }
                if count > MAX_ARRAY_LEN {
                    return Err(Error::Invalid {
                        field: format!("metadata {} array length", qk()),
                        offset: count_at,
                        detail: format!("{count} elements exceeds the cap of {MAX_ARRAY_LEN}"),
                    });
                }
                self.check_count(
                    count,
                    elem.min_encoded_size(),
                    &format!("metadata {} array length", qk()),
                    count_at,
                )?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

/// Maps the regular file `path` read-only (a FIFO, folder or device is refused before it is
/// opened: opening a FIFO blocks until a writer appears).
fn map_regular(path: &Path) -> Result<memmap2::Mmap> {
    // Check the kind before opening: opening a FIFO blocks until a writer appears, and
    // mapping a directory or device fails with an unhelpful errno.
    let meta = std::fs::metadata(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (device, FIFO or socket)"
        };
        return Err(Error::Io {
            path: path.to_path_buf(),
            cause: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("is {kind}; a GGUF file is expected"),
            ),
        });
    }
    let file = File::open(path).map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    // SAFETY: the map is read-only; a file truncated by another process while mapped is the
    // same hazard every mmap-based GGUF reader (llama.cpp included) accepts.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    })?;
    Ok(map)
}

impl Header {
    /// [`Header::parse_infos`] of the file at `path`, read through a memory map: only the
    /// header's pages are touched.
    ///
    /// Errors: I/O errors and every parse error, prefixed with the path.
    pub fn read_infos(path: &Path) -> Result<Header> {
        let map = map_regular(path)?;
        Header::parse_infos(&map).map_err(|e| e.in_file(path))
    }
}

/// Magic, version, tensor count and key count, each checked against what the file can hold
/// and the caps (`MAX_KV`, `MAX_TENSORS`).
fn read_preamble(r: &mut Cursor<'_>) -> Result<(u32, u64, u64)> {
    let magic = r.take(4, || "magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(Error::BadMagic {
            found: magic.try_into().expect("4 bytes"),
        });
    }
    let version = r.u32(|| "version".into())?;
    if version & 0xFFFF == 0 && version != 0 {
        return Err(Error::BigEndian { raw: version });
    }
    if version != 2 && version != 3 {
        return Err(Error::UnsupportedVersion { version });
    }
    let n_tensors_at = r.pos as u64;
    let n_tensors = r.u64(|| "n_tensors".into())?;
    let n_kv_at = r.pos as u64;
    let n_kv = r.u64(|| "n_kv".into())?;
    // Each kv needs ≥ 8 (key len) + 4 (type) + 1 bytes; each tensor info ≥ 8 + 4 + 4 + 8.
    r.check_count(n_kv, 13, "n_kv", n_kv_at)?;
    r.check_count(n_tensors, 24, "n_tensors", n_tensors_at)?;
    for (count, cap, field, at) in [
        (n_kv, MAX_KV, "n_kv", n_kv_at),
        (n_tensors, MAX_TENSORS, "n_tensors", n_tensors_at),
    ] {
        if count > cap {
            return Err(Error::Invalid {
                field: field.into(),
                offset: at,
                detail: format!("{count} exceeds the cap of {cap}"),
            });
        }
    }
    Ok((version, n_tensors, n_kv))
}

/// The `n_kv` key/value pairs (keys UTF-8, non-empty, unique), and the offset of
/// `general.alignment`'s value (0 when absent).
fn read_metadata(r: &mut Cursor<'_>, n_kv: u64) -> Result<(Vec<(String, Value)>, u64)> {
    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut alignment_at = 0u64;
    let mut keys = HashSet::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key_at = r.pos as u64;
        let key = r.string(|| format!("metadata[{i}] key"))?;
        let key = String::from_utf8(key).map_err(|_| Error::Invalid {
            field: format!("metadata[{i}] key"),
            offset: key_at,
            detail: "key is not UTF-8".into(),
        })?;
        let qk = format!("\"{}\"", short(&key));
        if key.is_empty() || !keys.insert(key.clone()) {
            return Err(Error::Invalid {
                field: format!("metadata[{i}] key {qk}"),
                offset: key_at,
                detail: if key.is_empty() {
                    "empty key".into()
                } else {
                    "duplicate key".into()
                },
            });
        }
        let type_at = r.pos as u64;
        let type_id = r.u32(|| format!("metadata {qk} value type"))?;
        let vt = ValueType::from_id(type_id).ok_or_else(|| Error::Invalid {
            field: format!("metadata {qk} value type"),
            offset: type_at,
            detail: format!("unknown GGUF value type id {type_id}"),
        })?;
        if key == KEY_ALIGNMENT {
            alignment_at = r.pos as u64;
        }
        let value = r.value(vt, &key, 0)?;
        metadata.push((key, value));
    }
    Ok((metadata, alignment_at))
}

/// `general.alignment` (a u32 power of two), or the default when absent.
fn alignment_of(metadata: &[(String, Value)], alignment_at: u64) -> Result<u64> {
    match metadata.iter().find(|(k, _)| k == KEY_ALIGNMENT) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, Value::U32(a))) if *a != 0 && a.is_power_of_two() => Ok(*a as u64),
        Some((_, v)) => Err(Error::Invalid {
            field: format!("metadata {KEY_ALIGNMENT:?}"),
            offset: alignment_at,
            detail: format!(
                "must be a u32 power of two, found {} {v}",
                v.value_type().name()
            ),
        }),
    }
}

/// Tensor info `i`: a unique UTF-8 name within GGML_MAX_NAME, at most `MAX_DIMS`
/// non-negative dims, a known type, and its data at `expected_offset` (contiguous in info
/// order, each padded to `alignment`).
fn read_tensor_info(
    r: &mut Cursor<'_>,
    i: u64,
    names: &mut HashSet<String>,
    expected_offset: u64,
    alignment: u64,
) -> Result<TensorInfo> {
    let name_at = r.pos as u64;
    let name = r.string(|| format!("tensor_info[{i}] name"))?;
    let name = String::from_utf8(name).map_err(|_| Error::Invalid {
        field: format!("tensor_info[{i}] name"),
        offset: name_at,
        detail: "name is not UTF-8".into(),
    })?;
    let qn = format!("\"{}\"", short(&name));
    let bad = |detail: String, offset: u64| Error::Invalid {
        field: format!("tensor_info[{i}] {qn}"),
        offset,
        detail,
    };
    if name.len() > MAX_TENSOR_NAME_LEN {
        return Err(bad(
            format!(
                "name is {} bytes, the limit is {MAX_TENSOR_NAME_LEN} (GGML_MAX_NAME)",
                name.len()
            ),
            name_at,
        ));
    }
    if !names.insert(name.clone()) {
        return Err(bad("duplicate tensor name".into(), name_at));
    }
    let dims_at = r.pos as u64;
    let n_dims = r.u32(|| format!("tensor {qn} n_dims"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(bad(format!("n_dims = {n_dims} > {MAX_DIMS}"), dims_at));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for j in 0..n_dims {
        let at = r.pos as u64;
        let ne = r.i64(|| format!("tensor {qn} ne[{j}]"))?;
        if ne < 0 {
            return Err(bad(format!("ne[{j}] = {ne} is negative"), at));
        }
        dims.push(ne as u64);
    }
    let type_at = r.pos as u64;
    let type_id = r.u32(|| format!("tensor {qn} type"))?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| Error::UnknownType {
        tensor: short(&name),
        id: type_id,
        offset: type_at,
    })?;
    let n_bytes = tensor_n_bytes(ggml_type, &dims).map_err(|d| bad(d, dims_at))?;
    let offset_at = r.pos as u64;
    let offset = r.u64(|| format!("tensor {qn} offset"))?;
    if offset != expected_offset {
        return Err(bad(
            format!(
                "data offset {offset} != {expected_offset}: llama.cpp requires tensors to be \
                 contiguous in info order, each padded to {alignment} bytes"
            ),
            offset_at,
        ));
    }
    Ok(TensorInfo {
        name,
        ggml_type,
        dims,
        offset,
        n_bytes,
    })
}

/// Every tensor's data lies inside a file of `len` bytes whose data section starts at
/// `data_offset` (the infos end at `end_of_infos`).
fn check_data_section(
    tensors: &[TensorInfo],
    end_of_infos: u64,
    data_offset: u64,
    len: u64,
) -> Result<()> {
    if !tensors.is_empty() && data_offset > len {
        return Err(Error::Truncated {
            field: "padding before the data section".into(),
            offset: end_of_infos,
            need: data_offset - end_of_infos,
            len,
        });
    }
    for t in tensors {
        let start = data_offset + t.offset;
        if start.checked_add(t.n_bytes).is_none_or(|end| end > len) {
            return Err(Error::Truncated {
                field: format!("tensor \"{}\" data", short(&t.name)),
                offset: start,
                need: t.n_bytes,
                len,
            });
        }
    }
    Ok(())
}
