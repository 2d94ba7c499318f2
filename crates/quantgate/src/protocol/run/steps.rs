//! The protocol's steps, one `Runner::step_KIND` each: build the child's arguments, run it,
//! read its typed output back, record the quantities.

use super::*;

/// One function per step kind: build the child's arguments, run it, read its typed output
/// back, record the quantities.
impl Runner<'_> {
    pub(super) fn step_convert(&mut self, m: &ModelSpec) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        std::fs::create_dir_all(self.dir.join("models").join(model))
            .map_err(|e| Failure::new("convert", e.to_string()))?;
        let args = vec![
            os("convert"),
            self.l.resolve(&m.hf_dir).into(),
            os("-o"),
            self.arm_path(model, base).into(),
            os("--outtype"),
            os(&base.to_ascii_lowercase()),
        ];
        self.exec(&format!("convert-{model}-{base}"), args, &[0])?;
        self.record_file(model, base)
    }

    pub(super) fn step_quantize(&mut self, m: &ModelSpec) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        for arm in m.arms.iter().skip(1) {
            let args = vec![
                os("quantize"),
                self.arm_path(model, base).into(),
                self.arm_path(model, arm).into(),
                os(arm),
                os("--threads"),
                os(&self.l.protocol.settings.threads.to_string()),
            ];
            self.exec(&format!("quantize-{model}-{arm}"), args, &[0])?;
            self.record_file(model, arm)?;
        }
        Ok(())
    }

    pub(super) fn step_verify(&mut self, m: &ModelSpec, arms: &[String]) -> Result<(), Failure> {
        let model = m.name.as_str();
        for arm in arms {
            let rep = self.dir.join("verify").join(format!("{model}-{arm}"));
            let args = vec![
                os("verify"),
                os("--hf"),
                self.l.resolve(&m.hf_dir).into(),
                os("--gguf"),
                self.arm_path(model, arm).into(),
                os("--protocol"),
                self.l.path.clone().into(),
                os("--report"),
                rep.clone().into(),
                os("--threads"),
                os(&self.l.protocol.settings.threads.to_string()),
            ];
            // Exit 1 is a measured NO-GO, not a failed step.
            let label = format!("verify-{model}-{arm}");
            self.exec(&label, args, &[0, 1])?;
            let v: VerifyReport = self.read_json(&label, &rep.join("report.json"))?;
            let go = (v.verdict == Verdict::Go) as u8 as f64;
            self.put(model, "verify_go", arm, go);
            let l = v.gate2_logits.as_ref();
            for (stem, x) in [
                ("logits_min_cosine", l.map(|l| l.min_cosine)),
                ("logits_top1_agreement", l.map(|l| l.top1_agreement)),
                ("logits_mean_kld", l.map(|l| l.mean_kld)),
                (
                    "vectors_min_cosine",
                    v.gate2_vectors.as_ref().map(|v| v.min_cosine),
                ),
            ] {
                // A non-finite value (JSON null) is not a quantity: the verdict carries it.
                if let Some(x) = x.filter(|x| x.is_finite()) {
                    self.put(model, stem, arm, x);
                }
            }
        }
        Ok(())
    }

    pub(super) fn step_ppl(
        &mut self,
        m: &ModelSpec,
        text: &str,
        ctx: u32,
        chunks: usize,
    ) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        let text_p = self.input_path(text);
        for arm in &m.arms {
            let label = format!("ppl-{model}-{arm}");
            let args = vec![
                self.arm_path(model, arm).into(),
                os("-f"),
                text_p.clone().into(),
                os("-c"),
                os(&ctx.to_string()),
                os("--chunks"),
                os(&chunks.to_string()),
                os("--ubatch"),
                os(&self.l.protocol.settings.n_ubatch.to_string()),
            ];
            let (rc, rec) = self.eval_step::<PplResult>(&label, EvalKind::Ppl, args)?;
            let load_ms = *rec
                .load_ms
                .first()
                .ok_or_else(|| Failure::new(&label, "output has no load time"))?;
            let ppl = Self::finite(&label, "ppl", rec.result.ppl)?;
            let se = Self::finite(&label, "ppl_se", rec.result.ppl_se)?;
            let load_ms = Self::finite(&label, "load_ms", load_ms)?;
            self.put(model, "ppl", arm, ppl).spread = Some(se);
            self.put(model, "load_ms", arm, load_ms);
            let rss = rc.max_rss_kib as f64;
            self.put(model, "peak_rss_kib", &format!("ppl,{arm}"), rss);
            if arm != base {
                self.put_delta(model, "ppl", arm, base);
            }
        }
        Ok(())
    }

    pub(super) fn step_hellaswag(
        &mut self,
        m: &ModelSpec,
        tasks_file: &str,
        tasks: usize,
        ctx: u32,
    ) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        let f = self.input_path(tasks_file);
        for arm in &m.arms {
            let label = format!("hellaswag-{model}-{arm}");
            let args = vec![
                self.arm_path(model, arm).into(),
                os("-f"),
                f.clone().into(),
                os("--tasks"),
                os(&tasks.to_string()),
                os("-c"),
                os(&ctx.to_string()),
            ];
            let (rc, rec) = self.eval_step::<HellaswagResult>(&label, EvalKind::Hellaswag, args)?;
            let acc = Self::finite(&label, "acc_norm", rec.result.acc_norm)?;
            self.put(model, "acc_norm", arm, acc);
            let rss = rc.max_rss_kib as f64;
            self.put(model, "peak_rss_kib", &format!("hellaswag,{arm}"), rss);
            if arm != base {
                self.put_delta(model, "acc_norm", arm, base);
            }
        }
        Ok(())
    }

    pub(super) fn step_kld(
        &mut self,
        m: &ModelSpec,
        text: &str,
        ctx: usize,
        chunks: usize,
    ) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        let text_p = self.input_path(text);
        let logits = self
            .dir
            .join("models")
            .join(model)
            .join(format!("{base}.logits"));
        let label = format!("kld-base-{model}-{base}");
        let args = vec![
            self.arm_path(model, base).into(),
            os("-f"),
            text_p.into(),
            os("--out"),
            logits.clone().into(),
            os("-c"),
            os(&ctx.to_string()),
            os("--chunks"),
            os(&chunks.to_string()),
        ];
        let (rc, _) = self.eval_step::<serde::de::IgnoredAny>(&label, EvalKind::KldBase, args)?;
        let rss = rc.max_rss_kib as f64;
        self.put(model, "peak_rss_kib", &format!("kld-base,{base}"), rss);
        for arm in m.arms.iter().skip(1) {
            let label = format!("kld-{model}-{arm}");
            let args = vec![
                self.arm_path(model, arm).into(),
                os("--base"),
                logits.clone().into(),
            ];
            let (rc, rec) = self.eval_step::<KldResult>(&label, EvalKind::Kld, args)?;
            let r = &rec.result;
            let kld = Self::finite(&label, "mean_kld", r.mean_kld)?;
            let unc = Self::finite(&label, "mean_kld_unc", r.mean_kld_unc)?;
            let same = Self::finite(&label, "same_top_p", r.same_top_p)?;
            self.put(model, "mean_kld", arm, kld).spread = Some(unc);
            self.put(model, "same_top_p", arm, 100.0 * same);
            let rss = rc.max_rss_kib as f64;
            self.put(model, "peak_rss_kib", &format!("kld,{arm}"), rss);
        }
        // The base logits are an intermediate (25 MB per 512-token chunk of a 49k vocab).
        let _ = std::fs::remove_file(&logits);
        Ok(())
    }

    pub(super) fn step_bench(
        &mut self,
        m: &ModelSpec,
        n_prompt: usize,
        n_gen: usize,
        replicates: usize,
    ) -> Result<(), Failure> {
        let (model, base) = (m.name.as_str(), m.arms[0].as_str());
        let label = format!("bench-{model}");
        let mut args: Vec<OsString> = m
            .arms
            .iter()
            .map(|a| self.arm_path(model, a).into_os_string())
            .collect();
        args.extend([
            os("-p"),
            os(&n_prompt.to_string()),
            os("-n"),
            os(&n_gen.to_string()),
            os("-r"),
            os(&replicates.to_string()),
        ]);
        let (rc, rec) = self.eval_step::<BenchResult>(&label, EvalKind::Bench, args)?;
        let arm_of = |path: &str| {
            m.arms
                .iter()
                .find(|a| path.ends_with(&format!("{a}.gguf")))
                .cloned()
                .unwrap_or_default()
        };
        for row in &rec.result.rows {
            let arm = arm_of(&row.model);
            let stem = format!("{}_ts", row.test);
            let ts = Self::finite(&label, "avg_ts", row.avg_ts)?;
            let sd = Self::finite(&label, "stddev_ts", row.stddev_ts)?;
            self.put(model, &stem, &arm, ts).spread = Some(sd);
        }
        for row in &rec.result.ratios {
            let arm = arm_of(&row.model);
            let stem = format!("{}_ratio", row.test);
            let mean = Self::finite(&label, "ratio mean", row.mean)?;
            let sd = Self::finite(&label, "ratio sd", row.sd)?;
            self.put(model, &stem, &format!("{arm}/{base}"), mean)
                .spread = Some(sd);
        }
        self.put(model, "peak_rss_kib", "bench", rc.max_rss_kib as f64);
        Ok(())
    }
}
