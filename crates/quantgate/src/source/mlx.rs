//! Already-quantized MLX checkpoints as the source holds them (affine: value = scale·q + bias
//! per group of `group` consecutive inputs, q packed `bits` wide into U32 words; layout observed
//! in `docs/mlx-layout.md`): config.json's `quantization` table, the only source of bits and
//! group size, and the quantized modules found with their shapes checked against it. How they
//! are written is `convert::mlx`'s job.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use super::hf::{HfDir, SourceDtype, SourceTensor};

/// Bits and group size of one quantized module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Affine {
    pub bits: u32,
    pub group: usize,
}

/// config.json `quantization` (or `quantization_config`): defaults plus per-module entries
/// (`false` = left unquantized).
#[derive(Clone, Debug, Default)]
pub struct QuantConfig {
    pub default: Option<Affine>,
    pub modules: HashMap<String, Option<Affine>>,
}

impl QuantConfig {
    /// Reads the table; `None` when the config has none (not an MLX-quantized checkpoint).
    ///
    /// Errors: a mode other than `affine`, or bits/group_size missing or not positive integers.
    pub fn from_config(config: &serde_json::Value) -> Result<Option<QuantConfig>> {
        let (a, b) = (
            config.get("quantization"),
            config.get("quantization_config"),
        );
        if let (Some(a), Some(b)) = (a, b) {
            if a != b && b.get("quant_method").is_none() {
                bail!("config.json: quantization and quantization_config disagree");
            }
        }
        let q = match (a, b) {
            (Some(q), _) if q.is_object() => q,
            (Some(q), _) if !q.is_null() => bail!("config.json quantization: not an object"),
            (_, Some(q)) if q.is_object() && q.get("quant_method").is_none() => q,
            _ => return Ok(None),
        };
        let parse = |v: &serde_json::Value,
                     key: &str,
                     default_group: Option<usize>|
         -> Result<Affine> {
            if let Some(m) = v.get("mode").and_then(|m| m.as_str()) {
                if m != "affine" {
                    bail!("config.json quantization{key}: mode {m:?} (only affine is supported)");
                }
            }
            let bits = v["bits"]
                .as_u64()
                .filter(|b| (1..=8).contains(b))
                .ok_or_else(|| {
                    anyhow!("config.json quantization{key}: bits missing or not in 1..=8")
                })?;
            let group = match v["group_size"].as_u64() {
                Some(g) if g > 0 => g as usize,
                None if v["group_size"].is_null() && default_group.is_some() => {
                    default_group.unwrap_or(0)
                }
                _ => bail!("config.json quantization{key}: group_size missing or not positive"),
            };
            Ok(Affine {
                bits: bits as u32,
                group,
            })
        };
        let default = if q.get("bits").is_some() {
            Some(parse(q, "", None)?)
        } else {
            None
        };
        let mut modules = HashMap::new();
        for (k, v) in q.as_object().into_iter().flatten() {
            if ["bits", "group_size", "mode"].contains(&k.as_str()) {
                continue;
            }
            if v.is_object() {
                modules.insert(
                    k.clone(),
                    Some(parse(v, &format!(".{k}"), default.map(|d| d.group))?),
                );
            } else if v == &serde_json::Value::Bool(false) {
                modules.insert(k.clone(), None);
            } else {
                bail!("config.json quantization.{k}: {v} (a module entry is an object or false)");
            }
        }
        Ok(Some(QuantConfig { default, modules }))
    }

    /// The bits/group the metadata gives module `m` (`None` = unquantized).
    pub fn of(&self, m: &str) -> Option<Affine> {
        match self.modules.get(m) {
            Some(x) => *x,
            None => self.default,
        }
    }
}

/// One quantized module of the checkpoint with its three source tensors.
#[derive(Clone, Debug)]
pub struct AffineTensor {
    /// Module path, e.g. `model.layers.0.self_attn.q_proj`.
    pub module: String,
    /// Indices into `HfDir::tensors` of `.weight` (U32 codes), `.scales`, `.biases`.
    pub weight: usize,
    pub scales: usize,
    pub biases: usize,
    pub affine: Affine,
    /// Rows (output features) and inputs per row.
    pub out: usize,
    pub inn: usize,
}

/// The input features config.json implies for `module` (llama/qwen2/qwen3 layouts).
pub(crate) fn expected_inputs(hf: &HfDir, module: &str) -> Option<usize> {
    let hidden = hf.config_u64("hidden_size")? as usize;
    let local = module.rsplit('.').next()?;
    Some(match local {
        "q_proj" | "k_proj" | "v_proj" | "gate_proj" | "up_proj" | "embed_tokens" | "lm_head" => {
            hidden
        }
        "down_proj" => hf.config_u64("intermediate_size")? as usize,
        "o_proj" => {
            let heads = hf.config_u64("num_attention_heads")? as usize;
            let hd = hf
                .config_u64("head_dim")
                .map(|h| h as usize)
                .unwrap_or(hidden / heads);
            heads * hd
        }
        _ => return None,
    })
}

/// Finds every quantized module, checking shapes against the metadata. Returns the modules
/// and, separately, one blocker per inconsistent tensor (named, with the numbers).
pub fn find(hf: &HfDir, qc: &QuantConfig) -> (Vec<AffineTensor>, Vec<(String, String)>) {
    let idx: HashMap<&str, usize> = hf
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut out = Vec::new();
    let mut blockers = Vec::new();
    for (wi, t) in hf.tensors.iter().enumerate() {
        let Some(module) = t.name.strip_suffix(".weight") else {
            continue;
        };
        let scales = idx.get(format!("{module}.scales").as_str()).copied();
        let biases = idx.get(format!("{module}.biases").as_str()).copied();
        let packed = t.dtype == SourceDtype::U32;
        if !packed && scales.is_none() && biases.is_none() {
            continue;
        }
        let Some(affine) = module_affine(qc, t, module, packed, &mut blockers) else {
            continue;
        };
        let (Some(si), Some(bi)) = (scales, biases) else {
            let missing = if scales.is_none() { "scales" } else { "biases" };
            blockers.push((
                format!("{module}.{missing}"),
                format!("missing: a quantized module needs {module}.scales and {module}.biases"),
            ));
            continue;
        };
        let Some((rows, inn)) = code_dims(hf, t, module, affine, &mut blockers) else {
            continue;
        };
        let want = vec![rows, inn / affine.group];
        check_scales_biases(hf, module, [si, bi], &want, affine, &mut blockers);
        if blockers
            .iter()
            .any(|(n, _)| n.starts_with(module) && n[module.len()..].starts_with('.'))
        {
            continue;
        }
        out.push(AffineTensor {
            module: module.into(),
            weight: wi,
            scales: si,
            biases: bi,
            affine,
            out: rows,
            inn,
        });
    }
    // Scales or biases whose module has no weight.
    orphan_scales_biases(hf, &idx, &mut blockers);
    (out, blockers)
}

/// The bits/group of `module`'s packed weight `t`, or a blocker when config.json and the dtype
/// disagree about it being quantized.
fn module_affine(
    qc: &QuantConfig,
    t: &SourceTensor,
    module: &str,
    packed: bool,
    blockers: &mut Vec<(String, String)>,
) -> Option<Affine> {
    let mut block = |msg: String| blockers.push((format!("{module}.weight"), msg));
    let Some(affine) = qc.of(module) else {
        block(format!("stored as packed/quantized ({:?}) but config.json quantization leaves {module} unquantized", t.dtype));
        return None;
    };
    if !packed {
        block(format!(
            "config.json quantizes {module} ({} bits) but its weight is {:?}, not U32 codes",
            affine.bits, t.dtype
        ));
        return None;
    }
    Some(affine)
}

/// Rows and inputs per row of the codes `t`, or a blocker when their shape disagrees with
/// config.json.
fn code_dims(
    hf: &HfDir,
    t: &SourceTensor,
    module: &str,
    affine: Affine,
    blockers: &mut Vec<(String, String)>,
) -> Option<(usize, usize)> {
    let mut block = |msg: String| blockers.push((format!("{module}.weight"), msg));
    if t.shape.len() != 2 {
        block(format!(
            "codes have shape {:?}, expected 2-D [out, in·bits/32]",
            t.shape
        ));
        return None;
    }
    let (rows, words) = (t.shape[0], t.shape[1]);
    if rows == 0 || words == 0 {
        block(format!("codes have shape {:?}: an empty module", t.shape));
        return None;
    }
    let inn = words * 32 / affine.bits as usize;
    let Some(expected_in) = expected_inputs(hf, module) else {
        block("config.json does not say this module's input size; cannot check its shapes".into());
        return None;
    };
    if words * 32 % affine.bits as usize != 0 || inn != expected_in {
        block(format!(
            "config.json says {} bits, group {}: {words} U32 words per row hold {} codes, but the module has {expected_in} inputs",
            affine.bits, affine.group, words as f64 * 32.0 / affine.bits as f64
        ));
        return None;
    }
    if !inn.is_multiple_of(affine.group) {
        block(format!(
            "{inn} inputs are not a multiple of group {}",
            affine.group
        ));
        return None;
    }
    Some((rows, inn))
}

/// Blockers for a module's scales or biases (indices `[si, bi]`) whose shape is not `want` or
/// whose dtype is not a float.
fn check_scales_biases(
    hf: &HfDir,
    module: &str,
    [si, bi]: [usize; 2],
    want: &[usize],
    affine: Affine,
    blockers: &mut Vec<(String, String)>,
) {
    for (ti, what) in [(si, "scales"), (bi, "biases")] {
        let s = &hf.tensors[ti];
        if s.shape != want {
            blockers.push((
                format!("{module}.{what}"),
                format!(
                    "shape {:?}, expected {want:?} ([out, in/group] for {} bits, group {})",
                    s.shape, affine.bits, affine.group
                ),
            ));
        } else if !matches!(
            s.dtype,
            SourceDtype::F32 | SourceDtype::F16 | SourceDtype::BF16
        ) {
            blockers.push((
                format!("{module}.{what}"),
                format!("dtype {:?}, expected F32/F16/BF16", s.dtype),
            ));
        }
    }
}

/// Blockers for scales or biases whose module has no weight.
fn orphan_scales_biases(
    hf: &HfDir,
    idx: &HashMap<&str, usize>,
    blockers: &mut Vec<(String, String)>,
) {
    for t in &hf.tensors {
        for suffix in [".scales", ".biases"] {
            if let Some(module) = t.name.strip_suffix(suffix) {
                if !idx.contains_key(format!("{module}.weight").as_str()) {
                    blockers.push((
                        t.name.clone(),
                        format!("{module}.weight is missing (a quantized module needs its codes)"),
                    ));
                }
            }
        }
    }
}
