//! Mixture-of-experts tensors: each layer's per-expert source tensors
//! (`mlp.experts.E.{gate,up,down}_proj.weight`) stacked into llama.cpp's 3-D
//! `ffn_{gate,up,down}_exps` (ne `[in, out, n_expert]`; expert `e` is the `e`-th slab, so the
//! stacked bytes are the experts' bytes one after another). They are planned when the layer's
//! last expert tensor has been read, down, gate, up, as convert_hf_to_gguf.py
//! (`Qwen2MoeModel.modify_tensors`, `torch.stack(datas, dim=0)`) writes them.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};

use super::{planned, storage_rule, OutType, PlannedTensor};
use crate::source::arch::{Arch, Mapped};
use crate::source::hf::HfDir;

/// The stacked tensors of one layer, filled as their members are read.
#[derive(Default)]
struct Layer {
    /// GGUF name → source index of each expert (`None` until read).
    members: BTreeMap<String, Vec<Option<usize>>>,
    /// Members read so far.
    seen: usize,
}

/// Collects expert tensors until a layer is complete.
pub(super) struct Stacker {
    n_expert: usize,
    layers: BTreeMap<String, Layer>,
}

/// The projections stacked per layer, in the order the peer writes them.
const ORDER: [&str; 3] = ["ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"];

impl Stacker {
    /// The expert count of `hf`'s config (`num_local_experts`, else `num_experts`; 0 when it
    /// has neither, so that any expert tensor is an error).
    pub(super) fn new(hf: &HfDir) -> Stacker {
        let n = hf
            .config_u64("num_local_experts")
            .or_else(|| hf.config_u64("num_experts"))
            .unwrap_or(0);
        Stacker {
            n_expert: n as usize,
            layers: BTreeMap::new(),
        }
    }

    /// Adds source tensor `i` (expert `m.expert` of `m.gguf`); returns the layer's stacked
    /// tensors once its last member is in, else nothing.
    ///
    /// Errors: an expert index at or past the expert count, a tensor read twice, or members
    /// of one stack that differ in shape or dtype (each naming the tensors).
    pub(super) fn add(
        &mut self,
        hf: &HfDir,
        (arch, outtype): (Arch, OutType),
        i: usize,
        m: &Mapped,
        seen: &mut std::collections::HashSet<String>,
    ) -> Result<Vec<(usize, PlannedTensor)>> {
        let e = m.expert.expect("an expert tensor") as usize;
        let name = &hf.tensors[i].name;
        if e >= self.n_expert {
            bail!(
                "{}: tensor {name} is expert {e}, but config.json declares {} experts (num_experts)",
                hf.dir.display(),
                self.n_expert
            );
        }
        let layer_key = m.gguf.split('.').take(2).collect::<Vec<_>>().join(".");
        let n = self.n_expert;
        let layer = self.layers.entry(layer_key.clone()).or_default();
        let slot = &mut layer
            .members
            .entry(m.gguf.clone())
            .or_insert_with(|| vec![None; n])[e];
        if slot.replace(i).is_some() {
            bail!("{}: tensor {name} appears twice", hf.dir.display());
        }
        layer.seen += 1;
        if layer.seen < ORDER.len() * n {
            return Ok(Vec::new());
        }
        let layer = self.layers.remove(&layer_key).expect("present");
        let mut stacks: Vec<(String, Vec<Option<usize>>)> = layer.members.into_iter().collect();
        stacks.sort_by_key(|(g, _)| ORDER.iter().position(|o| g.contains(o)));
        stacks
            .into_iter()
            .map(|(g, members)| stack(hf, (arch, outtype), g, members, seen))
            .collect()
    }

    /// Errors: a layer whose experts are not all present, naming the first missing one.
    pub(super) fn finish(self, hf: &HfDir) -> Result<()> {
        let Some((layer, l)) = self.layers.iter().next() else {
            return Ok(());
        };
        for (g, members) in &l.members {
            if let Some(e) = members.iter().position(Option::is_none) {
                bail!(
                    "{}: {g}: expert {e} of {layer} is missing from the checkpoint ({} experts declared)",
                    hf.dir.display(),
                    self.n_expert
                );
            }
        }
        bail!(
            "{}: {layer}: the experts' gate_proj, up_proj and down_proj are not all present",
            hf.dir.display()
        )
    }
}

/// The planned stacked tensor `gguf` of `members` (source indices by expert, all present).
fn stack(
    hf: &HfDir,
    (arch, outtype): (Arch, OutType),
    gguf: String,
    members: Vec<Option<usize>>,
    seen: &mut std::collections::HashSet<String>,
) -> Result<(usize, PlannedTensor)> {
    let members: Vec<usize> = members
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow!("{gguf}: an expert is missing"))?;
    let first = &hf.tensors[members[0]];
    for &j in &members[1..] {
        let t = &hf.tensors[j];
        if t.shape != first.shape || t.dtype != first.dtype {
            bail!(
                "{}: {} ({:?}, {:?}) and {} ({:?}, {:?}) are stacked into {gguf} and must agree in shape and dtype",
                hf.dir.display(),
                first.name,
                first.shape,
                first.dtype,
                t.name,
                t.shape,
                t.dtype
            );
        }
    }
    let mut ne: Vec<u64> = first.shape.iter().rev().map(|d| *d as u64).collect();
    ne.push(members.len() as u64);
    let m = Mapped {
        gguf: gguf.clone(),
        force_f32: false,
        expert: None,
    };
    let (ty, rule) = storage_rule(&m, &ne, outtype);
    let hf_name = first.name.replacen(".experts.0.", ".experts.*.", 1);
    let mut p = planned(seen, hf, arch, &hf_name, gguf, ty, ne, rule)?;
    p.experts = members.clone();
    Ok((members[0], p))
}
