//! Deterministic GGUF writer: the same metadata and tensors always give the same bytes.
//!
//! Tensor data is written contiguously in tensor-info order, each tensor zero-padded to the
//! alignment, after a zero-padded header, exactly as `gguf_write_to_file` and gguf-py do
//! (`docs/llamacpp-spec.md` §5). Files are written to a temporary file in the target
//! folder, fsynced and renamed only when complete, so a failure never leaves a partial file.

use std::collections::HashSet;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::reader::{
    pad, tensor_n_bytes, DEFAULT_ALIGNMENT, KEY_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN,
};
use crate::types::GgmlType;
use crate::value::Value;

/// A producer of one tensor's bytes, called once while the file is written.
pub type DeferredData<'a> = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + 'a>;

/// Where a tensor's bytes come from.
pub enum TensorData<'a> {
    /// Bytes already in memory (e.g. a slice of a memory-mapped source).
    Borrowed(&'a [u8]),
    /// Bytes owned by the writer.
    Owned(Vec<u8>),
    /// Produced on demand while writing, so only one tensor is in memory at a time. The closure
    /// must write exactly the tensor's byte size.
    Deferred(DeferredData<'a>),
}

/// One tensor to write.
pub struct TensorEntry<'a> {
    /// Tensor name (≤ 63 bytes, unique).
    pub name: String,
    /// Stored type.
    pub ggml_type: GgmlType,
    /// `ne[0..n_dims]`, stored as given (n_dims ≤ 4).
    pub dims: Vec<u64>,
    /// The bytes.
    pub data: TensorData<'a>,
}

impl TensorEntry<'_> {
    fn n_bytes(&self) -> Result<u64> {
        tensor_n_bytes(self.ggml_type, &self.dims).map_err(|detail| Error::Write {
            tensor: self.name.clone(),
            detail,
        })
    }
}

/// Builds a GGUF file: ordered metadata, then tensors in the order added.
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorEntry<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// What was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteSummary {
    /// Total file size in bytes.
    pub file_bytes: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

impl<'a> GgufWriter<'a> {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the version field (2 or 3; only the header field differs).
    pub fn set_version(&mut self, version: u32) {
        self.version = version;
    }

    /// Appends a metadata pair (order is kept; duplicates are rejected at write time).
    pub fn add_kv(&mut self, key: impl Into<String>, value: Value) {
        self.metadata.push((key.into(), value));
    }

    /// Appends a tensor.
    pub fn add_tensor(&mut self, tensor: TensorEntry<'a>) {
        self.tensors.push(tensor);
    }

    fn alignment(&self) -> Result<u64> {
        match self.metadata.iter().find(|(k, _)| k == KEY_ALIGNMENT) {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, Value::U32(a))) if *a != 0 && a.is_power_of_two() => Ok(*a as u64),
            Some((_, v)) => Err(Error::Write {
                tensor: String::new(),
                detail: format!("{KEY_ALIGNMENT} must be a u32 power of two, got {v}"),
            }),
        }
    }

    fn validate(&self) -> Result<Vec<u64>> {
        let mut keys = HashSet::new();
        for (k, _) in &self.metadata {
            if k.is_empty() || !keys.insert(k.as_str()) {
                return Err(Error::Write {
                    tensor: String::new(),
                    detail: format!("metadata key {k:?} is empty or duplicated"),
                });
            }
        }
        for (k, v) in &self.metadata {
            if !array_types_consistent(v) {
                return Err(Error::Write {
                    tensor: String::new(),
                    detail: format!(
                        "metadata {k:?}: array elements differ from the array's element type"
                    ),
                });
            }
        }
        let mut names = HashSet::new();
        let mut sizes = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let fail = |detail: String| Error::Write {
                tensor: t.name.clone(),
                detail,
            };
            if t.name.len() > MAX_TENSOR_NAME_LEN || !names.insert(t.name.as_str()) {
                return Err(fail(format!(
                    "name longer than {MAX_TENSOR_NAME_LEN} bytes or duplicated"
                )));
            }
            if t.dims.len() > MAX_DIMS {
                return Err(fail(format!("{} dims > {MAX_DIMS}", t.dims.len())));
            }
            let n = t.n_bytes()?;
            let given = match &t.data {
                TensorData::Borrowed(b) => Some(b.len() as u64),
                TensorData::Owned(b) => Some(b.len() as u64),
                TensorData::Deferred(_) => None,
            };
            if let Some(g) = given.filter(|g| *g != n) {
                return Err(fail(format!(
                    "{g} data bytes given, shape and type need {n}"
                )));
            }
            sizes.push(n);
        }
        Ok(sizes)
    }

    /// The header bytes, zero-padded to the alignment, and so the data section's offset.
    fn header(&self, sizes: &[u64], alignment: u64) -> (Vec<u8>, u64) {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&self.version.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut head, k.as_bytes());
            head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        for (t, &n) in self.tensors.iter().zip(sizes) {
            put_str(&mut head, t.name.as_bytes());
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset += pad(n, alignment).expect("size checked");
        }
        let data_offset = pad(head.len() as u64, alignment).expect("small");
        head.resize(data_offset as usize, 0);
        (head, data_offset)
    }

    /// The size in bytes of the file [`GgufWriter::write_to`] would write (header, tensors and
    /// padding), known before any tensor's data is produced: what a caller checks against the
    /// free disk space.
    ///
    /// Errors: as [`GgufWriter::write_to`]'s checks of the input.
    pub fn file_bytes(&self) -> Result<u64> {
        let sizes = self.validate()?;
        let alignment = self.alignment()?;
        let (head, _) = self.header(&sizes, alignment);
        Ok(sizes.iter().fold(head.len() as u64, |a, n| {
            a + pad(*n, alignment).expect("size checked")
        }))
    }

    /// Writes the file to `out` (any writer). Returns the byte counts.
    ///
    /// Errors: invalid input (duplicate names, bad shapes, wrong data length) before any byte is
    /// written; I/O errors; a deferred tensor writing the wrong number of bytes.
    pub fn write_to(self, out: &mut dyn Write) -> Result<WriteSummary> {
        let sizes = self.validate()?;
        let alignment = self.alignment()?;
        let io_err = |cause| Error::Io {
            path: "<output>".into(),
            cause,
        };
        let mut w = Counting { inner: out, n: 0 };
        let (head, data_offset) = self.header(&sizes, alignment);
        w.write_all(&head).map_err(io_err)?;
        let zeros = vec![0u8; alignment as usize];
        for (t, n) in self.tensors.into_iter().zip(sizes) {
            let start = w.n;
            match t.data {
                TensorData::Borrowed(b) => w.write_all(b).map_err(io_err)?,
                TensorData::Owned(b) => w.write_all(&b).map_err(io_err)?,
                TensorData::Deferred(f) => f(&mut w).map_err(io_err)?,
            }
            let written = w.n - start;
            if written != n {
                return Err(Error::Write {
                    tensor: t.name,
                    detail: format!("data source wrote {written} bytes, expected {n}"),
                });
            }
            let padding = pad(n, alignment).expect("size checked") - n;
            w.write_all(&zeros[..padding as usize]).map_err(io_err)?;
        }
        Ok(WriteSummary {
            file_bytes: w.n,
            data_offset,
        })
    }

    /// Writes atomically to `path`: a temporary file in the same folder, fsynced, then renamed.
    /// On any error the temporary file is removed and `path` is untouched.
    pub fn write_to_path(self, path: impl AsRef<Path>) -> Result<WriteSummary> {
        let path = path.as_ref();
        let io = |cause| Error::Io {
            path: path.to_path_buf(),
            cause,
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        crate::ensure_replaceable(path)?;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out.gguf".into());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{file_name}."))
            .suffix(".tmp")
            // Like any file a tool writes (tempfile's default 0600 would hide it from others).
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .tempfile_in(dir)
            .map_err(io)?;
        let mut buf = BufWriter::with_capacity(1 << 20, Writeback::new(tmp));
        let summary = self.write_to(&mut buf).map_err(|e| match e {
            Error::Io { cause, .. } => io(cause),
            e => e,
        })?;
        let tmp = buf.into_inner().map_err(|e| io(e.into_error()))?.file;
        tmp.as_file().sync_all().map_err(io)?;
        // Checked again: something may have been put at `path` while the file was written.
        crate::ensure_replaceable(path)?;
        tmp.persist(path).map_err(|e| io(e.error))?;
        // Make the rename itself durable; not all filesystems allow fsync on a directory.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(summary)
    }
}

/// Starts the kernel's writeback of each finished 32 MiB window while later bytes are still
/// being produced (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, asynchronous), so the final
/// `fsync` waits for the last window instead of the whole file. Only a hint: durability still
/// comes from that `fsync`.
struct Writeback {
    file: tempfile::NamedTempFile,
    written: u64,
    started: u64,
}

impl Writeback {
    const WINDOW: u64 = 32 << 20;

    fn new(file: tempfile::NamedTempFile) -> Writeback {
        Writeback {
            file,
            written: 0,
            started: 0,
        }
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.file.write(buf)?;
        self.written += k as u64;
        if self.written - self.started >= Self::WINDOW {
            use std::os::fd::AsRawFd;
            let len = self.written - self.started;
            // SAFETY: a valid open fd and a range inside what was written. Errors are ignored:
            // the hint may be unsupported (the final fsync reports real I/O errors).
            unsafe {
                libc::sync_file_range(
                    self.file.as_file().as_raw_fd(),
                    self.started as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
            self.started = self.written;
        }
        Ok(k)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

struct Counting<'w> {
    inner: &'w mut dyn Write,
    n: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn array_types_consistent(v: &Value) -> bool {
    match v {
        Value::Array(t, items) => items
            .iter()
            .all(|i| i.value_type() == *t && array_types_consistent(i)),
        _ => true,
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::Array(t, items) => {
            out.extend_from_slice(&(*t as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
