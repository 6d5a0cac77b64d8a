//! `dspark`: convert, inspect, verify and synthesize DSpark / DFlash drafter GGUFs.
//!
//! Results go to stdout; progress and diagnostics to stderr, prefixed `dspark: `.
//! Exit codes: 0 success; 1 failure (bad input, a verification mismatch, an I/O error);
//! 2 bad command-line usage; 130 interrupted. A broken pipe on stdout exits 0.

mod bench_cmd;
mod convert_cmd;
mod generate_cmd;
mod inspect_cmd;
mod mmap;
mod verify_cmd;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

/// Set by Ctrl-C / SIGTERM; long-running commands poll it and clean up.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

#[derive(Parser, Debug)]
#[command(
    name = "dspark",
    version,
    about = "DSpark / DFlash drafter toolkit: convert checkpoints to reproducible GGUF, inspect and verify them."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a drafter checkpoint folder (config.json + safetensors) to a dflash-draft GGUF.
    Convert(convert_cmd::ConvertArgs),
    /// Print a GGUF file's header, metadata, tensors and contract summary.
    Inspect(inspect_cmd::InspectArgs),
    /// Prove a GGUF file: strict parse, dflash-draft contract, report, bit-exact source.
    Verify(verify_cmd::VerifyArgs),
    /// Write a synthetic drafter checkpoint (config.json + BF16 model.safetensors).
    Synth(convert_cmd::SynthArgs),
    /// Generate tokens with a Qwen3 target, speculatively with a drafter (greedy, lossless).
    Generate(generate_cmd::GenerateArgs),
    /// Time decode, verify and draft steps against the memory-bandwidth bound.
    Bench(bench_cmd::BenchArgs),
}

/// Most worker threads a command starts, whatever `--threads` says.
const MAX_THREADS: usize = 256;

/// `--threads`, else every core; at least 1 and at most [`MAX_THREADS`].
pub fn threads(requested: Option<usize>) -> usize {
    requested
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, MAX_THREADS)
}

/// How a command ended, beyond success.
#[derive(Debug)]
pub enum Outcome {
    /// Everything held.
    Ok,
    /// A check did not hold (already reported).
    Mismatch,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = ctrlc::set_handler(|| {
        if CANCEL.swap(true, Ordering::SeqCst) {
            // Second signal: the user insists. Temporary files were named to be
            // recognised and removed by the next run into that folder.
            std::process::exit(130);
        }
    });
    let result = match cli.command {
        Command::Convert(a) => convert_cmd::run_convert(a),
        Command::Inspect(a) => inspect_cmd::run(a),
        Command::Verify(a) => verify_cmd::run(a),
        Command::Synth(a) => convert_cmd::run_synth(a),
        Command::Generate(a) => generate_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => ExitCode::from(1),
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            if e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<dspark_convert::error::ConvertError>(),
                    Some(dspark_convert::error::ConvertError::Cancelled)
                )
            }) {
                eprintln!("dspark: interrupted; nothing was written");
                return ExitCode::from(130);
            }
            eprintln!("dspark: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
