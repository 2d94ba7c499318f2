//! The eval path (`quantgate eval ppl`, what protocol runs use) against llama.cpp's own
//! `llama-perplexity` on the real-weight fixtures, F16 and Q4_K_M (`convert`, then `quantize`):
//! wiki.test.raw, c = 512, 4 chunks, 2 threads.
//!
//! Peer figures, recorded 2026-12-02 on an AVX-512 host (Sapphire Rapids) with the peer of
//! `quantgate bench` (llama.cpp of llama-cpp-sys-2 =0.1.161 with tools/ of llama-cpp-python 0.3.36,
//! default CMake: Release, GGML_NATIVE=ON, BUILD_SHARED_LIBS=ON, GGML_OPENMP=ON):
//!
//! | fixture | F16 | Q4_K_M |
//! |---|---|---|
//! | SmolLM2-135M-Instruct | 22.7590 ± 2.27719 | 23.8852 ± 2.40420 |
//! | Qwen2.5-Coder-0.5B-Instruct | 30.8540 ± 3.37442 | 30.7358 ± 3.35145 |
//!
//! The native build runs AVX-512 kernels, so the comparison pins our `zen4` CPU variant (where
//! this host runs it) and requires the same `Final estimate` line. Under `haswell` (AVX2,
//! runnable anywhere the tests run) the kernels differ: those lines are our own, recorded the
//! same day, and guard against regressions only.
//!
//! The seeded Llama 3.2 (llama3 RoPE) and Qwen3-MoE fixtures, recorded 2026-12-03 on an AVX-512
//! host (AMD EPYC, zen4 variant) with the same peer build (`quantgate bench ppl`, which prints
//! both lines side by side): equal in every digit.
//!
//! | fixture | F16 | Q4_K_M |
//! |---|---|---|
//! | Llama-3.2-1B-Instruct-2L-seeded | 136573.7784 ± 2005.73834 | 137168.9083 ± 2040.21222 |
//! | Qwen3-30B-A3B-2L-seeded | 171324.9293 ± 2143.85951 | 170431.7292 ± 2157.11377 |
//!
//! The seeded Phi-4-mini (phi3, LongRoPE: 512-token chunks, below the original 4096, so both
//! rotate with the short factors), recorded 2026-12-03 on an AVX-512 host (Intel Xeon, zen4
//! variant; the peer's native build with `-mno-amx-*`) with the same peer build, equal in every
//! digit:
//!
//! | fixture | F16 | Q4_K_M |
//! |---|---|---|
//! | Phi-4-mini-2L-seeded | 138466.6811 ± 3366.04961 | 137633.5334 ± 3363.09774 |
//!
//! (Random weights: PPL near the vocabulary size.)
//!
//! gemma-3-270m (scripts/build-gemma3-fixture.sh), recorded 2026-12-02 on an AVX2-only host
//! (AMD EPYC, no AVX-512) with the same peer build: its native build compiles the AVX2 kernels,
//! and `llama-perplexity` printed exactly our `haswell` lines, F16 15.2304 ± 1.56544 and
//! Q4_K_M 15.3699 ± 1.57853 — so there the haswell comparison is the peer comparison.

use crate::common;

use std::path::Path;

use quantgate::convert::OutType;

const WIKI_ARGS: [&str; 6] = ["-c", "512", "--chunks", "4", "-t", "2"];

fn final_line(variant: &str, gguf: &Path) -> String {
    let out = common::qg()
        .env(llama_runtime::CPU_VARIANT_ENV, variant)
        .args(["eval", "ppl"])
        .arg(gguf)
        .arg("-f")
        .arg(common::wiki())
        .args(WIKI_ARGS)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find(|l| l.starts_with("Final estimate"))
        .unwrap_or_else(|| panic!("no Final estimate line: {stdout}"))
        .to_string()
}

/// `[(type, peer line, our haswell line)]` for the fixture `name`.
fn parity(name: &str, want: [(&str, &str, &str); 2]) {
    let tmp = tempfile::tempdir().unwrap();
    let f16 = tmp.path().join("F16.gguf");
    common::convert_to(&common::hf(name), &f16, OutType::F16, false);
    let q = tmp.path().join("Q4_K_M.gguf");
    common::quantize_to(&f16, &q, "Q4_K_M");
    let zen4 = llama_runtime::scores()
        .iter()
        .any(|(v, s)| v == "zen4" && *s > 0);
    for (ty, peer, haswell) in want {
        let gguf = tmp.path().join(format!("{ty}.gguf"));
        assert_eq!(final_line("haswell", &gguf), haswell, "{name} {ty} haswell");
        if zen4 {
            assert_eq!(
                final_line("zen4", &gguf),
                peer,
                "{name} {ty}: llama-perplexity"
            );
        } else {
            eprintln!("{name} {ty}: this host cannot run the zen4 variant; peer line not compared");
        }
    }
}

#[test]
fn smollm2_eval_ppl_equals_llama_perplexity() {
    parity(
        "SmolLM2-135M-Instruct",
        [
            (
                "F16",
                "Final estimate: PPL = 22.7590 +/- 2.27719",
                "Final estimate: PPL = 22.7590 +/- 2.27725",
            ),
            (
                "Q4_K_M",
                "Final estimate: PPL = 23.8852 +/- 2.40420",
                "Final estimate: PPL = 23.8073 +/- 2.39992",
            ),
        ],
    );
}

#[test]
fn qwen2_eval_ppl_equals_llama_perplexity() {
    parity(
        "Qwen2.5-Coder-0.5B-Instruct",
        [
            (
                "F16",
                "Final estimate: PPL = 30.8540 +/- 3.37442",
                "Final estimate: PPL = 30.8525 +/- 3.37416",
            ),
            (
                "Q4_K_M",
                "Final estimate: PPL = 30.7358 +/- 3.35145",
                "Final estimate: PPL = 30.7558 +/- 3.35179",
            ),
        ],
    );
}

#[test]
fn gemma3_eval_ppl_equals_llama_perplexity() {
    // Peer lines of an AVX2 host, where the peer's kernels are our haswell variant's.
    let f16 = "Final estimate: PPL = 15.2304 +/- 1.56544";
    let q4 = "Final estimate: PPL = 15.3699 +/- 1.57853";
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("F16.gguf");
    common::convert_to(&common::hf("gemma-3-270m"), &f, OutType::F16, false);
    let q = tmp.path().join("Q4_K_M.gguf");
    common::quantize_to(&f, &q, "Q4_K_M");
    assert_eq!(
        final_line("haswell", &f),
        f16,
        "gemma3 F16: llama-perplexity"
    );
    assert_eq!(
        final_line("haswell", &q),
        q4,
        "gemma3 Q4_K_M: llama-perplexity"
    );
}

#[test]
fn llama3_eval_ppl_equals_llama_perplexity() {
    parity(
        "Llama-3.2-1B-Instruct-2L-seeded",
        [
            (
                "F16",
                "Final estimate: PPL = 136573.7784 +/- 2005.73834",
                "Final estimate: PPL = 136572.8142 +/- 2005.76883",
            ),
            (
                "Q4_K_M",
                "Final estimate: PPL = 137168.9083 +/- 2040.21222",
                "Final estimate: PPL = 137167.4460 +/- 2039.43230",
            ),
        ],
    );
}

#[test]
fn qwen3moe_eval_ppl_equals_llama_perplexity() {
    parity(
        "Qwen3-30B-A3B-2L-seeded",
        [
            (
                "F16",
                "Final estimate: PPL = 171324.9293 +/- 2143.85951",
                "Final estimate: PPL = 171324.6432 +/- 2143.87146",
            ),
            (
                "Q4_K_M",
                "Final estimate: PPL = 170431.7292 +/- 2157.11377",
                "Final estimate: PPL = 170423.7668 +/- 2155.81063",
            ),
        ],
    );
}

#[test]
fn phi3_longrope_eval_ppl_equals_llama_perplexity() {
    parity(
        "Phi-4-mini-2L-seeded",
        [
            (
                "F16",
                "Final estimate: PPL = 138466.6811 +/- 3366.04961",
                "Final estimate: PPL = 138465.5978 +/- 3365.93463",
            ),
            (
                "Q4_K_M",
                "Final estimate: PPL = 137633.5334 +/- 3363.09774",
                "Final estimate: PPL = 137617.7305 +/- 3365.19604",
            ),
        ],
    );
}
