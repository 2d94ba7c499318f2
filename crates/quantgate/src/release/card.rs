//! The release folder's `README.md` (an HF hub model card: YAML front matter, then Markdown)
//! and `report.md`. Both are functions of the [`ReleaseReport`] only, so they are as
//! reproducible as it is.

use std::fmt::Write as _;

use super::choose::{files_table, which_file};
use super::{ReleaseReport, ReleasedFile};
use crate::verify::Verdict;

/// A YAML scalar: JSON's string syntax is a YAML double-quoted scalar.
fn y(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn y_list(out: &mut String, key: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "{key}:");
    for i in items {
        let _ = writeln!(out, "- {}", y(i));
    }
}

/// Whether the release holds a causal LM (logits measured) rather than an embedding model.
fn is_causal(r: &ReleaseReport) -> bool {
    r.files.iter().any(|f| f.verify.gate2_logits.is_some())
}

/// The front matter: license and card fields carried from the source card, `gguf` tags,
/// `library_name: gguf`, and `base_model` with `base_model_relation: quantized` when known.
fn front_matter(r: &ReleaseReport) -> String {
    let m = &r.card_meta;
    let mut s = String::from("---\n");
    let _ = writeln!(
        s,
        "license: {}",
        y(m.license.as_deref().unwrap_or("unknown"))
    );
    for (k, v) in [
        ("license_name", &m.license_name),
        ("license_link", &m.license_link),
    ] {
        if let Some(v) = v {
            let _ = writeln!(s, "{k}: {}", y(v));
        }
    }
    if let Some(b) = &r.base_model {
        let _ = writeln!(s, "base_model: {}", y(b));
        let _ = writeln!(s, "base_model_relation: quantized");
    }
    let _ = writeln!(s, "library_name: gguf");
    let pipeline = m.pipeline_tag.clone().unwrap_or_else(|| {
        if is_causal(r) {
            "text-generation".into()
        } else {
            "feature-extraction".into()
        }
    });
    let _ = writeln!(s, "pipeline_tag: {}", y(&pipeline));
    y_list(&mut s, "language", &m.language);
    let mut tags = vec!["gguf".to_string(), "llama.cpp".into(), "quantgate".into()];
    tags.extend(
        m.tags
            .iter()
            .filter(|t| !tags.contains(t))
            .cloned()
            .collect::<Vec<_>>(),
    );
    y_list(&mut s, "tags", &tags);
    y_list(&mut s, "datasets", &m.datasets);
    s.push_str("---\n");
    s
}

fn gates(s: &mut String, f: &ReleasedFile) {
    let v = &f.verify;
    let g1 = &v.gate1;
    let _ = writeln!(s, "### `{}` ({}): {}\n", f.name, f.ftype, v.verdict);
    let _ = writeln!(
        s,
        "- Gate 1: metadata {}/{} keys as the source implies; tensors {}/{} bit-identical to ggml's encoding of the source.",
        g1.metadata_matching, g1.metadata_keys, g1.bit_identical, g1.tensors
    );
    if let Some(t) = &v.gate2_tokenizer {
        let modes: Vec<String> = t.matching_modes.iter().map(|m| m.to_string()).collect();
        let _ = writeln!(
            s,
            "- Gate 2 tokenizer: same ids as HF tokenizers on {} texts with {}.",
            t.texts,
            modes.join("; ")
        );
    }
    if let Some(x) = &v.gate2_vectors {
        let _ = writeln!(
            s,
            "- Gate 2 embeddings: min cosine {:.6} over {} texts; top-1 retrieval identical for {}/{} queries.",
            x.min_cosine, x.texts, x.top1_identical, x.queries
        );
    }
    if let Some(l) = &v.gate2_logits {
        let _ = writeln!(
            s,
            "- Gate 2 logits ({} positions): min cosine {:.6}, argmax agreement {:.4}, mean KLD {:.6} nats.",
            l.positions, l.min_cosine, l.top1_agreement, l.mean_kld
        );
    }
    imatrix_line(s, f);
    for b in &v.blockers {
        let _ = writeln!(
            s,
            "- **blocker** gate {} `{}` {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
    quality(s, f);
    s.push('\n');
}

/// How Gate 1 treated an imatrix quant (docs/imatrix.md): checked with its imatrix, or the
/// named limitation when the release was built without it.
fn imatrix_line(s: &mut String, f: &ReleasedFile) {
    use crate::verify::imatrix::{ImatrixStatus, MAX_UNDECIDED_RMS_RATIO};
    let im = &f.verify.gate1_imatrix;
    let dataset = im
        .keys
        .get(gguf::keys::quantize::IMATRIX_DATASET)
        .map_or("(not named)", String::as_str);
    let _ = match (im.status, &im.given) {
        (ImatrixStatus::Checked, Some(g)) => writeln!(
            s,
            "- Importance matrix: `{}` (sha256 `{}`, {} entries, {} chunks of dataset `{dataset}`); every tensor re-made with its weights, byte for byte.",
            g.file, g.sha256, g.entries, g.chunks
        ),
        (ImatrixStatus::NotGiven, _) => writeln!(
            s,
            "- Importance matrix (dataset `{dataset}`) **not available to the check**: {} tensors were not re-made byte for byte; each is within {MAX_UNDECIDED_RMS_RATIO} × the RMS error of the unweighted encoding, and Gate 2 judged their stored values.",
            im.undecided.len()
        ),
        _ => Ok(()),
    };
}

/// The quality table of a release with imatrix quants: each lossy file's mean KLD and PPL ratio
/// against the source, with the imatrix named per file.
fn imatrix_quality_table(s: &mut String, r: &ReleaseReport) {
    use crate::verify::imatrix::ImatrixStatus;
    if r.files
        .iter()
        .all(|f| f.verify.gate1_imatrix.status == ImatrixStatus::None)
    {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Quality with and without the importance matrix\n\n| file | ftype | imatrix | mean KLD | PPL ratio |\n|---|---|---|---:|---:|"
    );
    for f in &r.files {
        let Some(q) = &f.verify.quality else { continue };
        let im = &f.verify.gate1_imatrix;
        let which = match &im.given {
            Some(g) => format!("`{}…`", &g.sha256[..g.sha256.len().min(12)]),
            None if im.status == ImatrixStatus::None => "none".into(),
            None => "yes (not given)".into(),
        };
        let ppl = q
            .ppl
            .as_ref()
            .map_or("—".into(), |p| format!("{:.4}", p.ratio));
        let _ = writeln!(
            s,
            "| `{}` | {} | {which} | {:.6} | {ppl} |",
            f.name, f.ftype, q.logits.mean_kld
        );
    }
}

fn quality(s: &mut String, f: &ReleasedFile) {
    let Some(q) = &f.verify.quality else {
        // Embedding models: verify reports the as-shipped vectors against the source as a note.
        let note = f
            .verify
            .notes
            .iter()
            .find(|n| n.starts_with("quality against the source"));
        let _ = match note {
            Some(n) => writeln!(s, "- Q{}.", &n[1..]),
            None => writeln!(
                s,
                "- Quality against the source: not applicable (no lossy tensors)."
            ),
        };
        return;
    };
    let l = &q.logits;
    let _ = writeln!(
        s,
        "- Quality against the source (file as shipped vs the HF weights, {} positions): mean KLD {:.6}, 99th-percentile KLD {:.6}, same top p {:.4}, RMS Δp {:.4}.",
        l.positions, l.mean_kld, l.p99_kld, l.top1_agreement, l.rms_dp
    );
    match &q.ppl {
        Some(p) => {
            let _ = writeln!(
                s,
                "- PPL on {} ({} × {} tokens): file {:.4}, source {:.4}, ratio {:.4}.",
                p.text, p.chunks, p.n_ctx, p.file_ppl, p.reference_ppl, p.ratio
            );
        }
        None => {
            let _ = writeln!(s, "- PPL: not measured (no `--ppl-text`).");
        }
    }
    match &q.budget {
        Some(b) => {
            let _ = writeln!(
                s,
                "- Quality budget {}: max mean KLD {:?}, min same top p {:?}, max PPL ratio {:?}.",
                b.ftype, b.max_mean_kld, b.min_same_top_p, b.max_ppl_ratio
            );
        }
        None => {
            let _ = writeln!(s, "- quality budget: not declared (reported only).");
        }
    }
}

/// The tokenizer limitations Gate 2 measured on any file, each once.
fn limitations(s: &mut String, r: &ReleaseReport) {
    let mut seen: Vec<String> = Vec::new();
    for v in r.files.iter().map(|f| &f.verify) {
        let fixed = v.gate2_tokenizer.iter().flat_map(|t| &t.limitations);
        let stress = v
            .gate2_stress
            .iter()
            .flat_map(crate::verify::stress_gate::card_lines);
        for l in fixed.map(|l| l.to_string()).chain(stress) {
            if !seen.contains(&l) {
                seen.push(l);
            }
        }
    }
    let _ = writeln!(s, "## Tokenizer limitations found by Gate 2\n");
    if seen.is_empty() {
        let _ = writeln!(s, "None on the built-in corpus.\n");
    }
    for l in seen {
        let _ = writeln!(s, "- {l}");
    }
    s.push('\n');
}

/// What no gate of this release measured. A card that lists only what passed misleads.
fn not_verified(s: &mut String, r: &ReleaseReport) {
    let _ = writeln!(s, "## What was not verified\n");
    let items = [
        format!("Any runtime other than llama.cpp {} on the CPU backend that ran here: GPU backends (CUDA, Metal, Vulkan, …), other llama.cpp versions and other thread counts were not run.", r.llama_cpp),
        "Texts longer than 512 tokens: every comparison uses at most 512 tokens per text, so long-context behaviour was not measured.".into(),
        "Generation: sampling, chat formatting with the shipped chat template, tool use and instruction following were not run; the template is copied, not executed.".into(),
        "Downstream accuracy (HellaSwag, MMLU, …): not part of this release; see `quantgate run` for the protocol's evaluation.".into(),
        "Texts other than quantgate's built-in Gate 2 corpus (mixed scripts, Korean/English, whitespace, digits, emoji), its generated tokenizer cases (the seed and counts are in report.md) and, where given, the PPL text.".into(),
        "The source weights themselves: the release proves the GGUFs encode them faithfully, not that they are good.".into(),
    ];
    for i in items {
        let _ = writeln!(s, "- {i}");
    }
    // phi3's LongRoPE: llama.cpp's context-size switch between its factor sets.
    if let Some(n) = r
        .files
        .iter()
        .flat_map(|f| &f.verify.notes)
        .find(|n| n.starts_with(crate::verify::long_context::LONGROPE_NOTE))
    {
        let _ = writeln!(s, "- {n}");
    }
    if r.files
        .iter()
        .any(|f| f.verify.quality.as_ref().is_some_and(|q| q.ppl.is_none()))
    {
        let _ = writeln!(s, "- PPL of the lossy files: no PPL text was given.");
    }
    s.push('\n');
}

fn reproduce(s: &mut String, r: &ReleaseReport) {
    let _ = writeln!(s, "## Reproduce\n");
    let _ = writeln!(
        s,
        "- quantgate {} · llama.cpp {} · {} threads",
        r.quantgate, r.llama_cpp, r.threads
    );
    let _ = writeln!(s, "- `{}`", r.command);
    let _ = writeln!(s, "- Check this folder: `sha256sum -c SHA256SUMS`, then `quantgate release --check .` (Gate 3: hashes and llama.cpp re-measured on these bytes).");
    if let Some(f) = r.files.first() {
        let _ = writeln!(
            s,
            "- With llama.cpp's own tool, per tensor: `llama-gguf-hash --check {m} {n}` for each GGUF and its `.manifest` (exit 0; the manifest covers tensor data, not metadata).",
            m = super::manifest::file_name(&f.name),
            n = f.name
        );
    }
    let _ = writeln!(s, "- `receipt.json` (not covered by SHA256SUMS) holds when this folder was built, the timings and its Gate 3 result.");
    match &r.signed_by {
        Some(k) => {
            let _ = writeln!(
                s,
                "- Signed: `model.sig` (OpenSSF model-signing v1.0, ECDSA P-256) by the key with fingerprint `{}` (sha256 of its public-key PEM). With that public key as `key.pub`, either of:\n  - `quantgate release --check . --trust key.pub`\n  - `model_signing verify key . --signature model.sig --public_key key.pub`\n",
                k.fingerprint
            );
        }
        None => {
            let _ = writeln!(
                s,
                "- **Unsigned**: nothing here proves who made this folder; SHA256SUMS and report.json can be rewritten together.\n"
            );
        }
    }
}

/// `README.md`: the model card.
pub fn model_card(r: &ReleaseReport) -> String {
    let mut s = front_matter(r);
    let _ = writeln!(s, "\n# {} GGUF\n", r.source);
    let _ = writeln!(
        s,
        "GGUF files of `{}` for llama.cpp, each verified by quantgate against the HF source. Gates 1–2 for the package: **{}**.\n",
        r.base_model.as_deref().unwrap_or(&r.source),
        r.gates_1_2
    );
    if r.gates_1_2 != Verdict::Go {
        let _ = writeln!(
            s,
            "**Do not publish: a file is NO-GO (see its blockers below).**\n"
        );
    }
    let _ = writeln!(s, "## Files\n");
    files_table(&mut s, r);
    s.push('\n');
    which_file(&mut s, r);
    imatrix_quality_table(&mut s, r);
    let _ = writeln!(s, "\n## Verification\n");
    for f in &r.files {
        gates(&mut s, f);
    }
    limitations(&mut s, r);
    not_verified(&mut s, r);
    reproduce(&mut s, r);
    s
}

/// `report.md`: the files table and each file's gates, without the card's front matter.
pub fn report_markdown(r: &ReleaseReport) -> String {
    let mut s = format!("# quantgate release: {}\n\n", r.source);
    let _ = writeln!(
        s,
        "- gates 1–2: {}\n- quantgate {} · llama.cpp {}\n",
        r.gates_1_2, r.quantgate, r.llama_cpp
    );
    files_table(&mut s, r);
    s.push('\n');
    for f in &r.files {
        gates(&mut s, f);
    }
    s
}
