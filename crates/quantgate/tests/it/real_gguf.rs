//! Tests on real GGUF files made by llama.cpp's tools (fetched by scripts/fetch-models.sh):
//! every tensor bit-identical to ggml's to_float, byte-identical round trip, hostile
//! mutations of the real header, and the CLI's exit codes.

use crate::common;

use std::path::PathBuf;

use gguf::{Gguf, Header};
use quantgate::{check_dequant, hash};

struct Model {
    file: &'static str,
    sha256: &'static str,
    tensors: u64,
    types: &'static [&'static str],
}

const MODELS: &[Model] = &[
    Model {
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        tensors: 272,
        types: &["F32", "Q4_1", "Q8_0"],
    },
    Model {
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tensors: 236,
        types: &["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"],
    },
];

fn path(m: &Model) -> PathBuf {
    common::model(m.file)
}

#[test]
fn inputs_are_the_pinned_files() {
    for m in MODELS {
        assert_eq!(hash::sha256_file(&path(m)).unwrap(), m.sha256, "{}", m.file);
    }
}

#[test]
fn every_tensor_of_real_files_is_bit_identical_to_ggml() {
    for m in MODELS {
        let g = Gguf::open(path(m)).unwrap();
        let r = quantgate::inspect::inspect(&g, String::new());
        let types: Vec<&str> = r.type_histogram.keys().map(String::as_str).collect();
        assert_eq!(types, m.types, "{}", m.file);
        let c = check_dequant::check_dequant(&g, |_, _| {});
        assert_eq!(c.tensors, m.tensors, "{}", m.file);
        assert_eq!(
            c.identical, m.tensors,
            "{}: {:?}",
            m.file, c.first_difference
        );
        assert!(c.unsupported.is_empty() && c.first_difference.is_none());
        assert_eq!(c.elements, r.n_elements);
        assert!(c.passed());
    }
}

#[test]
fn real_files_round_trip_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    for m in MODELS {
        let g = Gguf::open(path(m)).unwrap();
        let out = dir.path().join(m.file);
        let s = g.to_writer().write_to_path(&out).unwrap();
        assert_eq!(
            s.file_bytes,
            std::fs::metadata(path(m)).unwrap().len(),
            "{}",
            m.file
        );
        assert_eq!(hash::sha256_file(&out).unwrap(), m.sha256, "{}", m.file);
    }
}

#[test]
fn truncated_real_headers_are_errors_naming_the_field() {
    let m = &MODELS[1];
    let bytes = std::fs::read(path(m)).unwrap();
    let h = Header::parse(&bytes).unwrap();
    let header_end = h.data_offset as usize;
    // Every offset in the first 4 KiB, then ~2000 offsets spread over the rest of the header
    // (6.5 MB of metadata: tokens, scores, token types), then inside the tensor data.
    let mut cuts: Vec<usize> = (0..4096).collect();
    cuts.extend((4096..header_end).step_by(header_end / 2000));
    cuts.extend([header_end - 1, header_end, header_end + 1, bytes.len() - 1]);
    for cut in cuts {
        let e = Header::parse(&bytes[..cut])
            .expect_err("truncated header accepted")
            .to_string();
        assert!(
            e.contains("truncated") || e.contains("cannot fit"),
            "cut at {cut}: {e}"
        );
        assert!(e.contains("byte offset"), "cut at {cut}: {e}");
    }
}

#[test]
fn hostile_mutations_of_a_real_file_are_clear_errors() {
    let m = &MODELS[0];
    let good = std::fs::read(path(m)).unwrap();
    let h = Header::parse(&good).unwrap();
    let find = |needle: &[u8]| {
        good.windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    // First tensor info: name length at (name pos − 8).
    let first = &h.tensors[0];
    let name_at = find(first.name.as_bytes());
    let type_at = name_at + first.name.len() + 4 + 8 * first.dims.len();
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "bad magic",
            Box::new(|b| b[..4].copy_from_slice(b"GGML")),
            "bad magic",
        ),
        (
            "unknown type id",
            Box::new(move |b| b[type_at..type_at + 4].copy_from_slice(&77u32.to_le_bytes())),
            "unknown ggml type id 77",
        ),
        (
            "tensor offset beyond EOF",
            Box::new(move |b| {
                let off_at = type_at + 4;
                b[off_at..off_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes())
            }),
            "data offset 1099511627776 != 0",
        ),
        (
            "absurd array length",
            Box::new(|b| {
                let key = b"tokenizer.ggml.tokens";
                let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 8;
                b[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes())
            }),
            "array length",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (what, mutate, want) in cases {
        let mut b = good.clone();
        mutate(&mut b);
        let p = dir.path().join("bad.gguf");
        std::fs::write(&p, &b).unwrap();
        let e = Gguf::open(&p)
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"))
            .to_string();
        assert!(e.contains(want), "{what}: {e}");
        assert!(e.contains("bad.gguf"), "{what}: error names the file: {e}");
        // The CLI reports it on stderr with exit status 2, never a panic.
        let out = common::qg()
            .args(["inspect", p.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{what}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("error: ") && stderr.contains(want),
            "{what}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    }
}

#[test]
fn cli_inspect_check_dequant_exits_0_and_reports_counts() {
    for m in MODELS {
        let out = common::qg()
            .args(["inspect", "--check-dequant", path(m).to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        let want = format!("check-dequant: {0}/{0} tensors bit-identical", m.tensors);
        assert!(stdout.contains(&want), "{stdout}");
        assert!(stdout.contains(&format!("sha256:        {}", m.sha256)));
        assert!(stdout.contains("runtime: llama-cpp-sys-2 =0.1.161 (ggml 0.26.0"));
    }
    let out = common::qg()
        .args(["inspect", "--json", path(&MODELS[1]).to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["inspect"]["architecture"], "gemma3");
    assert_eq!(v["inspect"]["file_bytes"], 253113024u64);
    assert_eq!(v["inspect"]["type_histogram"]["Q6_K"]["tensors"], 9);
    assert_eq!(v["check_dequant"], serde_json::Value::Null);
    let tokens = &v["inspect"]["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv[0] == "tokenizer.ggml.tokens")
        .unwrap()[1];
    assert_eq!(tokens["len"], 262144);
    assert_eq!(tokens["array"], "str");
}
