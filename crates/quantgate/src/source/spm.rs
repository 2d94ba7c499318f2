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

/// The pieces of a serialized `ModelProto`, in id order.
///
/// Errors: truncated or malformed wire data, a piece that is not UTF-8 or has no text, naming
/// the piece's index; a model with no pieces; a model without `normalizer_spec` (field 3, which
/// SentencePiece always writes after the pieces: a file cut between two pieces would otherwise
/// read as a shorter vocabulary).
pub fn read_pieces(bytes: &[u8]) -> Result<Vec<Piece>> {
    let mut w = Wire { buf: bytes, pos: 0 };
    let mut out = Vec::new();
    let mut normalizer = false;
    while let Some((field, value)) = w.next()? {
        match (field, value) {
            (1, Field::Bytes(b)) => {
                let i = out.len();
                out.push(read_piece(b).map_err(|e| anyhow!("pieces[{i}]: {e}"))?);
            }
            (3, Field::Bytes(_)) => normalizer = true,
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
    if !normalizer {
        bail!(
            "no normalizer_spec (ModelProto field 3) after {} pieces: the file is truncated or \
             not a SentencePiece model",
            out.len()
        );
    }
    Ok(out)
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
}
