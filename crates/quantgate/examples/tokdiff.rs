//! Debug aid: prints the texts whose HF and llama.cpp ids differ.
//! Usage: tokdiff HF_DIR GGUF [TEXTS_FILE] [add_special 0/1] [parse_special 0/1]
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::Path::new(&args[1]);
    let gguf = std::path::Path::new(&args[2]);
    let tok = quantgate::source::tokenizer::load(dir)?;
    let model = llama_runtime::Model::load(gguf, true)?;
    let mut texts: Vec<String> = quantgate::verify::corpus::TOKENIZER_CORPUS
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(f) = args.get(3).filter(|f| !f.is_empty()) {
        texts.extend(
            std::fs::read_to_string(f)?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(String::from),
        );
    }
    let ad = args.get(4).map(|s| s == "1").unwrap_or(true);
    let ps = args.get(5).map(|s| s == "1").unwrap_or(true);
    let mut bad = 0;
    for t in &texts {
        if let Some(why) = quantgate::verify::tokenizer::known_divergence(&tok.json, t) {
            println!(
                "limitation ({}): {:?}",
                why.why(),
                t.chars().take(80).collect::<String>()
            );
            continue;
        }
        let h = tok
            .tokenizer
            .encode(t, true)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let l = model.tokenize(t, ad, ps)?;
        if h.iter().map(|x| *x as i64).ne(l.iter().map(|x| *x as i64)) {
            bad += 1;
            if bad <= 8 {
                println!(
                    "{t:?}\n  hf    {:?}\n  llama {:?}",
                    &h[..h.len().min(40)],
                    &l[..l.len().min(40)]
                );
            }
        }
    }
    println!("{bad} of {} texts differ", texts.len());
    Ok(())
}
