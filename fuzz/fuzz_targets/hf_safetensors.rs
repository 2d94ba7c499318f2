//! Fuzz target: any bytes as the JSON header of `model.safetensors` in an otherwise valid
//! BERT folder. The file is the u64 header length, the fuzz input, then the base file's data
//! section unchanged, so every run reaches the header parser and the offset/shape/dtype
//! checks against real data. `convert` must end in Ok or an error, never a panic,
//! out-of-bounds read or huge allocation (a header may claim any shape and offsets).
#![no_main]

mod hf_common;

libfuzzer_sys::fuzz_target!(|header: &[u8]| {
    let data = hf_common::base_data_section();
    let mut file = Vec::with_capacity(8 + header.len() + data.len());
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(header);
    file.extend_from_slice(data);
    hf_common::convert_with("model.safetensors", &file)
});
