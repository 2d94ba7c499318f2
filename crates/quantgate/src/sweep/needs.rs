//! What each task asks its scheduler for: CPUs (the pinned thread count), memory and scratch
//! disk, estimated before any file exists from the source's tensor table.
//!
//! Memory comes from verify's own estimate ([`crate::verify::resources::estimate_need`]) on
//! the tensor table the file will have: the source tensors under their GGUF names, each 2-D
//! matrix in the ftype's main type (`LlamaFtype::base`), 1-D tensors in F32. llama.cpp's mixes
//! (Q4_K_M keeps some matrices in Q6_K) differ from that by a few percent of the repacked
//! term, which is why a margin of 1/8 is added. Disk is the files each task writes.

use serde::{Deserialize, Serialize};

use crate::source::arch::{self, Arch};
use crate::source::hf::HfDir;

/// What one task needs.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Needs {
    /// CPUs: the pinned llama.cpp thread count.
    pub cpus: u32,
    /// Memory, bytes (anonymous memory at the peak, plus 1/8).
    pub mem_bytes: u64,
    /// Scratch and output disk, bytes.
    pub disk_bytes: u64,
}

impl Needs {
    /// Memory in MiB, rounded up (sbatch `--mem`, Kubernetes `Mi`).
    pub fn mem_mib(&self) -> u64 {
        self.mem_bytes.div_ceil(1 << 20)
    }
}

/// The source's tensors as the GGUF of `ftype` will hold them (see the module doc).
pub fn planned_tensors(hf: &HfDir, ftype: gguf::LlamaFtype) -> Vec<gguf::TensorInfo> {
    let arch = hf
        .config
        .get("model_type")
        .and_then(|v| v.as_str())
        .and_then(|t| Arch::from_model_type(t).ok());
    hf.tensors
        .iter()
        .map(|t| {
            let name = arch
                .and_then(|a| arch::map_tensor(a, &t.name).ok().flatten())
                .map_or_else(|| t.name.clone(), |m| m.gguf);
            let dims: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
            let want = if dims.len() >= 2 {
                ftype.base
            } else {
                gguf::GgmlType::F32
            };
            // A row length the block does not divide stays F16 (llama.cpp's fallback).
            let (ggml_type, n_bytes) = match gguf::tensor_n_bytes(want, &dims) {
                Ok(n) => (want, n),
                Err(_) => (
                    gguf::GgmlType::F16,
                    gguf::tensor_n_bytes(gguf::GgmlType::F16, &dims).unwrap_or(0),
                ),
            };
            gguf::TensorInfo {
                name,
                ggml_type,
                dims,
                offset: 0,
                n_bytes,
            }
        })
        .collect()
}

/// Bytes of a file holding `tensors`.
pub fn file_bytes(tensors: &[gguf::TensorInfo]) -> u64 {
    // Tokenizer and metadata: a few MB at most for today's vocabularies.
    tensors.iter().map(|t| t.n_bytes).sum::<u64>() + (16 << 20)
}

fn with_margin(b: u64) -> u64 {
    b + b / 8
}

/// Converting: one tensor at a time in f32, the output written as it goes.
pub fn convert(hf: &HfDir, threads: u32, out: &[gguf::TensorInfo]) -> Needs {
    let largest = hf.tensors.iter().map(|t| t.n_elements() as u64).max();
    Needs {
        cpus: threads,
        mem_bytes: with_margin(4 * largest.unwrap_or(0) * 2 + (256 << 20)),
        disk_bytes: file_bytes(out),
    }
}

/// Quantizing: llama.cpp's quantizer holds a tensor in f32 and its quantized copy.
pub fn quantize(hf: &HfDir, threads: u32, out: &[gguf::TensorInfo]) -> Needs {
    let largest = hf.tensors.iter().map(|t| t.n_elements() as u64).max();
    Needs {
        cpus: threads,
        mem_bytes: with_margin(4 * largest.unwrap_or(0) * 3 + (256 << 20)),
        disk_bytes: file_bytes(out),
    }
}

/// Verifying: verify's estimate on the file's table; a block-quantized file is also expanded
/// to F32 on disk for the judged logits (Gate 2).
pub fn verify(threads: u32, file: &[gguf::TensorInfo], avx512: bool) -> Needs {
    let quantized = file
        .iter()
        .any(|t| t.ggml_type.block_size() > 1 && t.dims.len() >= 2);
    let expansion: u64 = if quantized {
        file.iter()
            .map(|t| t.dims.iter().product::<u64>() * 4)
            .sum()
    } else {
        0
    };
    Needs {
        cpus: threads,
        mem_bytes: with_margin(crate::verify::resources::estimate_need(file, avx512)),
        disk_bytes: expansion + (64 << 20),
    }
}

/// A release verifies each file again and copies it: the largest verify, and every file.
pub fn release(verifies: &[Needs], files: u64, threads: u32) -> Needs {
    Needs {
        cpus: threads,
        mem_bytes: verifies.iter().map(|n| n.mem_bytes).max().unwrap_or(0),
        disk_bytes: verifies.iter().map(|n| n.disk_bytes).max().unwrap_or(0) + files,
    }
}

/// A protocol run: its steps' sizes are not known before its models are; a flat 4 GiB and
/// 8 GiB of disk, enough for the 135M–0.5B protocols of this repository.
pub fn protocol(threads: u32) -> Needs {
    Needs {
        cpus: threads,
        mem_bytes: 4 << 30,
        disk_bytes: 8 << 30,
    }
}
