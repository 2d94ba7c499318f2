//! What lets verify run a 7–8B model on a 24 GB, 2-core machine, on small models: the F32
//! expansion in slices of layers gives the whole expansion's logits bit for bit; the disk
//! space each step needs is checked before it writes; the memory estimate holds against a
//! measured peak; mapped files are reclaimable (verify inside a memory cgroup smaller than the
//! F32 expansion gives the same figures).

use crate::common;

use std::path::Path;

use llama_runtime::{Context, ContextParams, Model};
use quantgate::verify::expand;
use quantgate::verify::sliced::{Runner, SlicedRun};

/// Token ids of `n` positions, spread over the vocabulary (the values are what is compared,
/// not what the ids mean).
fn ids(n: usize, salt: u32, n_vocab: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7919 + salt * 104729 + 1) % n_vocab)
        .collect()
}

/// Every logit of every position of `seqs` through `runner`, then those of the last
/// sequence from position 40 on (as the long-context check asks: fewer outputs).
fn all_logits(runner: Runner, seqs: &[Vec<u32>]) -> Vec<Vec<Vec<f32>>> {
    let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
    let ready = runner.ready(&refs, 512, 2).unwrap();
    let mut ctx = Context::new(ready.model(), ContextParams::logits(512, 512, 2)).unwrap();
    let mut out: Vec<Vec<Vec<f32>>> = seqs
        .iter()
        .enumerate()
        .map(|(i, s)| ready.logits(&mut ctx, i, s, 0).unwrap())
        .collect();
    let last = seqs.len() - 1;
    out.push(ready.logits(&mut ctx, last, &seqs[last], 40).unwrap());
    out
}

/// The sliced run of `gguf` (slices of at most `budget` bytes) against its whole expansion.
fn sliced_equals_whole(gguf: &Path, budget: u64, n_slices: usize) {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.gguf");
    expand::write_f32_expansion(gguf, &whole).unwrap();
    let m = Model::load(&whole, false).unwrap();
    let n_vocab = m.n_vocab() as u32;
    // Lengths across ubatch-free sizes: 1 token, a few, one over 64.
    let seqs = vec![ids(1, 0, n_vocab), ids(7, 1, n_vocab), ids(65, 2, n_vocab)];
    let want = all_logits(Runner::Model(&m), &seqs);
    drop(m);
    let slices = dir.path().join("slices");
    std::fs::create_dir(&slices).unwrap();
    let run = SlicedRun::plan(gguf, &slices, budget)
        .unwrap()
        .expect("sliceable");
    assert_eq!(run.ranges.len(), n_slices, "{:?}", run.ranges);
    assert!(run.ranges.windows(2).all(|w| w[0].end == w[1].start));
    let got = all_logits(Runner::Sliced(&run), &seqs);
    assert_eq!(got.len(), seqs.len() + 1);
    assert_eq!(got[seqs.len()].len(), 65 - 40);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (p, (a, b)) in g.iter().zip(w).enumerate() {
            let same =
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "sequence {i} position {p}: sliced logits differ from the whole expansion's"
            );
        }
    }
    // Each slice's file was removed once loaded.
    assert_eq!(std::fs::read_dir(&slices).unwrap().count(), 0);
}

#[test]
fn sliced_logits_equal_the_whole_expansions_bit_for_bit() {
    // A third party's Q4_1 (llama, 30 layers, tied embeddings): slices of about 4 layers.
    let q4_1 = common::smollm2_q4_1();
    let layer = 4 * 3_540_096u64; // f32 bytes of one SmolLM2-135M layer
    sliced_equals_whole(&q4_1, 4 * layer, 9);
    // Llama 3 RoPE (rope_freqs.weight in every slice), one layer per slice, Q4_K_M.
    let hf = common::hf("Llama-3.2-1B-Instruct-2L-seeded");
    let dir = tempfile::tempdir().unwrap();
    let (f16, q4) = (dir.path().join("f16.gguf"), dir.path().join("q4.gguf"));
    common::convert_to(&hf, &f16, quantgate::convert::OutType::F16, false);
    common::quantize_to(&f16, &q4, "Q4_K_M");
    sliced_equals_whole(&q4, 1, 2);
}

/// A tmpfs of `size` (e.g. `8m`) mounted on a temp folder, unmounted on drop. Needs root, as
/// the test command runs on these machines.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let d = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs needs root");
        Tmpfs(d)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// The refusal's text: `{what} needs X MB in DIR, Y MB free`.
fn assert_refused(e: &anyhow::Error, what: &str, dir: &Path) {
    let msg = format!("{e:#}");
    let ns = e
        .chain()
        .find_map(|c| c.downcast_ref::<quantgate::disk::NoSpace>())
        .unwrap_or_else(|| panic!("not a disk-space refusal: {msg}"));
    assert!(ns.need > ns.free, "{msg}");
    assert!(
        msg.contains(&format!("{what} needs "))
            && msg.contains(&format!(" in {}", dir.display()))
            && msg.contains(" free"),
        "{msg}"
    );
}

#[test]
fn convert_quantize_and_verify_refuse_up_front_when_the_disk_is_short() {
    let small = Tmpfs::mount("8m");
    let hf = common::hf("SmolLM2-135M-Instruct");
    // convert: 270 MB of F16 into 8 MB.
    let out = small.path().join("f16.gguf");
    let e = quantgate::convert::convert(
        &hf,
        &out,
        &quantgate::convert::ConvertOptions {
            outtype: quantgate::convert::OutType::F16,
            vocab_only: false,
            fallback: None,
            allow_nonfinite: false,
        },
    )
    .unwrap_err();
    assert_refused(&e, "convert", small.path());
    // quantize: an F16 made elsewhere, its Q4_K_M (about 100 MB) into 8 MB.
    let big = tempfile::tempdir().unwrap();
    let f16 = big.path().join("f16.gguf");
    common::convert_to(&hf, &f16, quantgate::convert::OutType::F16, false);
    let e = quantgate::quantize::quantize(
        &f16,
        &small.path().join("q4.gguf"),
        "Q4_K_M",
        quantgate::threads::Threads::DEFAULT,
    )
    .unwrap_err();
    assert_refused(&e, "quantize", small.path());
    // verify: the F32 expansion's largest slice of a Q4_1 into 8 MB.
    let work = small.path().join("verify");
    let e = quantgate::verify::verify(&quantgate::verify::VerifyOptions {
        hf_dir: hf.clone(),
        gguf: common::smollm2_q4_1(),
        texts: None,
        protocol: None,
        release: None,
        ppl_text: None,
        threads: quantgate::threads::Threads::DEFAULT,
        work_dir: Some(work.clone()),
        imatrix: None,
    })
    .unwrap_err();
    assert_refused(&e, "verify's F32 expansion", &work);
    // Nothing was started: no partial file anywhere on the small filesystem.
    let left: Vec<_> = walk(small.path());
    assert!(left.iter().all(|p| p.is_dir()), "{left:?}");
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// The largest peak anonymous memory of any gate in a verify report, MiB.
fn peak_anon_mib(report: &serde_json::Value) -> f64 {
    report["costs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["peak_anon_mib"].as_f64().unwrap())
        .fold(0.0, f64::max)
}

#[test]
fn the_memory_estimate_bounds_the_measured_peak_of_anonymous_memory() {
    // A Q4_K_M: its Q4_K matrices are repacked into anonymous buffers by the CPU backend.
    let hf = common::hf("SmolLM2-135M-Instruct");
    let dir = tempfile::tempdir().unwrap();
    let (f16, q4) = (dir.path().join("f16.gguf"), dir.path().join("q4.gguf"));
    common::convert_to(&hf, &f16, quantgate::convert::OutType::F16, false);
    common::quantize_to(&f16, &q4, "Q4_K_M");
    let avx512 = llama_runtime::cpu_backend()
        .unwrap()
        .features
        .iter()
        .any(|(n, v)| n == "AVX512" && v == "1");
    for gguf in [&f16, &q4] {
        let r = common::verify_cli_go(&hf, gguf, &dir.path().join("report"));
        let measured = peak_anon_mib(&r);
        let g = gguf::Gguf::open(gguf).unwrap();
        let estimate = quantgate::verify::resources::estimate_need(&g.header.tensors, avx512)
            as f64
            / 1048576.0;
        // An upper bound, and not a loose one: within 1.5× the measured peak plus 512 MiB
        // (fixed before measuring).
        assert!(
            measured > 0.0 && measured <= estimate && estimate <= 1.5 * measured + 512.0,
            "{}: measured {measured:.0} MiB, estimated {estimate:.0} MiB",
            gguf.display()
        );
    }
}

/// A memory cgroup (v1, mounted at /sys/fs/cgroup/memory on these machines) with a limit,
/// removed on drop.
struct MemoryCgroup(std::path::PathBuf);

impl MemoryCgroup {
    fn new(limit: u64) -> MemoryCgroup {
        let p =
            Path::new("/sys/fs/cgroup/memory").join(format!("quantgate-it-{}", std::process::id()));
        std::fs::create_dir(&p).expect("a memory cgroup (v1, as root)");
        std::fs::write(p.join("memory.limit_in_bytes"), limit.to_string()).unwrap();
        MemoryCgroup(p)
    }

    fn read(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.0.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn verify_inside_a_memory_cgroup_smaller_than_the_f32_expansion_gives_the_same_figures() {
    let hf = common::hf("SmolLM2-135M-Instruct");
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("f16.gguf");
    common::convert_to(&hf, &f16, quantgate::convert::OutType::F16, false);
    // Q4_K_M: the CPU backend repacks its Q4_K matrices into anonymous buffers (measured
    // 316 MiB anonymous against a 538 MB expansion); Q4_1: none repacked.
    for ftype in ["Q4_K_M", "Q4_1"] {
        let sub = dir.path().join(ftype);
        std::fs::create_dir(&sub).unwrap();
        let q = sub.join("q.gguf");
        common::quantize_to(&f16, &q, ftype);
        verify_limited_as_free(&hf, &q, &sub);
    }
}

/// verify of `q` without a limit, then inside a memory cgroup above its anonymous peak and below
/// its F32 expansion: GO both times, the limit bound, the same gate figures.
fn verify_limited_as_free(hf: &Path, q: &Path, dir: &Path) {
    let free = common::verify_cli_go(hf, q, &dir.join("free"));
    let g = gguf::Gguf::open(q).unwrap();
    let expansion = expand::f32_expansion_bytes(&g).unwrap();
    // Above the anonymous peak measured without a limit by a fifth (what cannot be
    // reclaimed), below the expansion (538 MB): the file pages (the GGUF, the slices) must be
    // reclaimed to stay under it.
    let anon = peak_anon_mib(&free) * 1048576.0;
    let limit = ((anon * 1.2) as u64 + (16 << 20)) & !0xfff;
    assert!(limit < expansion, "limit {limit} ≥ expansion {expansion}");
    // Pages cached by the run without a limit are charged to the test's own cgroup, not to the
    // limited one, so how far the limited run must reclaim would depend on what is still cached
    // (a Q4_1 run once stayed 3 MB under its limit). Dropped, the GGUF's and the source's pages
    // (105 + 269 MB) are read again and charged to it.
    for f in [q, &hf.join("model.safetensors")] {
        drop_cached_pages(f);
    }
    let cg = MemoryCgroup::new(limit);
    let report = dir.join("limited");
    let qg = env!("CARGO_BIN_EXE_quantgate");
    // The same binary and CPU variant as the run without a limit (common::qg).
    let out = std::process::Command::new("sh")
        .env(llama_runtime::CPU_VARIANT_ENV, common::TEST_CPU_VARIANT)
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(&cg.0)
        .arg(qg)
        .args(["verify", "--threads", "2", "--hf"])
        .arg(hf)
        .arg("--gguf")
        .arg(q)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("GO"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (max, failcnt) = (
        cg.read("memory.max_usage_in_bytes"),
        cg.read("memory.failcnt"),
    );
    eprintln!(
        "{}: limit {limit} B, anonymous peak {anon:.0} B, max usage {max} B, failcnt {failcnt}",
        q.display()
    );
    assert!(max <= limit);
    // The limit was reached: the kernel reclaimed pages to stay under it.
    assert!(failcnt > 0, "the limit never bound");
    let limited = common::json(&report.join("report.json"));
    for k in [
        "gate1",
        "gate2_logits",
        "gate2_logits_as_shipped",
        "gate2_tokenizer",
    ] {
        assert_eq!(limited[k], free[k], "{k}");
    }
}

/// Asks the kernel to drop `path`'s cached pages (written back first): the next reader faults
/// them in again.
fn drop_cached_pages(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: a valid open descriptor; advice only, no memory is touched.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise {}", path.display());
}

/// The stored `token_embd.weight` of `gguf` against SmolLM2's source, compared in blocks of
/// 1 MiB of f32 (111 blocks of 49,152 × 576).
fn token_embd_in_blocks(
    hf: &quantgate::source::hf::HfDir,
    gguf: &Path,
) -> Option<Option<gguf::GgmlType>> {
    use quantgate::verify::gate1::{row_blocks, source_maps::SourceMaps};
    let c = llama_runtime::CGguf::open(gguf).unwrap();
    let info = c
        .tensors()
        .into_iter()
        .find(|t| t.name == "token_embd.weight")
        .unwrap();
    let src = hf
        .tensors
        .iter()
        .position(|t| t.name == "model.embed_tokens.weight")
        .unwrap();
    let ty = gguf::GgmlType::from_id(info.type_id).unwrap();
    let mut file = std::fs::File::open(gguf).unwrap();
    let mut maps = SourceMaps::new(hf);
    row_blocks::compare(
        &mut file,
        gguf,
        &info,
        (src, 576, 0.0),
        ty,
        &mut maps,
        1 << 20,
    )
    .unwrap()
}

#[test]
fn gate1_compares_a_large_tensor_in_row_blocks_and_a_changed_block_is_left_to_the_whole_comparison()
{
    let hf_dir = common::hf("SmolLM2-135M-Instruct");
    let hf = quantgate::source::hf::HfDir::open(&hf_dir, true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (f16, q4) = (dir.path().join("f16.gguf"), dir.path().join("q4.gguf"));
    common::convert_to(&hf_dir, &f16, quantgate::convert::OutType::F16, false);
    common::quantize_to(&f16, &q4, "Q4_K_M");
    // Both straight from the BF16 source (a BF16 value survives the F16 conversion exactly,
    // so the direct encoding is the first candidate that matches), the Q4_K_M's rows in a
    // block type of its own.
    assert_eq!(token_embd_in_blocks(&hf, &f16), Some(None));
    assert_eq!(token_embd_in_blocks(&hf, &q4), Some(None));
    let q = gguf::Gguf::open(&q4).unwrap();
    let ty = |name: &str| {
        q.header
            .tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .ggml_type
    };
    assert_eq!(ty("token_embd.weight"), gguf::GgmlType::Q8_0);
    // One byte of the last block changed: no block-wise match, and verify (which compares
    // the whole tensor then) names the tensor.
    let g = gguf::Gguf::open(&f16).unwrap();
    let t = g
        .header
        .tensors
        .iter()
        .find(|t| t.name == "token_embd.weight")
        .unwrap();
    let at = g.header.data_offset + t.offset + t.n_bytes - 7;
    let mut bytes = std::fs::read(&f16).unwrap();
    bytes[at as usize] ^= 0x10;
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, bytes).unwrap();
    assert_eq!(token_embd_in_blocks(&hf, &bad), None);
    let r = common::verify_with(&hf_dir, &bad, None);
    assert!(
        r.blockers.iter().any(|b| b.subject == "token_embd.weight"),
        "{:?}",
        r.blockers
    );
    assert_eq!(r.gate1.bit_identical, r.gate1.tensors - 1);
}
