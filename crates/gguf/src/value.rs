//! GGUF metadata values (`enum gguf_type` in `ggml/include/gguf.h`).

use std::fmt;

/// The type tag stored before every metadata value and array element: a little-endian `u32`,
/// `enum gguf_type` of `ggml/include/gguf.h`; encodings per `ggml/src/gguf.cpp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    /// `GGUF_TYPE_UINT8`: `uint8_t`, 1 byte.
    U8 = 0,
    /// `GGUF_TYPE_INT8`: `int8_t`, 1 byte.
    I8 = 1,
    /// `GGUF_TYPE_UINT16`: little-endian `uint16_t`, 2 bytes.
    U16 = 2,
    /// `GGUF_TYPE_INT16`: little-endian `int16_t`, 2 bytes.
    I16 = 3,
    /// `GGUF_TYPE_UINT32`: little-endian `uint32_t`, 4 bytes.
    U32 = 4,
    /// `GGUF_TYPE_INT32`: little-endian `int32_t`, 4 bytes.
    I32 = 5,
    /// `GGUF_TYPE_FLOAT32`: IEEE 754 binary32, 4 bytes.
    F32 = 6,
    /// `GGUF_TYPE_BOOL`: one byte, 0 or 1.
    Bool = 7,
    /// `GGUF_TYPE_STRING`: `u64` byte length, then that many bytes (no NUL).
    String = 8,
    /// `GGUF_TYPE_ARRAY`: `u32` element type, `u64` count, then the elements.
    Array = 9,
    /// `GGUF_TYPE_UINT64`: little-endian `uint64_t`, 8 bytes.
    U64 = 10,
    /// `GGUF_TYPE_INT64`: little-endian `int64_t`, 8 bytes.
    I64 = 11,
    /// `GGUF_TYPE_FLOAT64`: IEEE 754 binary64, 8 bytes.
    F64 = 12,
}

impl ValueType {
    /// The tag for id `id`, or `None` if unknown.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Smallest encoded size of one value of this type in bytes (a string or array is at least
    /// its length field). Used to bound counts against the bytes left in the file.
    pub fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// gguf.h's name of the type (`gguf_type_name`).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "str",
            Array => "arr",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A metadata value. Strings keep their raw bytes: GGUF does not promise UTF-8 and a round
/// trip must reproduce them exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A `GGUF_TYPE_UINT8` value.
    U8(u8),
    /// A `GGUF_TYPE_INT8` value.
    I8(i8),
    /// A `GGUF_TYPE_UINT16` value.
    U16(u16),
    /// A `GGUF_TYPE_INT16` value.
    I16(i16),
    /// A `GGUF_TYPE_UINT32` value (e.g. `general.alignment`).
    U32(u32),
    /// A `GGUF_TYPE_INT32` value.
    I32(i32),
    /// A `GGUF_TYPE_FLOAT32` value.
    F32(f32),
    /// A `GGUF_TYPE_BOOL` value (stored as one byte, 0 or 1).
    Bool(bool),
    /// A `GGUF_TYPE_STRING` value: its raw bytes, without the `u64` length prefix.
    String(Vec<u8>),
    /// Element type and elements (all of that type; nested arrays are `Value::Array` elements).
    Array(ValueType, Vec<Value>),
    /// A `GGUF_TYPE_UINT64` value.
    U64(u64),
    /// A `GGUF_TYPE_INT64` value.
    I64(i64),
    /// A `GGUF_TYPE_FLOAT64` value.
    F64(f64),
}

impl Value {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A string value from text.
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into().into_bytes())
    }

    /// The string as UTF-8 text, if this is a string holding valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// Any integer value widened to i128 (bools excluded), for keys whose writers disagree on width.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v as i128,
            Value::I8(v) => v as i128,
            Value::U16(v) => v as i128,
            Value::I16(v) => v as i128,
            Value::U32(v) => v as i128,
            Value::I32(v) => v as i128,
            Value::U64(v) => v as i128,
            Value::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// The elements if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// Human form; arrays longer than 8 elements are summarised as `[type; n] [first 4 …]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::String(b) => {
                let s = String::from_utf8_lossy(b);
                if s.chars().count() > 80 {
                    let head: String = s.chars().take(77).collect();
                    write!(f, "{:?}… ({} bytes)", head, b.len())
                } else {
                    write!(f, "{s:?}")
                }
            }
            Value::Array(t, items) => {
                if items.len() > 8 {
                    write!(f, "[{}; {}] [", t.name(), items.len())?;
                    for (i, v) in items.iter().take(4).enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{v}")?;
                    }
                    f.write_str(", …]")
                } else {
                    f.write_str("[")?;
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{v}")?;
                    }
                    f.write_str("]")
                }
            }
        }
    }
}
