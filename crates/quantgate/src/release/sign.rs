//! `model.sig`: a release folder signed in the OpenSSF model-signing v1.0 format (the
//! `model-signing` 1.1.1 library's "key" method), so that a recipient who trusts the key can
//! check the folder without trusting whoever sent it.
//!
//! Format facts (read from model-signing 1.1.1's `_signing/sign_ec_key.py`,
//! `sign_sigstore_pb.py` and its output):
//! - the file is a Sigstore bundle, `mediaType` `application/vnd.dev.sigstore.bundle.v0.3+json`,
//!   `verificationMaterial.publicKey.hint` = hex sha256 of the public key's SubjectPublicKeyInfo
//!   PEM, `tlogEntries` empty;
//! - `dsseEnvelope`: `payloadType` `application/vnd.in-toto+json`, `payload` base64 of an
//!   in-toto Statement v1, one signature: base64 of the DER ECDSA signature (P-256 with
//!   SHA-256) over DSSE's PAE, `DSSEv1 <len type> <type> <len payload> <payload>`;
//! - the Statement: `subject` [{name: the folder's name, digest.sha256: sha256 of the
//!   concatenated raw per-file digests, files sorted by path}], `predicateType`
//!   `https://model_signing/signature/v1.0`, `predicate.resources` [{name, algorithm: sha256,
//!   digest}] sorted by path, `predicate.serialization` {method: files, hash_type: sha256,
//!   allow_symlinks: false, ignore_paths}; the verifier ignores the `ignore_paths` the
//!   signature names.
//!
//! What is signed: exactly the files `SHA256SUMS` covers ([`sums::covered_files`]);
//! `SHA256SUMS`, `receipt.json` and `model.sig` are the ignored paths.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use base64::Engine as _;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{DerSignature, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, LineEnding};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::verify::gate3::sums;

/// The signature's file name in a release folder.
pub const SIGNATURE: &str = sums::SIGNATURE;
const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// Paths the signature does not cover (named in it, so the library's verifier skips them too).
pub const IGNORED: &[&str] = &[sums::SHA256SUMS, sums::RECEIPT, SIGNATURE];
/// Largest `model.sig` read, bytes (a bundle for a few hundred files is tens of KiB).
const MAX_BYTES: u64 = 4 << 20;

/// One signed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// Path relative to the folder, `/`-separated.
    pub name: String,
    /// `sha256`.
    pub algorithm: String,
    /// Lowercase hex.
    pub digest: String,
}

/// The key a signature was checked against, as the card names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyId {
    /// Hex sha256 of the SubjectPublicKeyInfo PEM (model-signing's `hint`).
    pub fingerprint: String,
}

fn read_key_text(path: &Path) -> Result<String> {
    crate::paths::read_text_capped(path, 64 << 10)
}

/// Reads an ECDSA P-256 private key: PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1
/// (`BEGIN EC PRIVATE KEY`, what `openssl ecparam -genkey` writes).
///
/// Errors: unreadable, encrypted, or not a P-256 key (naming the file).
pub fn signing_key(path: &Path) -> Result<SigningKey> {
    let pem = read_key_text(path)?;
    let sk = if pem.contains("BEGIN EC PRIVATE KEY") {
        p256::SecretKey::from_sec1_pem(&pem).map_err(|e| anyhow!("{e}"))
    } else {
        p256::SecretKey::from_pkcs8_pem(&pem).map_err(|e| anyhow!("{e}"))
    }
    .with_context(|| {
        format!(
            "{}: not an unencrypted ECDSA P-256 private key (PEM)",
            path.display()
        )
    })?;
    Ok(SigningKey::from(sk))
}

/// Reads an ECDSA P-256 public key (`BEGIN PUBLIC KEY`, SubjectPublicKeyInfo PEM).
///
/// Errors: unreadable or not a P-256 public key (naming the file).
pub fn verifying_key(path: &Path) -> Result<VerifyingKey> {
    let pem = read_key_text(path)?;
    VerifyingKey::from_public_key_pem(&pem)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("{}: not an ECDSA P-256 public key (PEM)", path.display()))
}

/// model-signing's key hint: hex sha256 of the SubjectPublicKeyInfo PEM.
pub fn fingerprint(key: &VerifyingKey) -> Result<KeyId> {
    let pem = key
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| anyhow!("public key PEM: {e}"))?;
    Ok(KeyId {
        fingerprint: crate::hash::sha256_bytes(pem.as_bytes()),
    })
}

/// DSSE's pre-authentication encoding of `payload`.
fn pae(payload: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "DSSEv1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    )
    .into_bytes();
    v.extend_from_slice(payload);
    v
}

/// The files of `dir` the signature covers, hashed, sorted by path.
///
/// Errors: a file that cannot be read.
pub fn resources(dir: &Path) -> Result<Vec<Resource>> {
    sums::covered_files(dir)?
        .into_iter()
        .filter(|r| !IGNORED.contains(&r.as_str()))
        .map(|name| {
            Ok(Resource {
                digest: crate::hash::sha256_file(&dir.join(&name))?,
                algorithm: "sha256".into(),
                name,
            })
        })
        .collect()
}

/// sha256 over the concatenated raw digests of `r` (sorted by path): the subject's digest.
fn subject_digest(r: &[Resource]) -> Result<String> {
    let mut h = Sha256::new();
    for x in r {
        let raw: Result<Vec<u8>> = (0..x.digest.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(x.digest.get(i..i + 2).unwrap_or("zz"), 16)
                    .map_err(|_| anyhow!("{}: digest {:?} is not hex", x.name, x.digest))
            })
            .collect();
        h.update(raw?);
    }
    Ok(crate::hash::hex(&h.finalize()))
}

/// Signs `dir` (its files as [`resources`] lists them) with the key at `key`, writes
/// `dir/model.sig`, and returns the key's fingerprint. `name` is the subject's name (the
/// folder's name as shipped).
///
/// Errors: the key cannot be read; a file cannot be read; the signature cannot be written.
pub fn sign(dir: &Path, key: &Path, name: &str) -> Result<KeyId> {
    let sk = signing_key(key)?;
    let res = resources(dir)?;
    let statement = json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": subject_digest(&res)?}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "resources": res,
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": false,
                "ignore_paths": IGNORED,
            }
        }
    });
    let payload = serde_json::to_vec_pretty(&statement)?;
    let sig: Signature = sk.sign(&pae(&payload));
    let der: DerSignature = sig.to_der();
    let b64 = base64::engine::general_purpose::STANDARD;
    let id = fingerprint(sk.verifying_key())?;
    let bundle = json!({
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": id.fingerprint}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": b64.encode(&payload),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": b64.encode(der.as_bytes()), "keyid": ""}],
        }
    });
    let p = dir.join(SIGNATURE);
    crate::paths::write_atomic(&p, &serde_json::to_vec_pretty(&bundle)?)?;
    Ok(id)
}

/// Why a signature does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureProblem {
    /// No `model.sig`.
    Missing,
    /// Not a bundle of this format (the field named).
    Malformed(String),
    /// The bundle names another key (its hint) than the trusted one.
    OtherKey(String),
    /// The ECDSA signature does not verify with the trusted key.
    BadSignature,
    /// A signed file whose digest differs, one that is absent, or a file the signature does
    /// not cover.
    Changed(String),
    Absent(String),
    Unsigned(String),
}

impl std::fmt::Display for SignatureProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "{SIGNATURE} is missing: the folder is unsigned"),
            Self::Malformed(d) => write!(f, "{SIGNATURE}: {d}"),
            Self::OtherKey(h) => write!(
                f,
                "{SIGNATURE} was made with another key (key hint {h}) than the trusted one"
            ),
            Self::BadSignature => write!(
                f,
                "{SIGNATURE}: the signature does not verify with the trusted key"
            ),
            Self::Changed(n) => write!(f, "{n}: sha256 differs from the signed digest"),
            Self::Absent(n) => write!(f, "{n}: signed, but absent from the folder"),
            Self::Unsigned(n) => write!(f, "{n}: present, but the signature does not cover it"),
        }
    }
}

#[derive(Deserialize)]
struct Bundle {
    #[serde(rename = "mediaType")]
    media_type: String,
    #[serde(rename = "verificationMaterial")]
    material: serde_json::Value,
    #[serde(rename = "dsseEnvelope")]
    envelope: Envelope,
}

#[derive(Deserialize)]
struct Envelope {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: String,
    signatures: Vec<EnvSig>,
}

#[derive(Deserialize)]
struct EnvSig {
    sig: String,
}

/// The signed statement's resources, once the bundle's signature holds with `key`.
fn signed_resources(text: &str, key: &VerifyingKey) -> Result<Vec<Resource>, SignatureProblem> {
    let bad = |d: &str| SignatureProblem::Malformed(d.to_string());
    let b: Bundle = serde_json::from_str(text).map_err(|e| bad(&format!("not a bundle: {e}")))?;
    if b.media_type != BUNDLE_MEDIA_TYPE || b.envelope.payload_type != PAYLOAD_TYPE {
        return Err(bad("mediaType or payloadType is not model-signing's"));
    }
    let want = fingerprint(key)
        .map_err(|e| bad(&e.to_string()))?
        .fingerprint;
    if let Some(h) = b.material["publicKey"]["hint"].as_str() {
        if h != want {
            return Err(SignatureProblem::OtherKey(h.to_string()));
        }
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64
        .decode(&b.envelope.payload)
        .map_err(|_| bad("dsseEnvelope.payload is not base64"))?;
    let [s] = b.envelope.signatures.as_slice() else {
        return Err(bad("dsseEnvelope.signatures must hold one signature"));
    };
    let der = b64
        .decode(&s.sig)
        .map_err(|_| bad("dsseEnvelope.signatures[0].sig is not base64"))?;
    let sig = Signature::from_der(&der).map_err(|_| SignatureProblem::BadSignature)?;
    key.verify(&pae(&payload), &sig)
        .map_err(|_| SignatureProblem::BadSignature)?;
    let st: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|_| bad("the payload is not JSON"))?;
    if st["_type"] != STATEMENT_TYPE || st["predicateType"] != PREDICATE_TYPE {
        return Err(bad(
            "the statement's _type or predicateType is not model-signing v1.0",
        ));
    }
    let res: Vec<Resource> = serde_json::from_value(st["predicate"]["resources"].clone())
        .map_err(|_| bad("predicate.resources"))?;
    let subject = st["subject"][0]["digest"]["sha256"].as_str().unwrap_or("");
    let mut sorted = res.clone();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    if subject_digest(&sorted).ok().as_deref() != Some(subject) {
        return Err(bad("subject digest is not the digest of the resources"));
    }
    Ok(res)
}

/// Checks `dir/model.sig` against the trusted public key `key`: the bundle's signature, then
/// every file [`resources`] lists against the signed digests, both ways.
///
/// Returns the problems (none: the folder is as the key holder signed it).
/// Errors: the key cannot be read; a file cannot be read.
pub fn check(dir: &Path, key: &Path) -> Result<(KeyId, Vec<SignatureProblem>)> {
    let vk = verifying_key(key)?;
    let id = fingerprint(&vk)?;
    let p = dir.join(SIGNATURE);
    if std::fs::symlink_metadata(&p).is_err() {
        return Ok((id, vec![SignatureProblem::Missing]));
    }
    let text = match crate::paths::read_text_capped(&p, MAX_BYTES) {
        Ok(t) => t,
        Err(e) => return Ok((id, vec![SignatureProblem::Malformed(format!("{e:#}"))])),
    };
    let signed = match signed_resources(&text, &vk) {
        Ok(r) => r,
        Err(e) => return Ok((id, vec![e])),
    };
    let found = resources(dir)?;
    let mut out = Vec::new();
    for s in &signed {
        match found.iter().find(|f| f.name == s.name) {
            None => out.push(SignatureProblem::Absent(s.name.clone())),
            Some(f) if f.digest != s.digest || s.algorithm != "sha256" => {
                out.push(SignatureProblem::Changed(s.name.clone()))
            }
            Some(_) => {}
        }
    }
    for f in &found {
        if !signed.iter().any(|s| s.name == f.name) {
            out.push(SignatureProblem::Unsigned(f.name.clone()));
        }
    }
    if signed.is_empty() {
        out.push(SignatureProblem::Malformed("it signs no file".into()));
    }
    Ok((id, out))
}

/// What `release --check` established about who made the folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provenance {
    /// No `--trust KEY`: the folder's signature (if any) was not checked, so nothing says who
    /// made it; SHA256SUMS and report.json can be rewritten together by anyone.
    NotChecked,
    /// `model.sig` verifies with the trusted key and covers exactly the folder's files.
    Signed(KeyId),
    /// The signature does not hold (each problem named).
    Failed(KeyId, Vec<SignatureProblem>),
}

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotChecked => write!(
                f,
                "not checked: no --trust KEY, so the folder's origin is unknown (unsigned as far as this check goes); SHA256SUMS and report.json prove nothing against someone who rewrote them"
            ),
            Self::Signed(k) => write!(f, "signed by the trusted key (fingerprint {})", k.fingerprint),
            Self::Failed(k, p) => write!(
                f,
                "signature check against the trusted key (fingerprint {}) failed: {} problems",
                k.fingerprint,
                p.len()
            ),
        }
    }
}

/// [`check`] as a [`Provenance`], with a blocker per problem.
///
/// Errors: as [`check`].
pub fn provenance(
    dir: &Path,
    key: &Path,
    blockers: &mut Vec<crate::verify::Blocker>,
) -> Result<Provenance> {
    let (id, problems) = check(dir, key)?;
    if problems.is_empty() {
        return Ok(Provenance::Signed(id));
    }
    for p in &problems {
        let subject = match p {
            SignatureProblem::Changed(n)
            | SignatureProblem::Absent(n)
            | SignatureProblem::Unsigned(n) => n.as_str(),
            _ => SIGNATURE,
        };
        blockers.push(crate::verify::Blocker::new(
            crate::verify::BlockerCode::ReleaseSignature,
            subject,
            p.to_string(),
        ));
    }
    Ok(Provenance::Failed(id, problems))
}
