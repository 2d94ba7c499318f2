//! The inputs every gate reads, opened once: the GGUF read twice (ggml's reader and the
//! stored metadata bytes), the HF folder, its tokenizer and vocabulary, the pooling, and the
//! F32 expansion of a block-quantized file; the inputs' hashes; the memory check.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::{expand, resources, sliced, Blocker, BlockerCode, InputHash, VerifyOptions};
use crate::hash::sha256_file;
use crate::source::{arch::Arch, hf::HfDir};

/// The inputs every gate reads, opened once.
pub(super) struct Sources {
    pub(super) hf: HfDir,
    pub(super) arch: Arch,
    /// ggml's own reader: the independent read-back path of Gate 1.
    pub(super) c: llama_runtime::CGguf,
    /// Every stored key with its length-prefixed bytes (`gguf::Header::read_infos`), held
    /// against ggml's C-string view in Gate 1.
    pub(super) raw_kv: Vec<(String, gguf::Value)>,
    /// Stored ggml type ids, in file order.
    pub(super) types: Vec<u32>,
    pub(super) vocab_only: bool,
    pub(super) tok: crate::source::tokenizer::LoadedTokenizer,
    pub(super) vocab: crate::source::vocab::Vocab,
    pub(super) pooling: Option<reference::pooling::Pooling>,
    /// The file's `general.architecture` when it is not the HF folder's ([`architecture_mismatch`]).
    pub(super) arch_mismatch: Option<String>,
    /// The F32 expansion of a block-quantized file ([`expand`]), in a temp folder removed on
    /// drop.
    pub(super) expansion: Option<Expansion>,
}

/// The F32 expansion of the stored values: whole, or in slices of layers ([`sliced`]) beside
/// the whole expansion's shape file for Gate 1's ftype plan.
pub(super) struct Expansion {
    _dir: tempfile::TempDir,
    /// The whole expansion, or its shape file when sliced.
    path: PathBuf,
    sliced: Option<sliced::SlicedRun>,
}

impl Sources {
    /// A file with the whole expansion's names, types, shapes and metadata (the expansion
    /// itself or its sparse shape file): what llama.cpp's quantizer plans from.
    pub(super) fn plan_file(&self) -> Option<&Path> {
        self.expansion.as_ref().map(|e| e.path.as_path())
    }

    /// The whole expansion, when it was written.
    pub(super) fn whole_expansion(&self) -> Option<&Path> {
        self.expansion
            .as_ref()
            .filter(|e| e.sliced.is_none())
            .map(|e| e.path.as_path())
    }

    /// The sliced run of the expansion, when it is sliced.
    pub(super) fn sliced(&self) -> Option<&sliced::SlicedRun> {
        self.expansion.as_ref().and_then(|e| e.sliced.as_ref())
    }
}

/// Mutable state every gate appends to.
#[derive(Default)]
pub(super) struct Findings {
    pub(super) blockers: Vec<Blocker>,
    pub(super) notes: Vec<String>,
}

/// An input and its sha256.
pub(super) fn input_hash(p: &Path) -> Result<InputHash> {
    Ok(InputHash {
        path: p.display().to_string(),
        sha256: sha256_file(p)?,
        source_file: None,
    })
}

/// The HF folder's inputs with their sha256 (after [`HfDir::open`] checked them), hashed
/// before anything is measured.
pub(super) fn hash_hf_inputs(opts: &VerifyOptions) -> Result<Vec<InputHash>> {
    let entry = |p: &Path| -> Result<InputHash> {
        let rel = p.strip_prefix(&opts.hf_dir).unwrap_or(p);
        Ok(InputHash {
            source_file: Some(rel.to_string_lossy().into_owned()),
            ..input_hash(p)?
        })
    };
    // Every source file a release may ship (so `release --check` can hold each shipped copy
    // against the hash verify recorded), the SentencePiece model and the weights.
    crate::source::hf::input_files(&opts.hf_dir)?
        .iter()
        .map(|p| entry(p))
        .collect()
}

/// ggml's parse of the file, and its metadata as the stored bytes hold it.
type StoredViews = (llama_runtime::CGguf, Vec<(String, gguf::Value)>);

/// The file read twice: by ggml (`CGguf`) and by quantgate's reader (its metadata bytes).
/// `None` when either refuses it: a blocker names the reader and its error line, since a file
/// llama.cpp cannot open is a NO-GO, not an input error.
fn open_stored(opts: &VerifyOptions, f: &mut Findings) -> Result<Option<StoredViews>> {
    let subject = opts.gguf.display().to_string();
    let mut refused = |detail: String| {
        f.blockers
            .push(Blocker::new(BlockerCode::GgufRefused, &subject, detail));
    };
    let ours = gguf::Header::read_infos(&opts.gguf);
    let c = match llama_runtime::CGguf::open(&opts.gguf) {
        Ok(c) => c,
        Err(llama_runtime::RuntimeError::Load { log, .. }) => {
            let why = ours
                .err()
                .map(|e| format!("; quantgate's reader: {e}"))
                .unwrap_or_default();
            refused(format!("ggml's GGUF reader refuses the file: {log}{why}"));
            return Ok(None);
        }
        Err(e) => anyhow::bail!("Gate 1: {e}"),
    };
    match ours {
        Ok(h) => Ok(Some((c, h.metadata))),
        Err(e) => {
            refused(format!(
                "ggml opens the file, but its stored metadata bytes cannot be read: {e}"
            ));
            Ok(None)
        }
    }
}

pub(super) fn open_sources(opts: &VerifyOptions, f: &mut Findings) -> Result<Option<Sources>> {
    let Some((c, raw_kv)) = open_stored(opts, f)? else {
        return Ok(None);
    };
    let types: Vec<u32> = c.tensors().iter().map(|t| t.type_id).collect();
    let vocab_only = types.is_empty();
    let hf = HfDir::open(&opts.hf_dir, !vocab_only)?;
    let arch = crate::source::arch_of(&hf)?;
    let tok = crate::source::tokenizer::load(&opts.hf_dir)?;
    f.notes.extend(tok.notes.iter().cloned());
    let vocab = crate::source::vocab::build(
        &opts.hf_dir,
        &tok.json,
        &hf.tokenizer_config,
        &hf.config,
        &tok.tokenizer,
    )?;
    f.notes.extend(vocab.notes.iter().cloned());
    let pooling = reference::pooling::Pooling::from_sentence_transformers(&opts.hf_dir)?;
    let mut s = Sources {
        hf,
        arch,
        c,
        raw_kv,
        types,
        vocab_only,
        tok,
        vocab,
        pooling,
        arch_mismatch: None,
        expansion: None,
    };
    s.arch_mismatch = architecture_mismatch(&s);
    if !s.vocab_only && s.arch_mismatch.is_none() && expand::has_block_quantized(&s.types) {
        let dir = match &opts.work_dir {
            Some(w) => {
                std::fs::create_dir_all(w)
                    .with_context(|| format!("{}: cannot create", w.display()))?;
                tempfile::tempdir_in(w)?
            }
            None => tempfile::tempdir()?,
        };
        // A file our reader refuses (e.g. truncated) has no expansion; Gate 1 names the defect.
        // Embedding models keep the whole expansion: Gate 2 loads it to pool vectors.
        let vectors = s.arch == Arch::Bert || s.pooling.is_some();
        match write_expansion(&opts.gguf, dir, !vectors) {
            Ok(e) => s.expansion = Some(e),
            Err(e) if e.is::<crate::disk::NoSpace>() => return Err(e),
            Err(e) => f
                .notes
                .push(format!("no F32 expansion of the stored values: {e:#}")),
        }
    }
    Ok(Some(s))
}

/// The expansion of `gguf` in `dir`: with `slices`, in slices of at most a quarter of the
/// whole expansion each where the architecture allows ([`sliced`]; the scratch disk is then at most about
/// half the F16 size of the model), else whole. Refused before anything is written when the
/// folder's filesystem has less free space than the largest file it will hold.
fn write_expansion(gguf: &Path, dir: tempfile::TempDir, slices: bool) -> Result<Expansion> {
    let g = gguf::Gguf::open(gguf)?;
    let whole = expand::f32_expansion_bytes(&g)?;
    let run = match slices {
        true => sliced::SlicedRun::plan(gguf, dir.path(), whole / 4)?,
        false => None,
    };
    let need = match &run {
        Some(r) => r.scratch_bytes()?,
        None => whole,
    };
    crate::disk::ensure_free(dir.path(), need, "verify's F32 expansion")?;
    let name = if run.is_some() {
        "f32-shape.gguf"
    } else {
        "f32-expansion.gguf"
    };
    let path = dir.path().join(name);
    match &run {
        Some(_) => expand::write_shape_file(&g, &path)?,
        None => expand::write_f32_expansion(gguf, &path)?,
    };
    Ok(Expansion {
        _dir: dir,
        path,
        sliced: run,
    })
}

/// The file's `general.architecture` when it differs from the HF folder's (then nothing in
/// Gate 2 can be compared).
fn architecture_mismatch(s: &Sources) -> Option<String> {
    let want = s.arch.gguf_name();
    let got = match s.c.get(gguf::keys::general::ARCHITECTURE) {
        Some(llama_runtime::CValue::Str(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    };
    (got != want).then(|| format!("the file is {got:?}, the HF folder is {want:?}"))
}

/// Refuses to start when the machine's available memory is below the anonymous memory verify
/// will need ([`resources::estimate_need`] on the file's tensor table). A file our reader
/// refuses is not refused here: Gate 1 names its defect as a blocker (a truncated file is
/// NO-GO, not an error).
///
/// Errors: `MemAvailable` is below the estimate (the file and both figures named).
pub(super) fn check_memory(gguf_path: &Path) -> Result<()> {
    let Ok(g) = gguf::Gguf::open(gguf_path) else {
        return Ok(());
    };
    // ggml-cpu's get_features names it "AVX512".
    let avx512 = llama_runtime::cpu_backend()
        .map(|b| b.features.iter().any(|(n, v)| n == "AVX512" && v == "1"))
        .unwrap_or(false);
    let need = resources::estimate_need(&g.header.tensors, avx512);
    if let Some(avail) = resources::mem_available() {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        anyhow::ensure!(
            avail >= need,
            "{}: verify needs about {:.2} GiB of anonymous memory (its largest layer in f32, the \
             weights llama.cpp's CPU backend repacks, the logits of 512 positions and 0.5 GiB \
             of working memory; mapped files are reclaimable and not counted); this machine \
             has {:.2} GiB available (MemAvailable)",
            gguf_path.display(),
            gib(need),
            gib(avail)
        );
    }
    Ok(())
}
