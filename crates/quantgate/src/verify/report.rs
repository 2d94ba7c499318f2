//! Renders a [`super::VerifyReport`] as `report.json`, `report.md` and `report.html`, written
//! atomically (temp file + rename).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::VerifyReport;

/// Markdown summary.
pub fn markdown(r: &VerifyReport) -> String {
    let mut s = String::new();
    header(&mut s, r);
    gate1(&mut s, r);
    gate2_tokenizer(&mut s, r);
    gate2_vectors(&mut s, r);
    gate2_logits(&mut s, r);
    gate3(&mut s, r);
    costs(&mut s, r);
    blockers_and_notes(&mut s, r);
    s
}

/// Wall time and peak RSS per gate.
fn costs(s: &mut String, r: &VerifyReport) {
    if r.costs.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Cost per gate\n\n| gate | wall s | peak RSS MiB (sampled every 5 ms) |\n|---|---:|---:|");
    for c in &r.costs {
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.1} |",
            c.gate, c.wall_s, c.peak_rss_mib
        );
    }
}

/// The verdict, versions, thresholds, llama.cpp context and the inputs table.
fn header(s: &mut String, r: &VerifyReport) {
    let _ = writeln!(s, "# quantgate verify: {}\n", r.verdict);
    let _ = writeln!(s, "- quantgate {} · runtime {}", r.quantgate, r.llama_cpp);
    if let Some(d) = &r.image_digest {
        let _ = writeln!(s, "- image {d}");
    }
    let _ = writeln!(
        s,
        "- thresholds (sha256 {}): vectors min cosine {}, min top-1 agreement {}; logits min cosine {}, min argmax agreement {}, max mean KLD {}",
        &r.thresholds_sha256[..16],
        r.thresholds.min_cosine,
        r.thresholds.min_top1_agreement,
        r.thresholds.min_logits_cosine,
        r.thresholds.min_logits_top1_agreement,
        r.thresholds.max_mean_kld
    );
    let _ = writeln!(s, "- llama.cpp context: {}\n", r.llama_context);
    let _ = writeln!(s, "## Inputs\n\n| file | sha256 |\n|---|---|");
    for i in &r.inputs {
        let _ = writeln!(s, "| {} | `{}` |", i.path, i.sha256);
    }
}

/// The Gate 1 section, with the already-quantized line when there is one.
fn gate1(s: &mut String, r: &VerifyReport) {
    let _ = writeln!(s, "\n## Gate 1: stored bits (read back by ggml)\n");
    let _ = writeln!(
        s,
        "- tensors bit-identical: {}/{} {:?}",
        r.gate1.bit_identical, r.gate1.tensors, r.gate1.by_type
    );
    let _ = writeln!(
        s,
        "- metadata keys matching: {}/{}",
        r.gate1.metadata_matching, r.gate1.metadata_keys
    );
    imatrix_lines(s, r);
    if let Some(a) = &r.gate1_affine {
        let _ = writeln!(
            s,
            "- already-quantized source ({} modules; rule: {}): fields identical {}/{}, named-formula values identical {}/{}, fallbacks as declared {}/{}, ggml to_float = named formula {}/{}",
            a.modules, a.rule, a.fields_identical, a.exact_tensors, a.values_identical, a.exact_tensors,
            a.fallback_identical, a.fallback_tensors, a.ggml_to_float_agrees, a.ggml_to_float_checked
        );
    }
}

/// Gate 1's importance-matrix lines (docs/imatrix.md), for a file with `quantize.imatrix.*` keys.
fn imatrix_lines(s: &mut String, r: &VerifyReport) {
    use super::imatrix::ImatrixStatus;
    let im = &r.gate1_imatrix;
    let keys: Vec<String> = im.keys.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    match im.status {
        ImatrixStatus::None => {}
        ImatrixStatus::Checked => {
            let g = im.given.as_ref();
            let _ = writeln!(
                s,
                "- imatrix quant, checked with its imatrix `{}` (sha256 `{}`): every tensor re-made with its weights; keys: {}",
                g.map_or("?", |g| g.file.as_str()),
                g.map_or("?", |g| g.sha256.as_str()),
                keys.join(", ")
            );
        }
        ImatrixStatus::NotGiven => {
            let worst = im.undecided.iter().map(|u| u.ratio()).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "- imatrix quant, checked **without** its imatrix (limitation): {} tensors undecided byte for byte, worst RMS error {worst:.2} × the unweighted encoding's (bound {} ×); keys: {}",
                im.undecided.len(),
                super::imatrix::MAX_UNDECIDED_RMS_RATIO,
                keys.join(", ")
            );
        }
    }
}

/// The Gate 2 tokenizer table, if that check ran.
fn gate2_tokenizer(s: &mut String, r: &VerifyReport) {
    if let Some(t) = &r.gate2_tokenizer {
        let _ = writeln!(s, "\n## Gate 2: tokenizer ({} texts)\n\n| add_special | parse_special | matched | first mismatch |\n|---|---|---|---|", t.texts);
        for m in &t.modes {
            let first = m
                .first_mismatch
                .as_ref()
                .map(|x| format!("{} on {:?}", x.shape, x.text))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {} | {}/{} | {} |",
                m.mode.add_special,
                m.mode.parse_special,
                m.matched,
                m.total,
                first.replace('|', "\\|").replace('\n', "\\n")
            );
        }
        if let Some(st) = &r.gate2_stress {
            stress_table(s, st);
        }
    }
}

/// The generated-case counts per class, with the first mismatch's ids and pieces.
fn stress_table(s: &mut String, st: &super::stress_gate::StressReport) {
    let _ = writeln!(
        s,
        "\n### Generated cases (seed {}, {} per class, `{}` vocabulary, {})\n\n| class | declared | matched | known cause | first mismatch: HF / llama.cpp |\n|---|---|---|---|---|",
        st.seed, st.per_class, st.tokenizer_model, st.mode
    );
    for c in &st.classes {
        // The first difference without a known cause, else the first one.
        let first = c
            .result
            .first_unexplained
            .as_ref()
            .or(c.result.first_mismatch.as_ref())
            .map(|m| {
                format!(
                    "{:?}: {:?} {:?} / {:?} {:?}",
                    m.text, m.hf_ids, m.hf_pieces, m.llama_ids, m.llama_pieces
                )
            })
            .unwrap_or_default();
        let known: Vec<String> = c
            .result
            .explained
            .iter()
            .map(|(d, n)| format!("{n} {d:?}"))
            .collect();
        let _ = writeln!(
            s,
            "| {:?} | {:?} | {}/{} | {} | {} |",
            c.result.class,
            c.severity,
            c.result.matched,
            c.result.cases,
            known.join(", "),
            first.replace('|', "\\|").replace('\n', "\\n")
        );
    }
}

/// The Gate 2 vectors section, if that check ran.
fn gate2_vectors(s: &mut String, r: &VerifyReport) {
    if let Some(v) = &r.gate2_vectors {
        let _ = writeln!(
            s,
            "\n## Gate 2: vectors\n\n- texts: {} · min cosine {:.7} (on {:?}) · mean {:.7}",
            v.texts, v.min_cosine, v.worst_text, v.mean_cosine
        );
        let _ = writeln!(
            s,
            "- top-1 identical: {}/{} · n_embd {} · pooling {} · {:.1} ms/text",
            v.top1_identical, v.queries, v.n_embd, v.llama_pooling, v.llama_ms_per_text
        );
    }
}

/// The Gate 2 logits section and the as-shipped line, if those checks ran.
fn gate2_logits(s: &mut String, r: &VerifyReport) {
    if let Some(l) = &r.gate2_logits {
        let judged = if r.gate2_logits_as_shipped.is_some() {
            " (llama.cpp on the F32 expansion vs the reference on the same stored values)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "\n## Gate 2: logits{judged}\n\n- {} texts, {} positions · min cosine {:.6} (threshold {}) · argmax agreement {:.4} (threshold {}) · mean KLD {:.6} (threshold {}) · max KLD {:.6}",
            l.texts, l.positions, l.min_cosine, r.thresholds.min_logits_cosine, l.top1_agreement,
            r.thresholds.min_logits_top1_agreement, l.mean_kld, r.thresholds.max_mean_kld, l.max_kld
        );
    }
    if let Some(rt) = r.gate2_logits.as_ref().and_then(|l| l.routing.as_ref()) {
        let _ = writeln!(
            s,
            "- expert routing: {} of {} (token, layer) choices differ from the reference's, {} with a margin ≥ {} (rule: none such, at most {} near-ties); {} pairs after a difference not judged; smallest margin {:.2e}",
            rt.differing, rt.pairs, rt.differing_clear, super::routing::NEAR_TIE, super::routing::MAX_DIFFERING, rt.downstream, rt.min_margin
        );
    }
    if let Some(lc) = &r.gate2_long_context {
        let l = &lc.logits;
        let _ = writeln!(
            s,
            "- long context ({}): {} tokens, positions {}..{} · min cosine {:.6} · argmax agreement {:.4} · mean KLD {:.6} (same thresholds)",
            lc.why, lc.n_tokens, lc.first_scored, lc.n_tokens, l.min_cosine, l.top1_agreement, l.mean_kld
        );
    }
    if let Some(q) = &r.quality {
        let _ = writeln!(s, "\n## Quality against the source\n");
        for line in super::quality::lines(q) {
            let _ = writeln!(s, "- {line}");
        }
    } else if let Some(l) = &r.gate2_logits_as_shipped {
        let _ = writeln!(
            s,
            "- quality against the source (the file as shipped vs the reference on the HF weights; reported, not judged): min cosine {:.6} · argmax agreement {:.4} · mean KLD {:.6}",
            l.min_cosine, l.top1_agreement, l.mean_kld
        );
    }
}

/// The Gate 3 section, if that gate ran: files hashed against `SHA256SUMS`, and each shipped
/// GGUF's bytes and re-measured outputs.
fn gate3(s: &mut String, r: &VerifyReport) {
    if let Some(g) = &r.gate3 {
        let _ = writeln!(
            s,
            "\n## Gate 3: release\n\n- {} files hashed against SHA256SUMS\n\n| file | sha256 | verified bytes | outputs re-measured | identical |\n|---|---|---|---:|---|",
            g.files_hashed
        );
        for f in &g.files {
            let _ = writeln!(
                s,
                "| {} | `{}` | {} | {} | {} |",
                f.name, f.sha256, f.same_bytes_as_verified, f.remeasured, f.identical
            );
        }
    }
}

/// The blockers list and, when there are any, the notes.
fn blockers_and_notes(s: &mut String, r: &VerifyReport) {
    let _ = writeln!(s, "\n## Blockers ({})\n", r.blockers.len());
    for b in &r.blockers {
        let _ = writeln!(
            s,
            "- gate {} `{}` {}: {}",
            b.gate, b.code, b.subject, b.detail
        );
    }
    if !r.notes.is_empty() {
        let _ = writeln!(s, "\n## Notes\n");
        for n in &r.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
}

/// Writes report.json, report.md and report.html into `dir`.
pub fn write(dir: &Path, r: &VerifyReport) -> Result<()> {
    crate::paths::write_atomic(
        &dir.join("report.json"),
        serde_json::to_string_pretty(r)?.as_bytes(),
    )?;
    crate::paths::write_atomic(&dir.join("report.md"), markdown(r).as_bytes())?;
    crate::paths::write_atomic(
        &dir.join("report.html"),
        super::html::verify_page(r)?.as_bytes(),
    )
}
