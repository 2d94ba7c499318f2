//! Gate 1: the stored bits, read back through ggml's own GGUF reader (not our writer's or
//! reader's code), against what the reference computes from the HF source for each tensor's
//! stored type: F32 exact, F16/BF16/Q8_0 as ggml's `ggml_quantize_chunk` encodes the source
//! (round-to-nearest-even; `quantize_row_q8_0_ref`). Compared byte for byte, which is the u32
//! view for F32. Metadata is compared key by key with what the sources imply.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use gguf::{GgmlType, Value};
use llama_runtime::{CGguf, CTensorInfo, CValue};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::common::read_stored;
use super::encoding::{
    bits_blocker, expected_bytes, undecided_error, via_intermediate, Target, Weighting,
};
use super::row_blocks;
use super::source_maps::SourceMaps;
use crate::source::{
    arch,
    hf::{HfDir, SourceTensor},
};
use crate::verify::imatrix::UndecidedTensor;
use crate::verify::outcome::{Blocker, BlockerCode};

/// Gate 1's measurements.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub struct Gate1Report {
    /// Tensors compared.
    pub tensors: usize,
    /// Tensors whose stored bytes equal the expected encoding of the source.
    pub bit_identical: usize,
    /// Per stored type: tensors checked.
    pub by_type: BTreeMap<String, usize>,
    /// Metadata keys compared.
    pub metadata_keys: usize,
    /// Metadata keys that match.
    pub metadata_matching: usize,
    /// Block-quantized tensors whose bytes are the encoding of the source after a round trip
    /// through an intermediate float type (`F16`, `BF16`): what `quantize` of a conversion to
    /// that type stores for an F32 source. Keyed by the intermediate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub via_intermediate: BTreeMap<String, usize>,
}

/// A string value's canonical text: `str:TEXT` for UTF-8 (every byte kept, an embedded NUL
/// included), `bytes:HEX` otherwise. Never lossy: two different byte strings never share one.
fn canonical_str(s: &[u8]) -> String {
    match std::str::from_utf8(s) {
        Ok(t) => format!("str:{t}"),
        Err(_) => format!("bytes:{}", hex(s)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Canonical text of one of our metadata values, comparable with [`canonical_c`]: scalars as
/// `type:hex bytes`, strings as `str:text` (see [`canonical_str`]), arrays as
/// `arr<type>[n]#sha256` over each element's length and bytes.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::String(s) => canonical_str(s),
        Value::Array(t, items) => {
            let mut h = Sha256::new();
            for it in items {
                match it {
                    Value::String(s) => {
                        h.update((s.len() as u64).to_le_bytes());
                        h.update(s);
                    }
                    other => h.update(scalar_bytes(other)),
                }
            }
            format!("arr<{}>[{}]#{}", t.name(), items.len(), hex(&h.finalize()))
        }
        other => format!(
            "{}:{}",
            other.value_type().name(),
            hex(&scalar_bytes(other))
        ),
    }
}

fn scalar_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::U8(x) => vec![*x],
        Value::I8(x) => vec![*x as u8],
        Value::U16(x) => x.to_le_bytes().to_vec(),
        Value::I16(x) => x.to_le_bytes().to_vec(),
        Value::U32(x) => x.to_le_bytes().to_vec(),
        Value::I32(x) => x.to_le_bytes().to_vec(),
        Value::F32(x) => x.to_le_bytes().to_vec(),
        Value::Bool(x) => vec![*x as u8],
        Value::U64(x) => x.to_le_bytes().to_vec(),
        Value::I64(x) => x.to_le_bytes().to_vec(),
        Value::F64(x) => x.to_le_bytes().to_vec(),
        Value::String(_) | Value::Array(..) => Vec::new(),
    }
}

/// Canonical text of a value as ggml read it (see [`canonical`]). ggml hands strings out as C
/// strings, so this view ends at the first NUL: it is what llama.cpp itself sees, and
/// [`check_metadata`] holds it against the stored bytes as well.
pub fn canonical_c(v: &CValue) -> String {
    let tname = |t: u32| gguf::ValueType::from_id(t).map(|t| t.name()).unwrap_or("?");
    match v {
        CValue::Str(s) => canonical_str(s),
        CValue::Scalar { ty, bytes } => format!("{}:{}", tname(*ty), hex(bytes)),
        CValue::StrArray(items) => {
            let mut h = Sha256::new();
            for s in items {
                h.update((s.len() as u64).to_le_bytes());
                h.update(s);
            }
            format!("arr<str>[{}]#{}", items.len(), hex(&h.finalize()))
        }
        CValue::Array { ty, n, bytes } => {
            format!("arr<{}>[{n}]#{}", tname(*ty), hex(&Sha256::digest(bytes)))
        }
        CValue::Unsupported => "unsupported".into(),
    }
}

/// The two reads of one stored key: ggml's (`gguf_init_from_file`, what llama.cpp runs on)
/// and the length-prefixed bytes of the file (`gguf::Header::parse_infos`, what gguf-py and
/// every other reader see). A string with an embedded NUL differs between them.
fn stored_views(c: &CGguf, raw: &[(String, Value)], key: &str) -> Option<(String, String)> {
    let cv = canonical_c(&c.get(key)?);
    let rv = raw
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| canonical(v))
        .unwrap_or_else(|| "absent from the stored bytes".into());
    Some((cv, rv))
}

/// Compares the stored metadata with `expected` (what the sources imply), key by key, as the
/// bytes the GGUF holds: each key must equal the expectation both as ggml read it (`c`) and as
/// its length-prefixed bytes (`raw`, every key of the file in order). A missing or different key
/// is a blocker naming it.
pub fn check_metadata(
    c: &CGguf,
    raw: &[(String, Value)],
    expected: &[(String, Value)],
    blockers: &mut Vec<Blocker>,
    r: &mut Gate1Report,
) -> Result<()> {
    for (k, v) in expected {
        r.metadata_keys += 1;
        let want = canonical(v);
        match stored_views(c, raw, k) {
            None => blockers.push(Blocker::new(BlockerCode::MetadataMissing,
                k,
                format!("expected {}", short(&want)),
            )),
            Some((cv, rv)) if cv == want && rv == want => r.metadata_matching += 1,
            Some((cv, rv)) if cv == want => blockers.push(Blocker::new(BlockerCode::MetadataMismatch,
                k,
                format!(
                    "the stored bytes hold {}, while llama.cpp's C-string view reads {} (an embedded NUL); sources imply {}",
                    short(&rv),
                    short(&cv),
                    short(&want)
                ),
            )),
            Some((cv, _)) => blockers.push(Blocker::new(BlockerCode::MetadataMismatch,
                k,
                format!("file has {}, sources imply {}", short(&cv), short(&want)),
            )),
        }
    }
    Ok(())
}

/// Keys that name or describe a model but cannot change how llama.cpp runs it (gguf-py
/// `Keys.General` provenance fields): a file may carry them without the sources implying them.
pub const PROVENANCE_KEYS: &[&str] = &[
    "general.name",
    "general.author",
    "general.version",
    "general.organization",
    "general.finetune",
    "general.basename",
    "general.description",
    "general.quantized_by",
    "general.size_label",
    "general.license",
    "general.license.name",
    "general.license.link",
    "general.url",
    "general.doi",
    "general.uuid",
    "general.repo_url",
    "general.tags",
    "general.languages",
    "general.datasets",
];

/// Prefixes of provenance keys (`general.source.url`, `general.base_model.0.name`, …).
pub const PROVENANCE_PREFIXES: &[&str] =
    &["general.source.", "general.base_model.", "general.dataset."];

/// Whether `key` is a provenance key (see [`PROVENANCE_KEYS`]).
pub fn is_provenance(key: &str) -> bool {
    PROVENANCE_KEYS.contains(&key) || PROVENANCE_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The other direction of [`check_metadata`]: every key in the file must be implied by the
/// sources (`expected`), a provenance key, or in `also_allowed`; anything else (an injected
/// `add_bos_token`, `chat_template`, `rope.freq_base`, `general.alignment`, …) is a blocker.
pub fn check_unexpected_keys(
    c: &CGguf,
    raw: &[(String, Value)],
    expected: &[(String, Value)],
    also_allowed: &[&str],
    blockers: &mut Vec<Blocker>,
) {
    let implied: std::collections::HashSet<&str> =
        expected.iter().map(|(k, _)| k.as_str()).collect();
    // ggml's keys are C strings; the stored bytes' keys are whole (a key with a NUL differs).
    let mut keys = c.keys();
    for (k, _) in raw {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    for k in keys {
        if implied.contains(k.as_str()) || is_provenance(&k) || also_allowed.contains(&k.as_str()) {
            continue;
        }
        let v = match stored_views(c, raw, &k) {
            Some((cv, _)) => cv,
            None => raw
                .iter()
                .find(|(rk, _)| *rk == k)
                .map(|(_, v)| canonical(v))
                .unwrap_or_default(),
        };
        blockers.push(Blocker::new(BlockerCode::MetadataUnexpected,
            &k,
            format!(
                "the file has {}, which the sources do not imply (only provenance keys such as general.name may be added)",
                short(&v)
            ),
        ));
    }
}

/// The GGUF tensor names in the order a conversion of `hf` writes them: generated tensors
/// (`rope_freqs.weight`), then the HF folder's tensor order, mapped (MLX `.scales`/`.biases` belong to their `.weight`; a GPTQ/AWQ/
/// compressed-tensors module is named by its packed codes).
pub fn expected_order(hf: &HfDir, a: arch::Arch) -> Result<Vec<String>> {
    // Generated tensors first, as llama.cpp's converter writes them.
    let mut out: Vec<String> = super::generated::expected(hf, a)?.into_keys().collect();
    let mut seen = std::collections::HashSet::new();
    let stacks = expert_stacks(hf, a)?;
    for (i, t) in hf.tensors.iter().enumerate() {
        // A packed module (GPTQ/AWQ `qweight`, compressed-tensors `weight_packed`) sits where
        // its codes do; its other tensors belong to it.
        let name = match super::common::role(&t.name) {
            super::common::Role::Codes(module) => format!("{module}.weight"),
            super::common::Role::Part => continue,
            super::common::Role::Plain => t.name.clone(),
        };
        if let Some(names) = stacks.get(&i) {
            out.extend(names.iter().cloned());
            continue;
        }
        if let Some(m) = arch::map_tensor(a, &name)? {
            if m.expert.is_none() && seen.insert(m.gguf.clone()) {
                out.push(m.gguf);
            }
        }
    }
    Ok(out)
}

/// Where the stacked MoE tensors go in the order: after the last expert tensor of their layer
/// (by source position), down, gate, up, as llama.cpp's converter writes a layer's stacks
/// once it has read every expert. Source index → the GGUF names written there.
fn expert_stacks(hf: &HfDir, a: arch::Arch) -> Result<BTreeMap<usize, Vec<String>>> {
    // Layer prefix (`blk.N`) → (last source index, stacked names).
    let mut layers: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    for (i, t) in hf.tensors.iter().enumerate() {
        // Only plain tensors are stacked (quantized experts are refused by convert); the
        // parts of MLX and packed modules have no name of their own.
        if !matches!(super::common::role(&t.name), super::common::Role::Plain) {
            continue;
        }
        let Some(m) = arch::map_tensor(a, &t.name)? else {
            continue;
        };
        if m.expert.is_none() {
            continue;
        }
        let layer = m.gguf.split('.').take(2).collect::<Vec<_>>().join(".");
        let e = layers.entry(layer).or_default();
        e.0 = i;
        if !e.1.contains(&m.gguf) {
            e.1.push(m.gguf);
        }
    }
    let rank = |g: &String| {
        ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"]
            .iter()
            .position(|p| g.contains(p))
    };
    Ok(layers
        .into_values()
        .map(|(last, mut names)| {
            names.sort_by_key(rank);
            (last, names)
        })
        .collect())
}

/// Tensor order: the file's tensors that the sources imply must come in `expected` order,
/// named `order` in the blocker (e.g. "HF folder order"); missing and unexpected tensors are
/// blockers of their own.
pub fn check_order(c: &CGguf, expected: &[String], order: &str, blockers: &mut Vec<Blocker>) {
    let names: Vec<String> = c.tensors().into_iter().map(|i| i.name).collect();
    let in_file: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let want: Vec<&str> = expected
        .iter()
        .map(String::as_str)
        .filter(|n| in_file.contains(n))
        .collect();
    let wanted: std::collections::HashSet<&str> = want.iter().copied().collect();
    let got: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| wanted.contains(n))
        .collect();
    if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
        blockers.push(Blocker::new(
            BlockerCode::TensorOrder,
            got[i],
            format!(
                "tensor {i} of the file is {}; {order} puts {} there",
                got[i], want[i]
            ),
        ));
    }
}

/// A canonical value as a person reads it: `u32:20000000` → `u32 32`, `f32:00401c46` →
/// `f32 10000 (00401c46)`; strings and arrays unchanged. For blocker details only (the
/// comparison is on the canonical text).
pub fn readable(canon: &str) -> String {
    let Some((ty, hex)) = canon.split_once(':') else {
        return canon.to_string();
    };
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect();
    let Some(b) = bytes else {
        return canon.to_string();
    };
    let v = match (ty, b.as_slice()) {
        ("u8", [x]) => x.to_string(),
        ("i8", [x]) => (*x as i8).to_string(),
        ("bool", [x]) => (*x != 0).to_string(),
        ("u16", &[a, b]) => u16::from_le_bytes([a, b]).to_string(),
        ("i16", &[a, b]) => i16::from_le_bytes([a, b]).to_string(),
        ("u32", &[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]).to_string(),
        ("i32", &[a, b, c, d]) => i32::from_le_bytes([a, b, c, d]).to_string(),
        ("f32", &[a, b, c, d]) => format!("{:?} ({hex})", f32::from_le_bytes([a, b, c, d])),
        ("u64", s) if s.len() == 8 => u64::from_le_bytes(s.try_into().expect("8")).to_string(),
        ("i64", s) if s.len() == 8 => i64::from_le_bytes(s.try_into().expect("8")).to_string(),
        ("f64", s) if s.len() == 8 => {
            format!("{:?} ({hex})", f64::from_le_bytes(s.try_into().expect("8")))
        }
        _ => return canon.to_string(),
    };
    format!("{ty} {v}")
}

fn short(s: &str) -> String {
    // Control characters (an embedded NUL) shown escaped, so a blocker line stays one line.
    let s = &readable(s)
        .chars()
        .flat_map(|c| {
            let e: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            e
        })
        .collect::<String>();
    if s.len() > 120 {
        format!(
            "{}…",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 117)
                .last()
                .map(|(i, c)| i + c.len_utf8())
                .unwrap_or(0)]
        )
    } else {
        s.to_string()
    }
}

/// Compares every tensor of `gguf_path` (its infos as ggml read them into `c`) with the expected encoding of its
/// HF source tensor. Extra, missing, reshaped or differing tensors are blockers.
///
/// An imatrix quant is encoded with its weights (`w`); checked without them, a tensor that
/// takes weights and differs is appended to `undecided` instead ([`Weighting::undecided`]).
#[allow(clippy::too_many_arguments)]
pub fn check_tensors(
    gguf_path: &Path,
    c: &CGguf,
    (hf, a): (&HfDir, arch::Arch),
    covered: &super::common::Covered,
    w: Weighting,
    blockers: &mut Vec<Blocker>,
    undecided: &mut Vec<UndecidedTensor>,
    r: &mut Gate1Report,
) -> Result<()> {
    let infos = uncovered(c, covered);
    let mut file =
        std::fs::File::open(gguf_path).with_context(|| format!("{}", gguf_path.display()))?;
    let mut maps = SourceMaps::new(hf);
    let sources = reference_sources(hf, a, covered)?;
    let generated = super::generated::expected(hf, a)?;
    for (k, info) in infos.iter().enumerate() {
        crate::progress::report("gate 1 stored values: tensors", k, infos.len());
        r.tensors += 1;
        if let Some(g) = generated.get(&info.name) {
            check_generated(&mut file, gguf_path, info, g, blockers, r)?;
            continue;
        }
        let Some(members) = sources.get(&info.name) else {
            blockers.push(Blocker::new(
                BlockerCode::TensorUnexpected,
                &info.name,
                "no HF source tensor maps to it".into(),
            ));
            continue;
        };
        let src = &hf.tensors[members[0]];
        let stacked = (members.len() > 1).then_some(members.len());
        let skip = arch::rows_dropped(&hf.config, &info.name);
        let Some(ne_src) = members_agree(hf, info, members, blockers)
            .then(|| matching_ne(info, src, (stacked, skip), blockers))
            .flatten()
        else {
            continue;
        };
        let Some(ty) = GgmlType::from_id(info.type_id) else {
            blockers.push(Blocker::new(
                BlockerCode::TensorType,
                &info.name,
                format!("type id {}", info.type_id),
            ));
            continue;
        };
        *r.by_type.entry(ty.to_string()).or_default() += 1;
        let weights = w.for_tensor(info);
        let tw = (ty, weights);
        if let Some(via) =
            row_blocks::in_row_blocks(&mut file, gguf_path, hf, a, members, info, tw, &mut maps)?
        {
            r.bit_identical += 1;
            if let Some(t) = via {
                *r.via_intermediate.entry(t.to_string()).or_default() += 1;
            }
            continue;
        }
        let t = Target {
            hf,
            a,
            members,
            info,
            ty,
            ne_src: &ne_src,
            weights,
        };
        let io = (&mut file, gguf_path);
        judge_stored(io, &t, w, &mut maps, (blockers, undecided, r))?;
    }
    let present: std::collections::HashSet<&str> = infos.iter().map(|i| i.name.as_str()).collect();
    push_missing(
        &present,
        sources.keys(),
        "mapped from the HF source but absent from the file",
        blockers,
    );
    push_missing(
        &present,
        generated.keys(),
        "config.json's RoPE scaling implies it (llama3) but the file has none",
        blockers,
    );
    Ok(())
}

/// Compares the stored bytes of `t.info` with ggml's encoding of its source, directly or via
/// an F16/BF16 intermediate (convert, then quantize). An imatrix quant checked without its
/// imatrix is undecided (bounded by `undecided_error`); any other difference is `tensor-bits`.
///
/// Errors: the file or a source tensor cannot be read.
fn judge_stored(
    (file, gguf_path): (&mut std::fs::File, &Path),
    t: &Target,
    w: Weighting,
    maps: &mut SourceMaps,
    (blockers, undecided, r): (
        &mut Vec<Blocker>,
        &mut Vec<UndecidedTensor>,
        &mut Gate1Report,
    ),
) -> Result<()> {
    let expected = expected_bytes(t, None, maps)?;
    let Some(stored) = read_stored(file, gguf_path, t.info, blockers)? else {
        return Ok(());
    };
    if stored == expected {
        r.bit_identical += 1;
        return Ok(());
    }
    // A block type quantized from a conversion to F16/BF16 encodes the source rounded to that
    // type; ggml's own round trip gives those values.
    match via_intermediate(t, &stored, maps)? {
        Some(via) => {
            r.bit_identical += 1;
            *r.via_intermediate.entry(via.to_string()).or_default() += 1;
        }
        None if w.undecided(t.info, t.ty) => {
            let u = undecided_error(t, &stored, &expected, maps)?;
            blockers.extend(u.blocker());
            undecided.push(u);
        }
        None => {
            let names: Vec<&str> = t
                .members
                .iter()
                .map(|j| t.hf.tensors[*j].name.as_str())
                .collect();
            blockers.push(bits_blocker(t.info, &names, t.ty, &stored, &expected))
        }
    }
    Ok(())
}

/// A `tensor-missing` blocker, saying `why`, for each of `expected` not in `present`.
fn push_missing<'a>(
    present: &std::collections::HashSet<&str>,
    expected: impl Iterator<Item = &'a String>,
    why: &str,
    blockers: &mut Vec<Blocker>,
) {
    for name in expected.filter(|n| !present.contains(n.as_str())) {
        blockers.push(Blocker::new(BlockerCode::TensorMissing, name, why.into()));
    }
}

/// A generated tensor (F32, [`super::generated`]) against its expectation: shape, type and
/// every byte.
fn check_generated(
    file: &mut std::fs::File,
    gguf_path: &Path,
    info: &CTensorInfo,
    g: &super::generated::Generated,
    blockers: &mut Vec<Blocker>,
    r: &mut Gate1Report,
) -> Result<()> {
    let n = g.ne.len();
    if info.ne[..n] != g.ne[..] || info.ne[n..].iter().any(|d| *d != 1) {
        blockers.push(Blocker::new(
            BlockerCode::TensorShape,
            &info.name,
            format!("file ne {:?}, config.json implies {:?}", info.ne, g.ne),
        ));
        return Ok(());
    }
    if info.type_id != GgmlType::F32.id() {
        blockers.push(Blocker::new(
            BlockerCode::TensorType,
            &info.name,
            format!("type id {}; the converter stores it F32", info.type_id),
        ));
        return Ok(());
    }
    *r.by_type.entry(GgmlType::F32.to_string()).or_default() += 1;
    let Some(stored) = read_stored(file, gguf_path, info, blockers)? else {
        return Ok(());
    };
    if stored == g.bytes {
        r.bit_identical += 1;
        return Ok(());
    }
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let (s, e) = (f32s(&stored), f32s(&g.bytes));
    let i = s
        .iter()
        .zip(&e)
        .position(|(x, y)| x.to_bits() != y.to_bits())
        .unwrap_or(0);
    blockers.push(Blocker::new(
        BlockerCode::TensorBits,
        &info.name,
        format!(
            "element {i} is {}; config.json's llama3 RoPE scaling gives {}",
            s.get(i).copied().unwrap_or(f32::NAN),
            e.get(i).copied().unwrap_or(f32::NAN)
        ),
    ));
    Ok(())
}

/// The file's tensors that no other Gate 1 check (MLX, packed) has taken.
fn uncovered(c: &CGguf, covered: &super::common::Covered) -> Vec<CTensorInfo> {
    let mut infos = c.tensors();
    infos.retain(|i| !covered.gguf_names.contains(&i.name));
    infos
}

/// Whether a stack's source experts all have the first one's shape; else a blocker.
fn members_agree(
    hf: &HfDir,
    info: &CTensorInfo,
    members: &[usize],
    blockers: &mut Vec<Blocker>,
) -> bool {
    let src = &hf.tensors[members[0]];
    let Some(j) = members[1..]
        .iter()
        .find(|j| hf.tensors[**j].shape != src.shape)
    else {
        return true;
    };
    blockers.push(Blocker::new(
        BlockerCode::TensorShape,
        &info.name,
        format!(
            "the source's experts disagree in shape: {} {:?}, {} {:?}",
            src.name, src.shape, hf.tensors[*j].name, hf.tensors[*j].shape
        ),
    ));
    false
}

/// GGUF name → indices of the HF source tensors mapped to it (one, or a stacked MoE tensor's
/// experts in expert order), for sources not covered elsewhere.
fn reference_sources(
    hf: &HfDir,
    a: arch::Arch,
    covered: &super::common::Covered,
) -> Result<BTreeMap<String, Vec<usize>>> {
    // The reference side of the mapping: HF name → GGUF name from the shared arch table; the
    // experts of a stack gathered here, by their own index.
    let mut sources: BTreeMap<String, BTreeMap<u32, usize>> = BTreeMap::new();
    for (i, t) in hf.tensors.iter().enumerate() {
        if covered.source_indices.contains(&i) {
            continue;
        }
        if let Some(m) = arch::map_tensor(a, &t.name)? {
            sources
                .entry(m.gguf)
                .or_default()
                .insert(m.expert.unwrap_or(0), i);
        }
    }
    Ok(sources
        .into_iter()
        .map(|(g, by_expert)| (g, by_expert.into_values().collect()))
        .collect())
}

/// The source's `ne` (with the expert count last for a stack of `stacked` experts) when the
/// file's tensor has it (trailing 1s allowed), else a blocker.
fn matching_ne(
    info: &CTensorInfo,
    src: &SourceTensor,
    (stacked, skip): (Option<usize>, usize),
    blockers: &mut Vec<Blocker>,
) -> Option<Vec<i64>> {
    let mut ne_src: Vec<i64> = src.shape.iter().rev().map(|d| *d as i64).collect();
    if skip > 0 && ne_src.len() == 2 {
        ne_src[1] -= skip as i64;
    }
    ne_src.extend(stacked.map(|n| n as i64));
    if ne_src.len() > info.ne.len() {
        blockers.push(Blocker::new(
            BlockerCode::TensorShape,
            &info.name,
            format!(
                "source {} has {} dimensions{}; a GGUF tensor has at most {}",
                src.name,
                ne_src.len(),
                if stacked.is_some() {
                    " with the experts"
                } else {
                    ""
                },
                info.ne.len()
            ),
        ));
        return None;
    }
    let ne_file: Vec<i64> = info.ne[..ne_src.len().max(1)].to_vec();
    if ne_src != ne_file || info.ne[ne_src.len()..].iter().any(|d| *d != 1) {
        blockers.push(Blocker::new(
            BlockerCode::TensorShape,
            &info.name,
            format!(
                "file ne {:?}, source {} has ne {:?}",
                info.ne, src.name, ne_src
            ),
        ));
        return None;
    }
    Some(ne_src)
}

#[cfg(test)]
mod readable_tests {
    use super::*;

    #[test]
    fn canonical_values_read_as_numbers() {
        assert_eq!(readable(&canonical(&Value::U32(32))), "u32 32");
        assert_eq!(
            readable(&canonical(&Value::F32(10000.0))),
            "f32 10000.0 (00401c46)"
        );
        assert_eq!(readable(&canonical(&Value::Bool(true))), "bool true");
        assert_eq!(readable("str:ab"), "str:ab");
        assert_eq!(readable("arr<u32>[3]#00"), "arr<u32>[3]#00");
    }
}
