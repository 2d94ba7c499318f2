//! Reader/writer tests on synthetic files: every value type, nested arrays, determinism,
//! atomic writes, and hostile inputs that must give a clear error (never a panic).

use gguf::{Error, GgmlType, GgufWriter, Header, TensorData, TensorEntry, Value, ValueType};

/// A small file with every value type, a nested array and three tensors of different types.
fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::string("llama"));
    w.add_kv("t.u8", Value::U8(200));
    w.add_kv("t.i8", Value::I8(-5));
    w.add_kv("t.u16", Value::U16(60000));
    w.add_kv("t.i16", Value::I16(-30000));
    w.add_kv("t.u32", Value::U32(4_000_000_000));
    w.add_kv("t.i32", Value::I32(-2_000_000_000));
    w.add_kv("t.f32", Value::F32(-0.0));
    w.add_kv("t.bool", Value::Bool(true));
    w.add_kv("t.u64", Value::U64(u64::MAX));
    w.add_kv("t.i64", Value::I64(i64::MIN));
    w.add_kv("t.f64", Value::F64(f64::NAN));
    w.add_kv("t.bytes", Value::String(vec![0xff, 0xfe, b'a'])); // not UTF-8: kept as bytes
    w.add_kv(
        "t.nested",
        Value::Array(
            ValueType::Array,
            vec![
                Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(2)]),
                Value::Array(ValueType::I32, vec![]),
            ],
        ),
    );
    w.add_kv("t.empty", Value::Array(ValueType::String, vec![]));
    let f32s: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor(TensorEntry {
        name: "a.weight".into(),
        ggml_type: GgmlType::F32,
        dims: vec![4, 2],
        data: TensorData::Owned(f32s),
    });
    w.add_tensor(TensorEntry {
        name: "b.weight".into(),
        ggml_type: GgmlType::Q8_0,
        dims: vec![32, 1],
        data: TensorData::Owned(vec![7u8; 34]),
    });
    w.add_tensor(TensorEntry {
        name: "c.weight".into(),
        ggml_type: GgmlType::Q4_K,
        dims: vec![256],
        data: TensorData::Deferred(Box::new(|out| out.write_all(&[3u8; 144]))),
    });
    let planned = w.file_bytes().unwrap();
    let mut buf = Vec::new();
    w.write_to(&mut buf).unwrap();
    // What a caller checks against the free disk space is what gets written.
    assert_eq!(planned, buf.len() as u64);
    buf
}

#[test]
fn writes_and_reads_back_every_value_type() {
    let bytes = sample();
    let h = Header::parse(&bytes).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.architecture(), Some("llama"));
    assert_eq!(h.get("t.u64"), Some(&Value::U64(u64::MAX)));
    assert_eq!(h.get("t.i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(
        h.get("t.bytes"),
        Some(&Value::String(vec![0xff, 0xfe, b'a']))
    );
    match h.get("t.f32") {
        Some(Value::F32(v)) => assert_eq!(v.to_bits(), 0x8000_0000),
        other => panic!("{other:?}"),
    }
    match h.get("t.f64") {
        Some(Value::F64(v)) => assert!(v.is_nan()),
        other => panic!("{other:?}"),
    }
    let nested = h.get("t.nested").unwrap().as_array().unwrap();
    assert_eq!(
        nested[0],
        Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(2)])
    );
    assert_eq!(
        h.get("t.empty"),
        Some(&Value::Array(ValueType::String, vec![]))
    );
    // Offsets: contiguous, each tensor padded to 32.
    let offs: Vec<u64> = h.tensors.iter().map(|t| t.offset).collect();
    assert_eq!(offs, vec![0, 32, 96]);
    assert_eq!(h.data_offset % 32, 0);
    assert_eq!(bytes.len() as u64, h.data_offset + 96 + 160);
    assert_eq!(h.tensors[1].n_bytes, 34);
    assert_eq!(h.tensors[2].ne(), [256, 1, 1, 1]);
}

#[test]
fn writing_is_deterministic_and_round_trips_byte_for_byte() {
    let a = sample();
    let b = sample();
    assert_eq!(a, b);
    // Read → write again through the header gives the same bytes.
    let h = Header::parse(&a).unwrap();
    let w = h.to_writer(&a);
    let mut c = Vec::new();
    w.write_to(&mut c).unwrap();
    assert_eq!(a, c);
}

#[test]
fn atomic_write_leaves_nothing_on_failure_and_replaces_on_success() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = GgufWriter::new();
    w.add_tensor(TensorEntry {
        name: "x".into(),
        ggml_type: GgmlType::F32,
        dims: vec![4],
        // Writes 8 bytes where 16 are needed.
        data: TensorData::Deferred(Box::new(|out| out.write_all(&[0u8; 8]))),
    });
    let err = w.write_to_path(&path).unwrap_err().to_string();
    assert!(
        err.contains("'x'") && err.contains("wrote 8 bytes, expected 16"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temp file left, no target"
    );

    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U32(64));
    w.add_tensor(TensorEntry {
        name: "x".into(),
        ggml_type: GgmlType::F32,
        dims: vec![4],
        data: TensorData::Owned(vec![1u8; 16]),
    });
    let s = w.write_to_path(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(s.data_offset % 64, 0);
    assert_eq!(s.file_bytes, s.data_offset + 64);
    let g = gguf::Gguf::open(&path).unwrap();
    assert_eq!(g.header.alignment, 64);
    assert_eq!(g.tensor_data(&g.header.tensors[0]), &[1u8; 16]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn writer_rejects_inconsistent_input_before_writing() {
    let cases: Vec<(GgufWriter, &str)> = vec![
        {
            let mut w = GgufWriter::new();
            w.add_kv("k", Value::U8(1));
            w.add_kv("k", Value::U8(2));
            (w, "duplicated")
        },
        {
            let mut w = GgufWriter::new();
            w.add_tensor(TensorEntry {
                name: "q".into(),
                ggml_type: GgmlType::Q4_0,
                dims: vec![33],
                data: TensorData::Owned(vec![]),
            });
            (w, "not a multiple of the Q4_0 block size 32")
        },
        {
            let mut w = GgufWriter::new();
            w.add_tensor(TensorEntry {
                name: "f".into(),
                ggml_type: GgmlType::F16,
                dims: vec![4],
                data: TensorData::Owned(vec![0; 7]),
            });
            (w, "7 data bytes given, shape and type need 8")
        },
        {
            let mut w = GgufWriter::new();
            w.add_kv("a", Value::Array(ValueType::U32, vec![Value::U8(1)]));
            (w, "array elements differ")
        },
    ];
    for (w, want) in cases {
        let mut out = Vec::new();
        let err = w.write_to(&mut out).unwrap_err().to_string();
        assert!(err.contains(want), "{err} should contain {want}");
        assert!(out.is_empty(), "nothing written before validation");
    }
}

/// Byte offset of the first tensor info's name length field in `sample()`.
fn first_tensor_info_offset(bytes: &[u8]) -> usize {
    let h = Header::parse(bytes).unwrap();
    // Walk back from the data section: tensor infos are the last thing before padding; find
    // the name by searching (names are unique and short).
    let _ = h;
    let pos = bytes.windows(8).position(|w| w == b"a.weight").unwrap();
    pos - 8
}

fn err_of(bytes: &[u8]) -> Error {
    Header::parse(bytes).expect_err("must be rejected")
}

#[test]
fn hostile_headers_give_errors_naming_field_and_offset() {
    let good = sample();

    // Bad magic.
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(err_of(&b), Error::BadMagic { .. }));
    // Version 1 and a byte-swapped version.
    let mut b = good.clone();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        err_of(&b),
        Error::UnsupportedVersion { version: 1 }
    ));
    let mut b = good.clone();
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(err_of(&b), Error::BigEndian { .. }));
    // Absurd tensor and kv counts.
    let mut b = good.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("n_tensors") && e.contains("byte offset 8"),
        "{e}"
    );
    let mut b = good.clone();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(err_of(&b).to_string().contains("n_kv"));
    // First key: a huge string length.
    let mut b = good.clone();
    b[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("metadata[0] key") && e.contains("byte offset 32"),
        "{e}"
    );

    // Absurd array length in "t.empty" (element type string, count follows).
    let key = b"t.empty";
    let kpos = good.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // layout: value type u32 (9), element type u32 (8), count u64
    let count_at = kpos + 8;
    let mut b = good.clone();
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("\"t.empty\" array length") && e.contains(&format!("byte offset {count_at}")),
        "{e}"
    );
    let mut b = good.clone();
    b[count_at..count_at + 8].copy_from_slice(&1_000_000u64.to_le_bytes());
    assert!(err_of(&b).to_string().contains("cannot fit"));

    // Alignment that is not a power of two.
    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U32(48));
    let mut b = Vec::new();
    assert!(w.write_to(&mut b).is_err());
    // Bool byte other than 0/1.
    let key = b"t.bool";
    let at = good.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    let mut b = good.clone();
    b[at] = 2;
    assert!(err_of(&b).to_string().contains("neither 0 nor 1"));
}

#[test]
fn hostile_tensor_infos_give_errors_naming_the_tensor_and_offset() {
    let good = sample();
    let ti = first_tensor_info_offset(&good);
    // Tensor info: unknown type id, n_dims = 5, negative ne, offset beyond EOF, ne[0] % block.
    let name_len = 8;
    let n_dims_at = ti + 8 + name_len;
    let ne0_at = n_dims_at + 4;
    let type_at = ne0_at + 16;
    let off_at = type_at + 4;
    let mut b = good.clone();
    b[type_at..type_at + 4].copy_from_slice(&4u32.to_le_bytes()); // removed Q4_2
    match err_of(&b) {
        Error::UnknownType { tensor, id, offset } => {
            assert_eq!(
                (tensor.as_str(), id, offset),
                ("a.weight", 4, type_at as u64)
            )
        }
        e => panic!("{e}"),
    }
    let mut b = good.clone();
    b[n_dims_at..n_dims_at + 4].copy_from_slice(&5u32.to_le_bytes());
    assert!(err_of(&b).to_string().contains("n_dims = 5 > 4"));
    let mut b = good.clone();
    b[ne0_at..ne0_at + 8].copy_from_slice(&(-4i64).to_le_bytes());
    assert!(err_of(&b).to_string().contains("ne[0] = -4 is negative"));
    // The last tensor (c.weight, Q4_K, 1 dim) made far larger than the file.
    let c_at = good.windows(8).position(|w| w == b"c.weight").unwrap() + 8 + 4;
    let mut b = good.clone();
    b[c_at..c_at + 8].copy_from_slice(&(256i64 << 30).to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("truncated") && e.contains("\"c.weight\" data"),
        "{e}"
    );
    // A grown first tensor breaks the contiguity of the next one.
    let mut b = good.clone();
    b[ne0_at..ne0_at + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("\"b.weight\"") && e.contains("data offset 32 !="),
        "{e}"
    );
    let mut b = good.clone();
    b[off_at..off_at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.contains("data offset 1125899906842624 != 0") && e.contains("contiguous"),
        "{e}"
    );
    let mut b = good.clone();
    b[type_at..type_at + 4].copy_from_slice(&(GgmlType::Q4_0.id()).to_le_bytes());
    assert!(err_of(&b)
        .to_string()
        .contains("not a multiple of the Q4_0 block size 32"));
}

#[test]
fn truncation_at_every_offset_is_an_error_not_a_panic() {
    let good = sample();
    // Up to the end of the last tensor's data; the zero padding after it is optional, as in
    // llama.cpp's loader, which checks offset + nbytes against the file size.
    let h = Header::parse(&good).unwrap();
    let last = h.tensors.last().unwrap();
    let end = (h.data_offset + last.offset + last.n_bytes) as usize;
    assert!(Header::parse(&good[..end]).is_ok());
    for cut in 0..end {
        let e = Header::parse(&good[..cut]).expect_err("truncated file accepted");
        let s = e.to_string();
        assert!(
            s.contains("truncated") || s.contains("cannot fit"),
            "cut {cut}: {s}"
        );
    }
}

#[test]
fn deep_nesting_is_capped() {
    let mut v = Value::Array(ValueType::U8, vec![]);
    for _ in 0..gguf::MAX_ARRAY_DEPTH {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    let mut w = GgufWriter::new();
    w.add_kv("deep", v);
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let e = err_of(&b).to_string();
    assert!(e.contains("nested deeper than 8"), "{e}");
}

/// Found by the fuzzer (fuzz/gguf_reader, first run): a tensor whose shape has a zero
/// dimension after a huge one is empty for llama.cpp's reader (only factors > 1 can overflow)
/// and must be empty for our writer too, not an overflow error.
#[test]
fn empty_tensor_with_a_huge_dimension_round_trips() {
    let mut w = GgufWriter::new();
    w.add_tensor(TensorEntry {
        name: "empty".into(),
        ggml_type: GgmlType::F32,
        dims: vec![5_188_147_183_047_671_808, 0],
        data: TensorData::Owned(vec![]),
    });
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let h = Header::parse(&b).unwrap();
    assert_eq!(h.tensors[0].n_bytes, 0);
    assert_eq!(h.tensors[0].n_elements(), 0);
    // A huge dimension before another factor > 1 overflows, in both reader and writer.
    let mut w = GgufWriter::new();
    w.add_tensor(TensorEntry {
        name: "big".into(),
        ggml_type: GgmlType::F32,
        dims: vec![1 << 62, 4, 0],
        data: TensorData::Owned(vec![]),
    });
    let e = w.write_to(&mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("element count overflows i64"), "{e}");
}

/// Found by the adversarial review: each of these once hung, used GBs of memory, printed a
/// megabyte-long line, doubled its message or named the wrong offset.
#[test]
fn hostile_files_found_in_review_fail_fast_and_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A directory and a FIFO: rejected by kind before open (a FIFO would block in open()).
    let e = gguf::Gguf::open(dir.path()).err().unwrap().to_string();
    assert!(
        e.ends_with("is a directory; a GGUF file is expected"),
        "{e}"
    );
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = gguf::Gguf::open(&fifo).err().unwrap().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    assert_eq!(
        e.matches("a GGUF file is expected").count(),
        1,
        "message printed once: {e}"
    );

    // 9M one-byte array elements: over the per-file element cap, rejected without allocating.
    let mut w = GgufWriter::new();
    w.add_kv(
        "big",
        Value::Array(ValueType::U8, vec![Value::U8(1); 9 << 20]),
    );
    let mut b = Vec::new();
    w.write_to(&mut b).unwrap();
    let e = err_of(&b).to_string();
    assert!(
        e.contains("exceed the cap of 8388608 array elements per file"),
        "{e}"
    );

    // A 1 MiB key with a bad value type: the message stays short.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend((1u64 << 20).to_le_bytes());
    b.extend(vec![b'A'; 1 << 20]);
    b.extend(99u32.to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(
        e.len() < 400
            && e.contains("(1048576 bytes)")
            && e.contains("unknown GGUF value type id 99"),
        "{e}"
    );

    // general.alignment = 0: the offset is that of the value, not 0.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend((17u64).to_le_bytes());
    b.extend(b"general.alignment");
    b.extend(4u32.to_le_bytes());
    let value_at = b.len();
    b.extend(0u32.to_le_bytes());
    let e = err_of(&b).to_string();
    assert!(e.contains(&format!("at byte offset {value_at}")), "{e}");
}
