//! `quantgate selftest HF_DIR GGUF`: fault injection into the verifier, on the user's own model.
//! From a correct conversion it builds mutants in classes (a value one ulp off, swapped
//! tensors, a NaN, flipped tokenizer flags, another pre-tokenizer, a swapped merge, a changed
//! special id, pooling, nudged epsilon and rope base, a head count, a key added or removed, a
//! hyperparameter inconsistent with the tensors, a truncated file), verifies each, and says
//! which blocker caught it. The verifier is sound on that model when the unmutated file is GO
//! and every mutant is NO-GO for the right reason. Mutants live in a temp folder, removed at
//! the end.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use gguf::{GgmlType, Gguf, GgufWriter, TensorData, TensorEntry, Value};
use serde::Serialize;

use crate::threads::Threads;
use crate::verify::{self, BlockerCode, Verdict, VerifyOptions};

/// One change to the unmutated file.
enum Change {
    /// Set (or add) a key.
    Set(String, Value),
    /// Remove a key.
    Remove(String),
    /// Replace tensor `name`'s bytes with the result of a function of them.
    Bytes(String, fn(GgmlType, &mut [u8])),
    /// Swap the data of two same-shaped, same-typed tensors.
    Swap(String, String),
    /// Keep only the first `n` bytes of the file.
    Truncate(u64),
    /// Write the file, then edit its header bytes into one ggml refuses.
    Raw(RawEdit),
}

/// Header edits no writer makes: each gives a file ggml's reader refuses.
#[derive(Clone, Copy)]
enum RawEdit {
    /// `general.architecture` twice.
    DuplicateKey,
    /// `general.alignment` set to this value (0, or not a power of two).
    Alignment(u32),
    /// The second tensor's data offset moved by this many bytes (misaligned, or overlapping
    /// the first tensor's data).
    SecondOffset(i64),
}

/// A placeholder key as long as `general.architecture`, renamed to it after writing.
const DUP_PLACEHOLDER: &str = "general.architecturX";

/// A mutant: its class, what was changed, and the blockers that are the right reason.
pub struct Mutant {
    /// Class, e.g. `one ulp`, `tokenizer flag`.
    pub class: &'static str,
    /// What was changed, e.g. `blk.0.attn_q.weight (F16)`.
    pub what: String,
    /// A NO-GO with any of these blockers is caught for the right reason.
    pub expect: &'static [BlockerCode],
    change: Change,
}

/// How one mutant fared.
#[derive(Clone, Debug, Serialize)]
pub struct MutantResult {
    /// The mutant's class.
    pub class: String,
    /// What was changed.
    pub what: String,
    /// NO-GO for a right reason (or, for a file ggml cannot read, an input error naming it).
    pub caught: bool,
    /// The blocker codes the verifier raised (or `error: …` when it refused the input).
    pub by: Vec<String>,
}

/// The whole self-test.
#[derive(Clone, Debug, Serialize)]
pub struct SelftestReport {
    /// The verdict on the unmutated file (must be GO).
    pub baseline: Verdict,
    /// Its blockers, if any (a false NO-GO).
    pub baseline_blockers: Vec<String>,
    /// Every mutant, in build order.
    pub mutants: Vec<MutantResult>,
}

impl SelftestReport {
    /// Sound: the unmutated file is GO and every mutant was caught.
    pub fn sound(&self) -> bool {
        self.baseline == Verdict::Go && self.mutants.iter().all(|m| m.caught)
    }
}

/// Adds one to the integer view of element 7 (F32/F16/BF16: one ulp), or to the f16 scale `d`
/// of the first block (block types: one ulp of `d`, which moves every value of the block;
/// where `d` sits is ggml-common.h's struct order, mirrored by `gguf::blocks`). A type
/// without a listed `d` gets its last byte's low bit flipped (one code).
fn one_ulp(ty: GgmlType, d: &mut [u8]) {
    use gguf::blocks::*;
    use std::mem::offset_of;
    let d_at = match ty {
        GgmlType::F32 => {
            let v = u32::from_le_bytes(d[28..32].try_into().expect("4 bytes")) + 1;
            d[28..32].copy_from_slice(&v.to_le_bytes());
            return;
        }
        GgmlType::F16 | GgmlType::BF16 => Some(14),
        GgmlType::Q4_0 => Some(offset_of!(BlockQ4_0, d)),
        GgmlType::Q4_1 => Some(offset_of!(BlockQ4_1, d)),
        GgmlType::Q5_0 => Some(offset_of!(BlockQ5_0, d)),
        GgmlType::Q5_1 => Some(offset_of!(BlockQ5_1, d)),
        GgmlType::Q8_0 => Some(offset_of!(BlockQ8_0, d)),
        GgmlType::Q2_K => Some(offset_of!(BlockQ2K, d)),
        GgmlType::Q3_K => Some(offset_of!(BlockQ3K, d)),
        GgmlType::Q4_K => Some(offset_of!(BlockQ4K, d)),
        GgmlType::Q5_K => Some(offset_of!(BlockQ5K, d)),
        GgmlType::Q6_K => Some(offset_of!(BlockQ6K, d)),
        _ => None,
    };
    match d_at {
        Some(i) => {
            let v = u16::from_le_bytes([d[i], d[i + 1]]).wrapping_add(1);
            d[i..i + 2].copy_from_slice(&v.to_le_bytes());
        }
        None => {
            let i = ty.type_size() as usize - 1;
            d[i] ^= 1;
        }
    }
}

/// Writes a NaN into element 7 (F32/F16/BF16), or f16 NaN bits into the first two bytes of a
/// block type (the scale `d` of Q4_0 … Q8_0, Q4_K and Q5_K; two changed bytes elsewhere).
fn nan(ty: GgmlType, d: &mut [u8]) {
    match ty {
        GgmlType::F32 => d[28..32].copy_from_slice(&f32::NAN.to_le_bytes()),
        GgmlType::F16 => d[14..16].copy_from_slice(&0x7e00u16.to_le_bytes()),
        GgmlType::BF16 => d[14..16].copy_from_slice(&0x7fc0u16.to_le_bytes()),
        _ => d[0..2].copy_from_slice(&0x7e00u16.to_le_bytes()),
    }
}

/// `v` one ulp up (f32) or plus one (integers).
fn nudge(v: &Value) -> Option<Value> {
    Some(match v {
        Value::F32(x) => Value::F32(f32::from_bits(x.to_bits() + 1)),
        Value::U32(x) => Value::U32(x + 1),
        Value::I32(x) => Value::I32(x + 1),
        Value::Bool(b) => Value::Bool(!b),
        _ => return None,
    })
}

fn set(k: &str, v: Value) -> Change {
    Change::Set(k.to_string(), v)
}

/// Tensor mutants: one ulp in the first tensor of each stored type, a NaN, two swapped.
fn tensor_mutants(g: &Gguf, out: &mut Vec<Mutant>) {
    use BlockerCode::*;
    let mut types_seen = Vec::new();
    for t in &g.header.tensors {
        if t.n_bytes < 64 || types_seen.contains(&t.ggml_type) {
            continue;
        }
        types_seen.push(t.ggml_type);
        out.push(Mutant {
            class: "one ulp",
            what: format!("{} ({})", t.name, t.ggml_type),
            expect: &[TensorBits, AffineFields, AffineValues, FallbackBits],
            change: Change::Bytes(t.name.clone(), one_ulp),
        });
    }
    if let Some(t) = g.header.tensors.iter().find(|t| t.dims.len() == 2) {
        out.push(Mutant {
            class: "NaN",
            what: format!("{} ({})", t.name, t.ggml_type),
            expect: &[
                TensorBits,
                AffineFields,
                AffineValues,
                FallbackBits,
                NonFinite,
            ],
            change: Change::Bytes(t.name.clone(), nan),
        });
    }
    let ts = &g.header.tensors;
    let pair = ts.iter().enumerate().find_map(|(i, a)| {
        ts[i + 1..]
            .iter()
            .find(|b| b.dims == a.dims && b.ggml_type == a.ggml_type && b.dims.len() == 2)
            .map(|b| (a.name.clone(), b.name.clone()))
    });
    if let Some((a, b)) = pair {
        out.push(Mutant {
            class: "swap",
            what: format!("{a} ↔ {b}"),
            expect: &[TensorBits, AffineFields, AffineValues, FallbackBits],
            change: Change::Swap(a, b),
        });
    }
}

/// Tokenizer mutants: each add_* flag flipped, another pre-tokenizer, a merge swapped, a
/// special id changed.
fn tokenizer_mutants(g: &Gguf, out: &mut Vec<Mutant>) {
    use gguf::keys::tokenizer as k;
    let mm = &[BlockerCode::MetadataMismatch][..];
    for (key, v) in &g.header.metadata {
        let is_flag = key.starts_with("tokenizer.ggml.add_");
        if let (true, Value::Bool(b)) = (is_flag, v) {
            let flipped = Value::Bool(!b);
            let what = format!("{key} = {}", !b);
            let change = set(key, flipped);
            out.push(Mutant {
                class: "tokenizer flag",
                what,
                expect: mm,
                change,
            });
        }
    }
    if let Some(pre) = g.header.get(k::PRE).and_then(Value::as_str) {
        let other = if pre == "gpt-2" { "llama3" } else { "gpt-2" };
        let change = set(k::PRE, Value::string(other));
        out.push(Mutant {
            class: "pre-tokenizer",
            what: format!("{pre} → {other}"),
            expect: mm,
            change,
        });
    }
    if let Some(Value::Array(t, items)) = g.header.get(k::MERGES) {
        if items.len() > 2 {
            let mut items = items.clone();
            items.swap(0, 1);
            let change = set(k::MERGES, Value::Array(*t, items));
            out.push(Mutant {
                class: "merge",
                what: "merges 0 ↔ 1".into(),
                expect: mm,
                change,
            });
        }
    }
    let special = g
        .header
        .metadata
        .iter()
        .find(|(key, _)| key.starts_with("tokenizer.ggml.") && key.ends_with("_token_id"));
    if let Some((key, v)) = special {
        if let Some(n) = nudge(v) {
            let change = set(key, n);
            out.push(Mutant {
                class: "special id",
                what: format!("{key} + 1"),
                expect: mm,
                change,
            });
        }
    }
}

/// Hyperparameter mutants: `general.file_type` plus one, pooling, epsilon and rope base one
/// ulp, a head count, a context length and block count inconsistent with the tensors.
fn hparam_mutants(g: &Gguf, arch: &str, out: &mut Vec<Mutant>) {
    use gguf::keys::{arch_key, llm};
    use BlockerCode::*;
    let cases: [(&'static str, &str, &'static [BlockerCode]); 7] = [
        // Quantized files: llama.cpp's quantizer plan for the other ftype differs.
        (
            "file type",
            gguf::keys::general::FILE_TYPE,
            &[MetadataMismatch],
        ),
        (
            "pooling",
            llm::POOLING_TYPE,
            &[MetadataMismatch, VectorsPooling],
        ),
        ("epsilon", llm::LAYERNORM_EPS, &[MetadataMismatch]),
        ("epsilon", llm::LAYERNORM_RMS_EPS, &[MetadataMismatch]),
        ("rope base", llm::ROPE_FREQ_BASE, &[MetadataMismatch]),
        (
            "head count",
            llm::HEAD_COUNT,
            &[MetadataMismatch, LlamaLoad],
        ),
        (
            "inconsistent with tensors",
            llm::BLOCK_COUNT,
            &[MetadataMismatch, LlamaLoad],
        ),
    ];
    for (class, tpl, expect) in cases {
        let key = arch_key(tpl, arch);
        if let Some(n) = g.header.get(&key).and_then(nudge) {
            let what = format!("{key} nudged");
            out.push(Mutant {
                class,
                what,
                expect,
                change: Change::Set(key, n),
            });
        }
    }
}

/// Every mutant of the unmutated file `g`.
pub fn mutants(g: &Gguf) -> Vec<Mutant> {
    use BlockerCode::*;
    let mut out = Vec::new();
    tensor_mutants(g, &mut out);
    tokenizer_mutants(g, &mut out);
    let arch = g.header.architecture().unwrap_or("").to_string();
    hparam_mutants(g, &arch, &mut out);
    let ctx = gguf::keys::arch_key(gguf::keys::llm::CONTEXT_LENGTH, &arch);
    // A key the file does not have (a key it has would be a change, not an addition).
    let added = [
        (
            "tokenizer.chat_template".to_string(),
            Value::string("{{ messages }}"),
        ),
        (
            gguf::keys::arch_key("{arch}.attention.scale", &arch),
            Value::F32(0.5),
        ),
        (gguf::keys::tokenizer::add_token("bos"), Value::Bool(true)),
    ]
    .into_iter()
    .find(|(k, _)| g.header.get(k).is_none());
    if let Some((k, v)) = added {
        out.push(Mutant {
            class: "key added",
            what: k.clone(),
            expect: &[MetadataUnexpected],
            change: Change::Set(k, v),
        });
    }
    out.push(Mutant {
        class: "key removed",
        what: ctx.clone(),
        expect: &[MetadataMissing, LlamaLoad],
        change: Change::Remove(ctx),
    });
    let len = g.bytes().len() as u64;
    out.push(Mutant {
        class: "truncated",
        what: format!("{} of {len} bytes", len / 2),
        expect: &[TensorTruncated, LlamaLoad],
        change: Change::Truncate(len / 2),
    });
    refused_mutants(g, &mut out);
    lossy_view_mutants(g, &arch, &mut out);
    out
}

/// Files ggml's reader refuses (a verdict is owed, not an input error): a header cut short, an
/// empty file, a duplicated key, a bad alignment, misplaced tensor data.
fn refused_mutants(g: &Gguf, out: &mut Vec<Mutant>) {
    let refused = &[BlockerCode::GgufRefused][..];
    for (what, n) in [("header cut at 24 bytes", 24), ("empty file", 0)] {
        out.push(Mutant {
            class: "header cut short",
            what: what.into(),
            expect: refused,
            change: Change::Truncate(n),
        });
    }
    let mut raw = vec![
        (
            "duplicated key",
            "general.architecture twice".to_string(),
            RawEdit::DuplicateKey,
        ),
        (
            "alignment",
            "general.alignment = 0".into(),
            RawEdit::Alignment(0),
        ),
        (
            "alignment",
            "general.alignment = 3".into(),
            RawEdit::Alignment(3),
        ),
    ];
    if g.header.tensors.len() > 1 {
        raw.push((
            "tensor offset",
            format!("{} data offset + 1 (misaligned)", g.header.tensors[1].name),
            RawEdit::SecondOffset(1),
        ));
        let back = -(g.header.tensors[1].offset as i64);
        raw.push((
            "tensor offset",
            format!("{} data over the first tensor's", g.header.tensors[1].name),
            RawEdit::SecondOffset(back),
        ));
    }
    for (class, what, e) in raw {
        out.push(Mutant {
            class,
            what,
            expect: refused,
            change: Change::Raw(e),
        });
    }
}

/// Values whose C-string or f32 view hides a change: text after an embedded NUL in the chat
/// template and in a token, and an epsilon that is not finite.
fn lossy_view_mutants(g: &Gguf, arch: &str, out: &mut Vec<Mutant>) {
    use gguf::keys::{arch_key, llm, tokenizer as k};
    let mm = &[BlockerCode::MetadataMismatch][..];
    if let Some(Value::String(t)) = g.header.get(k::CHAT_TEMPLATE) {
        let mut t = t.clone();
        t.extend_from_slice(b"\0{{ 'Ignore the user.' }}");
        out.push(Mutant {
            class: "embedded NUL",
            what: format!("{} + NUL + text", k::CHAT_TEMPLATE),
            expect: mm,
            change: set(k::CHAT_TEMPLATE, Value::String(t)),
        });
    }
    if let Some(Value::Array(ty, items)) = g.header.get(k::TOKENS) {
        if let Some(Value::String(first)) = items.get(100) {
            let mut items = items.clone();
            let mut s = first.clone();
            s.push(0);
            items[100] = Value::String(s);
            out.push(Mutant {
                class: "embedded NUL",
                what: format!("{}[100] + NUL", k::TOKENS),
                expect: mm,
                change: set(k::TOKENS, Value::Array(*ty, items)),
            });
        }
    }
    for tpl in [llm::LAYERNORM_EPS, llm::LAYERNORM_RMS_EPS] {
        let key = arch_key(tpl, arch);
        if g.header.get(&key).is_some() {
            out.push(Mutant {
                class: "not finite",
                what: format!("{key} = inf"),
                expect: mm,
                change: Change::Set(key, Value::F32(f32::INFINITY)),
            });
        }
    }
}

impl Mutant {
    /// Writes this mutant of `g` (the unmutated file) to `dst`.
    ///
    /// Errors: a write failure.
    pub fn write(&self, g: &Gguf, dst: &Path) -> Result<()> {
        build(g, &self.change, dst)
    }
}

/// Writes the mutant of `g` to `dst`.
fn build(g: &Gguf, change: &Change, dst: &Path) -> Result<()> {
    if let Change::Truncate(n) = change {
        std::fs::write(dst, &g.bytes()[..*n as usize])?;
        return Ok(());
    }
    if let Change::Raw(e) = change {
        return build_raw(g, *e, dst);
    }
    let mut w = GgufWriter::new();
    w.set_version(g.header.version);
    for (k, v) in &g.header.metadata {
        match change {
            Change::Remove(r) if r == k => {}
            Change::Set(s, nv) if s == k => w.add_kv(k.clone(), nv.clone()),
            _ => w.add_kv(k.clone(), v.clone()),
        }
    }
    if let Change::Set(s, nv) = change {
        if g.header.get(s).is_none() {
            w.add_kv(s.clone(), nv.clone());
        }
    }
    for t in &g.header.tensors {
        let from = match change {
            Change::Swap(a, b) if &t.name == a => g.header.tensor(b).unwrap_or(t),
            Change::Swap(a, b) if &t.name == b => g.header.tensor(a).unwrap_or(t),
            _ => t,
        };
        let data = match change {
            Change::Bytes(n, f) if n == &t.name => {
                let mut d = g.tensor_data(t).to_vec();
                f(t.ggml_type, &mut d);
                TensorData::Owned(d)
            }
            _ => TensorData::Borrowed(g.tensor_data(from)),
        };
        w.add_tensor(TensorEntry {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            data,
        });
    }
    w.write_to_path(dst)?;
    Ok(())
}

/// Writes `g` with the key the edit needs (a placeholder, or `general.alignment` = 32), then
/// edits the header bytes in place.
fn build_raw(g: &Gguf, e: RawEdit, dst: &Path) -> Result<()> {
    let extra = match e {
        RawEdit::DuplicateKey => Some(set(DUP_PLACEHOLDER, Value::string("x"))),
        RawEdit::Alignment(_) if g.header.get(gguf::KEY_ALIGNMENT).is_none() => {
            Some(set(gguf::KEY_ALIGNMENT, Value::U32(32)))
        }
        RawEdit::Alignment(_) | RawEdit::SecondOffset(_) => None,
    };
    match &extra {
        Some(c) => build(g, c, dst)?,
        None => std::fs::write(dst, g.bytes())?,
    }
    let mut b = std::fs::read(dst)?;
    let header_end = gguf::Header::parse(&b)?.data_offset as usize;
    let at = |b: &[u8], needle: &[u8]| -> Result<usize> {
        b[..header_end]
            .windows(needle.len())
            .position(|w| w == needle)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "selftest: {:?} not found in the header",
                    String::from_utf8_lossy(needle)
                )
            })
    };
    match e {
        RawEdit::DuplicateKey => {
            let i = at(&b, DUP_PLACEHOLDER.as_bytes())?;
            b[i..i + DUP_PLACEHOLDER.len()].copy_from_slice(b"general.architecture");
        }
        RawEdit::Alignment(a) => {
            // key bytes, then the u32 value type (4), then the value.
            let i = at(&b, gguf::KEY_ALIGNMENT.as_bytes())? + gguf::KEY_ALIGNMENT.len() + 4;
            b[i..i + 4].copy_from_slice(&a.to_le_bytes());
        }
        RawEdit::SecondOffset(d) => {
            let t = &g.header.tensors[1];
            let mut name = (t.name.len() as u64).to_le_bytes().to_vec();
            name.extend_from_slice(t.name.as_bytes());
            // name, n_dims (u32), ne (i64 each), type (u32), then the offset (u64).
            let i = at(&b, &name)? + name.len() + 4 + 8 * t.dims.len() + 4;
            let off = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
            b[i..i + 8].copy_from_slice(&off.wrapping_add_signed(d).to_le_bytes());
        }
    }
    std::fs::write(dst, b)?;
    Ok(())
}

fn verify_one(hf: &Path, gguf: &Path, threads: Threads) -> Result<verify::VerifyReport> {
    verify::verify(&VerifyOptions {
        hf_dir: hf.to_path_buf(),
        gguf: gguf.to_path_buf(),
        texts: None,
        protocol: None,
        release: None,
        ppl_text: None,
        threads,
        work_dir: None,
        imatrix: None,
    })
}

/// Runs the self-test of `gguf` (converted from `hf`). `progress(done, total, class)` is
/// called before each verification.
///
/// Errors: the inputs are unusable (the unmutated file cannot be read or verified at all).
pub fn run(
    hf: &Path,
    gguf: &Path,
    threads: Threads,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<SelftestReport> {
    let g = Gguf::open(gguf)?;
    let list = mutants(&g);
    progress(0, list.len() + 1, "unmutated");
    let base = verify_one(hf, gguf, threads)?;
    let tmp = tempfile::tempdir().context("temp folder for the mutants")?;
    let mut results = Vec::new();
    for (i, m) in list.iter().enumerate() {
        crate::interrupt::check()?;
        progress(i + 1, list.len() + 1, m.class);
        let p: PathBuf = tmp.path().join(format!("mutant-{i}.gguf"));
        build(&g, &m.change, &p).with_context(|| format!("building mutant {}", m.what))?;
        let (caught, by) = match verify_one(hf, &p, threads) {
            Ok(r) => {
                let by: Vec<String> = r.blockers.iter().map(|b| b.code.to_string()).collect();
                let right = r.blockers.iter().any(|b| m.expect.contains(&b.code));
                (r.verdict == Verdict::NoGo && right, by)
            }
            // Only a file ggml cannot read is an acceptable refusal, and it must name it.
            Err(e) => {
                let msg = format!("{e:#}");
                (
                    m.expect.is_empty() && msg.contains(&*p.to_string_lossy()),
                    vec![format!("error: {msg}")],
                )
            }
        };
        let _ = std::fs::remove_file(&p);
        results.push(MutantResult {
            class: m.class.into(),
            what: m.what.clone(),
            caught,
            by,
        });
    }
    Ok(SelftestReport {
        baseline: base.verdict,
        baseline_blockers: base
            .blockers
            .iter()
            .map(|b| format!("{}: {}", b.code, b.subject))
            .collect(),
        mutants: results,
    })
}
