//! The HF-source layer: everything read from an HF checkpoint folder, read once and below both
//! `convert` (which writes) and `verify`/`release`/`eval` (which read through here, never
//! through `convert`). config.json in both transformers generations (`fields`, `rope`,
//! `declared`), the architecture table (`arch`), the tensors (`hf`, `mlx` for MLX-quantized
//! modules), the tokenizer files (`tokenizer`, `vocab`, `spm`), chat templates, the generation
//! config, the model card (`card`), what a release ships from the folder (`shipped`) and the
//! Q/K row permutation (`permute`).

pub mod arch;
pub mod card;
pub mod chat_template;
pub mod declared;
pub mod fields;
pub mod generation;
pub mod hf;
pub mod hparams;
pub mod longrope;
pub mod mlx;
pub mod permute;
pub mod rope;
pub mod shipped;
pub mod spm;
pub mod tokenizer;
pub mod vocab;

use anyhow::{anyhow, Context, Result};

use arch::Arch;
use hf::HfDir;

/// Reads config.json's `model_type`.
pub fn arch_of(hf: &HfDir) -> Result<Arch> {
    let t = hf.config["model_type"]
        .as_str()
        .ok_or_else(|| anyhow!("{}: config.json has no model_type", hf.dir.display()))?;
    Arch::from_model_type(t).with_context(|| format!("{}", hf.dir.join("config.json").display()))
}
