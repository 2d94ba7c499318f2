//! Fuzz target: any byte string given to the GGUF reader must yield Ok or an error — never a
//! panic, an out-of-bounds access or a huge allocation. Accepted files must survive a
//! write → parse → write round trip unchanged, and their tensors must dequantize without
//! panicking.
#![no_main]

use gguf::{dequant, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Header::parse(data) else { return };
    for t in &h.tensors {
        let start = (h.data_offset + t.offset) as usize;
        let bytes = &data[start..start + t.n_bytes as usize];
        if dequant::is_supported(t.ggml_type) && t.n_elements() <= 1 << 16 {
            let _ = dequant::dequantize_to_vec(t.ggml_type, bytes, t.n_elements() as usize);
        }
    }
    let mut out = Vec::new();
    h.to_writer(data)
        .write_to(&mut out)
        .expect("a parsed header is always writable");
    let again = Header::parse(&out).expect("our own output parses");
    // NaN-carrying metadata compares unequal as values; compare the re-written bytes instead.
    let mut out2 = Vec::new();
    again.to_writer(&out).write_to(&mut out2).expect("writable");
    assert_eq!(out, out2, "write → parse → write is not stable");
});
