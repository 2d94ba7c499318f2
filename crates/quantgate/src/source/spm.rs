//! A reader of SentencePiece's `tokenizer.model`: the pieces (text, score, type) of its
//! `ModelProto`, read straight from the protobuf wire format so that no SentencePiece library is
//! needed. Format facts: sentencepiece `src/sentencepiece_model.proto` (ModelProto field 1 =
//! repeated `SentencePiece { string piece = 1; float score = 2; Type type = 3 [default =
//! NORMAL]; }`, Type NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6, UNUSED 5) and the
//! protobuf encoding guide (varint keys `field << 3 | wire type`; wire types 0 varint, 1 fixed64,
//! 2 length-delimited, 5 fixed32).

use anyhow::{anyhow, bail, Result};

/// SentencePiece piece types: GGUF's token types (llama.h `llama_token_type`) are
/// SentencePiece's numbers, so the one table serves both.
pub use gguf::keys::token_type as piece_type;

/// One vocabulary entry of a SentencePiece model.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// The piece text (`▁` marks a space).
    pub piece: String,
    /// Its score (log probability for unigram, merge rank for BPE).
    pub score: f32,
    /// [`piece_type`] value (NORMAL when the field is absent).
    pub kind: i32,
}

/// A cursor over protobuf wire-format bytes; every read is bounds-checked.
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// One field: its number and value.
enum Field<'a> {
    Varint(u64),
    Fixed32([u8; 4]),
    Bytes(&'a [u8]),
    Fixed64,
}

impl<'a> Wire<'a> {
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| anyhow!("truncated varint at byte {}", self.pos))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("varint longer than 10 bytes at byte {}", self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| anyhow!("field of {n} bytes at byte {} runs past the end", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next (field number, value), or `None` at the end.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?)?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32([b[0], b[1], b[2], b[3]])
            }
            w => bail!("wire type {w} (field {}) is not supported", key >> 3),
        };
        Ok(Some((key >> 3, value)))
    }
}

/// A serialized `ModelProto`: its pieces, its trainer's model type and its normalizer.
#[derive(Clone, Debug, PartialEq)]
pub struct SpmModel {
    /// The pieces in id order.
    pub pieces: Vec<Piece>,
    /// `trainer_spec.model_type` (TrainerSpec field 3; UNIGRAM 1, BPE 2, WORD 3, CHAR 4;
    /// 1 when absent, the proto's default).
    pub model_type: i32,
    /// `normalizer_spec` (ModelProto field 3).
    pub normalizer: NormalizerSpec,
}

/// SentencePiece's `NormalizerSpec` fields llama.cpp's UGM tokenizer reads (proto field numbers:
/// name 1, precompiled_charsmap 2, add_dummy_prefix 3, remove_extra_whitespaces 4; both flags
/// default to true).
#[derive(Clone, Debug, PartialEq)]
pub struct NormalizerSpec {
    /// The rule name (`nmt_nfkc`, `identity`, …; empty when absent).
    pub name: String,
    /// The compiled normalization table, verbatim (empty when absent).
    pub precompiled_charsmap: Vec<u8>,
    /// Prepend `▁` to the input.
    pub add_dummy_prefix: bool,
    /// Collapse runs of whitespace and trim both ends.
    pub remove_extra_whitespaces: bool,
}

/// Reads the SentencePiece model file `path`; `why` says what needs it, for the error when the
/// file is missing.
///
/// Errors: the file missing or not a regular file, unreadable, or malformed ([`read_model`]),
/// each naming the path.
pub fn read_file(path: &std::path::Path, why: &str) -> Result<SpmModel> {
    if !path.is_file() {
        bail!("{}: missing or not a file; {why}", path.display());
    }
    let bytes = std::fs::read(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    read_model(&bytes).map_err(|e| anyhow!("{}: {e:#}", path.display()))
}

/// `trainer_spec.model_type` of a Unigram model.
pub const MODEL_TYPE_UNIGRAM: i32 = 1;

/// The pieces of a serialized `ModelProto`, in id order ([`read_model`]'s).
///
/// Errors: as [`read_model`].
pub fn read_pieces(bytes: &[u8]) -> Result<Vec<Piece>> {
    Ok(read_model(bytes)?.pieces)
}

/// Reads a serialized `ModelProto`.
///
/// Errors: truncated or malformed wire data, a piece that is not UTF-8 or has no text, naming
/// the piece's index; a model with no pieces; a model without `normalizer_spec` (field 3, which
/// SentencePiece always writes after the pieces: a file cut between two pieces would otherwise
/// read as a shorter vocabulary); a malformed trainer or normalizer spec, naming the field.
pub fn read_model(bytes: &[u8]) -> Result<SpmModel> {
    let mut w = Wire { buf: bytes, pos: 0 };
    let mut out = Vec::new();
    let mut normalizer = None;
    let mut model_type = MODEL_TYPE_UNIGRAM;
    while let Some((field, value)) = w.next()? {
        match (field, value) {
            (1, Field::Bytes(b)) => {
                let i = out.len();
                out.push(read_piece(b).map_err(|e| anyhow!("pieces[{i}]: {e}"))?);
            }
            (2, Field::Bytes(b)) => {
                model_type = read_model_type(b).map_err(|e| anyhow!("trainer_spec: {e}"))?
            }
            (3, Field::Bytes(b)) => {
                normalizer = Some(read_normalizer(b).map_err(|e| anyhow!("normalizer_spec: {e}"))?)
            }
            _ => {}
        }
    }
    if out.is_empty() {
        bail!("no pieces (ModelProto field 1)");
    }
    // SentencePiece's own loader refuses a model whose pieces repeat.
    let mut seen = std::collections::HashMap::with_capacity(out.len());
    for (i, p) in out.iter().enumerate() {
        if let Some(j) = seen.insert(p.piece.as_str(), i) {
            bail!("pieces[{i}]: {:?} repeats pieces[{j}]", p.piece);
        }
    }
    let Some(normalizer) = normalizer else {
        bail!(
            "no normalizer_spec (ModelProto field 3) after {} pieces: the file is truncated or \
             not a SentencePiece model",
            out.len()
        );
    };
    Ok(SpmModel {
        pieces: out,
        model_type,
        normalizer,
    })
}

/// `model_type` (field 3) of a `TrainerSpec`.
fn read_model_type(b: &[u8]) -> Result<i32> {
    let mut w = Wire { buf: b, pos: 0 };
    let mut t = MODEL_TYPE_UNIGRAM;
    while let Some((field, value)) = w.next()? {
        if let (3, Field::Varint(v)) = (field, value) {
            t = i32::try_from(v).map_err(|_| anyhow!("model_type {v} is out of range"))?;
        }
    }
    Ok(t)
}

/// A `NormalizerSpec` message.
fn read_normalizer(b: &[u8]) -> Result<NormalizerSpec> {
    let mut w = Wire { buf: b, pos: 0 };
    let mut n = NormalizerSpec {
        name: String::new(),
        precompiled_charsmap: Vec::new(),
        add_dummy_prefix: true,
        remove_extra_whitespaces: true,
    };
    while let Some((field, value)) = w.next()? {
        match (field, value) {
            (1, Field::Bytes(s)) => {
                n.name = String::from_utf8(s.to_vec()).map_err(|_| anyhow!("name is not UTF-8"))?
            }
            (2, Field::Bytes(s)) => n.precompiled_charsmap = s.to_vec(),
            (3, Field::Varint(v)) => n.add_dummy_prefix = v != 0,
            (4, Field::Varint(v)) => n.remove_extra_whitespaces = v != 0,
            _ => {}
        }
    }
    Ok(n)
}

/// One `SentencePiece` message.
fn read_piece(b: &[u8]) -> Result<Piece> {
    let mut w = Wire { buf: b, pos: 0 };
    let (mut piece, mut score, mut kind) = (None, 0.0f32, piece_type::NORMAL);
    while let Some((field, value)) = w.next()? {
        match (field, value) {
            (1, Field::Bytes(s)) => {
                piece = Some(
                    std::str::from_utf8(s)
                        .map_err(|_| anyhow!("piece is not UTF-8"))?
                        .to_string(),
                )
            }
            (2, Field::Fixed32(f)) => score = f32::from_le_bytes(f),
            (3, Field::Varint(t)) => {
                kind = i32::try_from(t)
                    .ok()
                    .filter(|t| (1..=6).contains(t))
                    .ok_or_else(|| anyhow!("type {t} is not a SentencePiece type"))?
            }
            _ => {}
        }
    }
    let piece = piece
        .filter(|p| !p.is_empty())
        .ok_or_else(|| anyhow!("no piece text"))?;
    if !score.is_finite() {
        bail!("piece {piece:?}: score {score} is not finite");
    }
    Ok(Piece { piece, score, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn piece(text: &str, score: f32, kind: Option<u64>) -> Vec<u8> {
        let mut p = vec![0x0a];
        varint(text.len() as u64, &mut p);
        p.extend(text.as_bytes());
        p.push(0x15);
        p.extend(score.to_le_bytes());
        if let Some(k) = kind {
            p.push(0x18);
            varint(k, &mut p);
        }
        let mut m = vec![0x0a];
        varint(p.len() as u64, &mut m);
        m.extend(p);
        m
    }

    #[test]
    fn reads_pieces_and_skips_other_fields() {
        let mut m = piece("<pad>", 0.0, Some(3));
        m.extend(piece("\u{2581}the", -2.5, None));
        m.extend(piece("<0x0A>", 0.0, Some(6)));
        // trainer_spec (field 2) with a varint inside: skipped; an empty normalizer_spec.
        m.extend([0x12, 0x02, 0x18, 0x02, 0x1a, 0x00]);
        let p = read_pieces(&m).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[1],
            Piece {
                piece: "\u{2581}the".into(),
                score: -2.5,
                kind: piece_type::NORMAL
            }
        );
        assert_eq!(p[0].kind, piece_type::CONTROL);
        assert_eq!(p[2].kind, piece_type::BYTE);
    }

    #[test]
    fn truncated_and_hostile_inputs_are_errors() {
        let mut m = piece("abc", 1.0, Some(1));
        m.extend(piece("d", 2.0, None));
        m.extend([0x1a, 0x00]);
        assert_eq!(read_pieces(&m).unwrap().len(), 2);
        // Every cut fails, including the one between the two pieces.
        for cut in 1..m.len() {
            assert!(read_pieces(&m[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = piece("x", 0.0, Some(9));
        bad.extend([0x1a, 0x00]);
        let e = read_pieces(&bad).unwrap_err();
        assert!(e.to_string().contains("pieces[0]: type 9"), "{e}");
        assert!(read_pieces(&[0xff; 12]).is_err());
        assert!(read_pieces(&[])
            .unwrap_err()
            .to_string()
            .contains("no pieces"));
    }

    #[test]
    fn reads_the_trainer_type_and_the_normalizer_spec() {
        let mut m = piece("<unk>", 0.0, Some(2));
        // trainer_spec { model_type: BPE (2) }.
        m.extend([0x12, 0x02, 0x18, 0x02]);
        // normalizer_spec { name: "nmt", precompiled_charsmap: [1, 0, 255], add_dummy_prefix: false }.
        m.extend([
            0x1a, 0x0c, 0x0a, 0x03, b'n', b'm', b't', 0x12, 0x03, 1, 0, 255, 0x18, 0x00,
        ]);
        let model = read_model(&m).unwrap();
        assert_eq!(model.model_type, 2);
        assert_eq!(
            model.normalizer,
            NormalizerSpec {
                name: "nmt".into(),
                precompiled_charsmap: vec![1, 0, 255],
                add_dummy_prefix: false,
                // Absent: the proto's default.
                remove_extra_whitespaces: true,
            }
        );
        // A charsmap cut short is an error naming the normalizer.
        let mut cut = piece("<unk>", 0.0, Some(2));
        cut.extend([0x1a, 0x05, 0x12, 0x09, 1, 0, 255]);
        let e = read_model(&cut).unwrap_err().to_string();
        assert!(e.contains("normalizer_spec"), "{e}");
    }
}
