//! GPTQ, AWQ and compressed-tensors checkpoints made by the real tools from the SmolLM2 fixture
//! (scripts/build-quant-fixtures.sh: auto-round 0.15.1, llm-compressor 0.14.0.1): every
//! quantized module is repacked into a ggml block type without loss, Gate 1 proves it bit for
//! bit through the reference's own unpacker, and verify says GO. Tampered quantization metadata
//! and tensors are a convert error naming the tensor, or NO-GO.

use crate::common;

use std::path::{Path, PathBuf};

use quantgate::convert::{self, ConvertOptions, OutType};
use quantgate::verify::{BlockerCode, Verdict};

fn fixture(name: &str) -> PathBuf {
    let p = common::hf(&format!("SmolLM2-135M-Instruct-{name}"));
    assert!(
        p.join(".complete").exists(),
        "{}: run scripts/build-quant-fixtures.sh",
        p.display()
    );
    p
}

fn convert(dir: &Path, out: &Path) -> anyhow::Result<convert::ConvertReport> {
    convert::convert(
        dir,
        out,
        &ConvertOptions {
            outtype: OutType::F16,
            vocab_only: false,
            fallback: None,
            allow_nonfinite: false,
        },
    )
}

#[test]
fn every_fixture_repacks_exactly_and_verifies_go() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, ty) in [
        ("gptq-4-g128-sym", "Q4_0"),
        ("gptq-4-g32-asym", "Q5_0"),
        ("gptq-8-g128-sym", "Q8_0"),
        ("awq-4-g64-asym", "Q5_0"),
        ("awq-4-g32-sym", "Q4_0"),
        ("ct-4-g64-sym", "Q4_0"),
        ("ct-4-g32-asym", "Q5_0"),
        ("ct-8-channel-sym", "Q8_0"),
    ] {
        let dir = fixture(name);
        let out = tmp.path().join(format!("{name}.gguf"));
        let c = convert(&dir, &out).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let quantized: Vec<_> = c.tensors.iter().filter(|t| t.ggml_type == ty).collect();
        // 30 layers × 7 linear modules; the embedding stays BF16 (tied, not quantized).
        assert_eq!(quantized.len(), 210, "{name}");
        assert!(quantized.iter().all(|t| t.rule.contains("exact")), "{name}");
        assert!(
            c.fallback_errors.is_empty(),
            "{name}: {:?}",
            c.fallback_errors
        );
        let r = common::verify_with(&dir, &out, None);
        assert_eq!(r.verdict, Verdict::Go, "{name}: {:?}", r.blockers);
        assert_eq!(r.gate1.bit_identical, 272, "{name}");
        let a = r.gate1_affine.as_ref().expect("the packed Gate 1 ran");
        assert_eq!(
            (
                a.modules,
                a.values_identical,
                a.fields_identical,
                a.fallback_tensors
            ),
            (210, 210, 210, 0),
            "{name}"
        );
    }
}

/// A copy of `name` with config.json's quantization_config edited.
fn with_config(tmp: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let dir = tmp.join(name);
    common::copy_hf(&fixture(name), &dir);
    common::edit_config(&dir, |v| edit(&mut v["quantization_config"]));
    dir
}

/// A copy of the GPTQ 4-bit g128 fixture in `tmp/name` whose header declares `tensor` with
/// `shape` (the data untouched).
fn with_shape(tmp: &Path, name: &str, tensor: &str, shape: [u64; 2]) -> PathBuf {
    let dir = tmp.join(name);
    common::copy_hf(&fixture("gptq-4-g128-sym"), &dir);
    common::rewrite_safetensors(
        &dir,
        |h| h.get_mut(tensor).unwrap()["shape"] = serde_json::json!(shape),
        |_, _| {},
    );
    dir
}

#[test]
fn tampered_quantization_configs_are_refused_or_no_go() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.gguf");
    convert(&fixture("gptq-4-g128-sym"), &good).unwrap();
    // Bits and group size come from the config: a wrong one disagrees with the shapes.
    for (what, edit) in [
        (
            "bits",
            Box::new(|q: &mut serde_json::Value| q["bits"] = 8.into()) as Box<dyn Fn(&mut _)>,
        ),
        (
            "group_size",
            Box::new(|q: &mut serde_json::Value| q["group_size"] = 64.into()),
        ),
    ] {
        let dir = with_config(tmp.path(), "gptq-4-g128-sym", edit);
        let e = convert(&dir, &tmp.path().join("x.gguf")).unwrap_err();
        assert!(
            format!("{e:#}").contains(".qweight")
                || format!("{e:#}").contains(".scales")
                || format!("{e:#}").contains(".qzeros"),
            "{what}: {e:#}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // The zero-point convention: read as v2, every zero is one less, so the file made from the
    // real (v1) source no longer holds the source's values.
    let dir = with_config(tmp.path(), "gptq-4-g128-sym", |q| {
        q["checkpoint_format"] = "gptq_v2".into()
    });
    let r = common::verify_with(&dir, &good, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        r.blockers
            .iter()
            .any(|b| b.code == BlockerCode::TensorBits && b.subject.contains("attn_q")),
        "{:?}",
        r.blockers
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // compressed-tensors symmetry: an asymmetric checkpoint declared symmetric has a zero
    // point the config does not explain.
    let ct_good = tmp.path().join("ct.gguf");
    convert(&fixture("ct-4-g32-asym"), &ct_good).unwrap();
    let dir = with_config(tmp.path(), "ct-4-g32-asym", |q| {
        q["config_groups"]["group_0"]["weights"]["symmetric"] = true.into()
    });
    let e = convert(&dir, &tmp.path().join("y.gguf")).unwrap_err();
    assert!(format!("{e:#}").contains(".weight_zero_point"), "{e:#}");
    let r = common::verify_with(&dir, &ct_good, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        r.blockers
            .iter()
            .any(|b| b.code == BlockerCode::SourceQuantization
                && b.detail.contains("weight_zero_point")),
        "{:?}",
        r.blockers
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn act_order_is_refused_unless_trivial() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.gguf");
    convert(&fixture("gptq-4-g128-sym"), &good).unwrap();
    let q = "model.layers.0.self_attn.q_proj";
    // Act-order: g_idx that is not i / group has no exact block type.
    let dir = tmp.path().join("actorder");
    common::copy_hf(&fixture("gptq-4-g128-sym"), &dir);
    common::rewrite_safetensors(
        &dir,
        |_| {},
        |h, data| {
            let at = common::data_start(h, &format!("{q}.g_idx"));
            // Inputs 0 and 128 swap groups.
            data[at..at + 4].copy_from_slice(&1i32.to_le_bytes());
            data[at + 512..at + 516].copy_from_slice(&0i32.to_le_bytes());
        },
    );
    let e = convert(&dir, &tmp.path().join("z.gguf")).unwrap_err();
    assert!(
        format!("{e:#}").contains(&format!("{q}.weight")) && format!("{e:#}").contains("act-order"),
        "{e:#}"
    );
    let r = common::verify_with(&dir, &good, None);
    assert_eq!(r.verdict, Verdict::NoGo, "{:?}", r.blockers);

    // desc_act declared: with a trivial g_idx the values are unchanged (GO); without g_idx
    // the act-order cannot be read (a convert error naming the module's g_idx).
    let dir = with_config(tmp.path(), "gptq-4-g128-sym", |q| {
        q["desc_act"] = true.into()
    });
    assert_eq!(common::verify_with(&dir, &good, None).verdict, Verdict::Go);
    common::rewrite_safetensors(
        &dir,
        |h| {
            for (k, v) in std::mem::take(h) {
                h.insert(k.replace(".g_idx", ".g_idx_renamed"), v);
            }
        },
        |_, _| {},
    );
    let e = convert(&dir, &tmp.path().join("v.gguf")).unwrap_err();
    assert!(format!("{e:#}").contains(".g_idx is missing"), "{e:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tensors_of_the_wrong_shape_are_refused_and_no_go() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.gguf");
    convert(&fixture("gptq-4-g128-sym"), &good).unwrap();
    let q = "model.layers.0.self_attn.q_proj";
    // A scales tensor of the wrong shape.
    let dir = with_shape(tmp.path(), "scales", &format!("{q}.scales"), [576, 5]);
    let e = convert(&dir, &tmp.path().join("u.gguf")).unwrap_err();
    assert!(format!("{e:#}").contains(&format!("{q}.scales")), "{e:#}");
    assert_eq!(
        common::verify_with(&dir, &good, None).verdict,
        Verdict::NoGo
    );

    // A qzeros tensor of the wrong shape.
    let dir = with_shape(tmp.path(), "shapes", &format!("{q}.qzeros"), [72, 5]);
    let e = convert(&dir, &tmp.path().join("w.gguf")).unwrap_err();
    assert!(format!("{e:#}").contains(&format!("{q}.qzeros")), "{e:#}");
    let r = common::verify_with(&dir, &good, None);
    assert_eq!(r.verdict, Verdict::NoGo);
}

/// gptq_v2 stores the zero itself where v1 stores zero − 1. The asymmetric v1 fixture
/// re-encoded as v2 (every qzeros field + 1; no v1 field is 15 here, so none wraps) converts to
/// the same tensors, and verifies GO against the v2 folder.
#[test]
fn gptq_v2_reencoding_of_the_v1_fixture_gives_the_same_tensors_and_go() {
    let tmp = tempfile::tempdir().unwrap();
    let v1 = fixture("gptq-4-g32-asym");
    let v2 = with_config(tmp.path(), "gptq-4-g32-asym", |q| {
        q["checkpoint_format"] = "gptq_v2".into()
    });
    let fields = std::cell::Cell::new(0usize);
    common::rewrite_safetensors(
        &v2,
        |_| {},
        |h, data| {
            for (name, t) in h.iter().filter(|(n, _)| n.ends_with(".qzeros")) {
                let r = &t["data_offsets"];
                let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                for w in data[a as usize..b as usize].chunks_exact_mut(4) {
                    let mut x = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    let mut y = 0u32;
                    for k in 0..8 {
                        let f = (x & 15) + 1;
                        assert!(f <= 15, "{name}: a v1 field of 15 cannot be re-encoded");
                        y |= f << (4 * k);
                        x >>= 4;
                    }
                    w.copy_from_slice(&y.to_le_bytes());
                    fields.set(fields.get() + 8);
                }
            }
        },
    );
    // 30 layers × 7 modules, 18 groups of 32 inputs (576) or 48 (1536) per output.
    assert_eq!(
        fields.get(),
        30 * (576 * 18 * 2 + 192 * 18 * 2 + 1536 * 18 * 2 + 576 * 48)
    );
    let (a, b) = (tmp.path().join("v1.gguf"), tmp.path().join("v2.gguf"));
    convert(&v1, &a).unwrap();
    convert(&v2, &b).unwrap();
    let (ga, gb) = (gguf::Gguf::open(&a).unwrap(), gguf::Gguf::open(&b).unwrap());
    assert_eq!(ga.header.tensors.len(), gb.header.tensors.len());
    for (x, y) in ga.header.tensors.iter().zip(&gb.header.tensors) {
        assert_eq!(x.name, y.name);
        assert!(ga.tensor_data(x) == gb.tensor_data(y), "{}", x.name);
    }
    let r = common::verify_with(&v2, &b, None);
    assert_eq!(r.verdict, Verdict::Go, "{:?}", r.blockers);
    assert_eq!(r.gate1_affine.as_ref().unwrap().values_identical, 210);
    // The v2 data declared v1: every zero reads one too many, so the file is NO-GO.
    common::edit_config(&v2, |v| {
        v["quantization_config"]["checkpoint_format"] = "gptq".into()
    });
    let r = common::verify_with(&v2, &b, None);
    assert_eq!(r.verdict, Verdict::NoGo);
    assert!(
        r.blockers.iter().any(|x| x.code == BlockerCode::TensorBits),
        "{:?}",
        r.blockers
    );
}
