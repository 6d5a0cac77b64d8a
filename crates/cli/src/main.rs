//! `dspark`: convert, inspect, verify and synthesize DSpark / DFlash drafter GGUFs; run
//! them against a target (generate, bench); tokenize text with a GGUF's vocabulary.
//!
//! Results go to stdout; progress, statistics and diagnostics to stderr, prefixed
//! `dspark: `. Exit codes: 0 success; 1 failure (bad input, a verification mismatch, an
//! I/O error); 2 bad command-line usage (including values out of range and requests the
//! model cannot serve, refused before any work); 130 interrupted. A broken pipe on stdout
//! exits 0.

mod bench_cmd;
mod chat;
mod chat_cmd;
mod convert_cmd;
mod eval_cmd;
mod generate_cmd;
mod inspect_cmd;
mod load;
mod mmap;
mod serve;
mod tokenize_cmd;
mod verify_cmd;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

/// Set by Ctrl-C / SIGTERM; long-running commands poll it and stop cleanly.
pub static CANCEL: AtomicBool = AtomicBool::new(false);

#[derive(Parser, Debug)]
#[command(
    name = "dspark",
    version,
    about = "DSpark / DFlash drafter toolkit: convert checkpoints to reproducible GGUF, inspect and verify them, run them against a target."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a drafter checkpoint folder (config.json + safetensors) to a GGUF (dflash-draft or llama.cpp layout).
    Convert(convert_cmd::ConvertArgs),
    /// Print a GGUF file's header, metadata, tensors and a summary of what it is.
    Inspect(inspect_cmd::InspectArgs),
    /// Prove a GGUF file: strict parse, its kind's contract, report, bit-exact source.
    Verify(verify_cmd::VerifyArgs),
    /// Write a synthetic drafter checkpoint, or a synthetic target with its drafter.
    Synth(convert_cmd::SynthArgs),
    /// Generate tokens with a target, speculatively with a drafter (greedy or sampled; lossless).
    Generate(generate_cmd::GenerateArgs),
    /// Time decode, verify and draft steps against the memory-bandwidth bound.
    Bench(bench_cmd::BenchArgs),
    /// Measure speculation over a prompt set: acceptance, calibration, speed.
    Eval(eval_cmd::EvalArgs),
    /// Converse in the terminal with a target's chat template, speculatively with a drafter (the cache kept across turns).
    Chat(chat_cmd::ChatArgs),
    /// Tokenize a text with a GGUF's own vocabulary, as llama.cpp's llama-tokenize does.
    Tokenize(tokenize_cmd::TokenizeArgs),
    /// Serve an OpenAI-compatible HTTP API (chat and text completions, llama-server's endpoints and metrics), speculatively with a drafter.
    Serve(serve::ServeArgs),
}

/// How tokens are chosen (llama.cpp's flags and meanings; the truncations are off unless
/// given, where llama.cpp defaults to top-k 40, top-p 0.95, min-p 0.05).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SamplingArgs {
    /// Temperature: 0 (the default) is greedy decoding; above 0, tokens are sampled from
    /// the target's distribution (speculatively: drafts sampled from the drafter's own and
    /// accepted by rejection sampling, so the output's law is the target's).
    #[arg(long, default_value_t = 0.0, value_parser = parse_temp, allow_negative_numbers = true)]
    pub temp: f32,
    /// Sample among the K most likely tokens only (0: all).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub top_k: u64,
    /// Sample among the most likely tokens whose probabilities (at temperature 1) reach P
    /// (1: all).
    #[arg(long, default_value_t = 1.0, value_parser = parse_unit, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Sample among the tokens at least P times as likely as the most likely one (0: all).
    #[arg(long, default_value_t = 0.0, value_parser = parse_unit, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Seed of every random draw: the same seed gives the same output whatever the thread
    /// count (speculatively: with `--schedule fixed`; the adaptive schedule's choices
    /// follow measured times, which change the tokens, never their law).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    /// The runtime's settings (with `seed` instead of `--seed`).
    pub fn settings(&self, seed: u64) -> dspark_runtime::sampling::Sampling {
        dspark_runtime::sampling::Sampling {
            temp: self.temp,
            top_k: usize::try_from(self.top_k).unwrap_or(usize::MAX),
            top_p: self.top_p,
            min_p: self.min_p,
            seed,
        }
    }

    /// The settings as JSON output records them.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "temp": self.temp,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "seed": self.seed,
        })
    }
}

fn parse_temp(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("`{s}` is not a temperature (a finite number >= 0)")),
    }
}

fn parse_unit(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{s}` is not a probability in [0, 1]")),
    }
}

/// Most worker threads a command starts.
pub const MAX_THREADS: usize = 256;

/// `--threads`, else every core (at most [`MAX_THREADS`]).
pub fn threads(requested: Option<usize>) -> usize {
    requested
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, MAX_THREADS)
}

/// Parses a thread count: 1..=[`MAX_THREADS`].
pub fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a thread count (1..={MAX_THREADS})")),
    }
}

/// Starts the global thread pool.
pub fn start_threads(requested: Option<usize>) -> usize {
    let n = threads(requested);
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .ok();
    n
}

/// Runs `f` on a worker of the global pool, the caller blocking until it is done. The
/// runtime's kernels split every matrix product across the pool; from a worker, a split
/// runs its first part in place and waits by stealing work, where from the main thread
/// every product would be handed over and waited for through a futex (on a small target,
/// a context switch per product: with one thread, half the decode time).
pub fn on_pool<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    rayon::scope(|_| f())
}

/// How a command ended, beyond success.
#[derive(Debug)]
pub enum Outcome {
    /// Everything held.
    Ok,
    /// A check did not hold (already reported).
    Mismatch,
    /// Ctrl-C or SIGTERM stopped it after it kept and printed what it had.
    Interrupted,
}

/// A command stopped by Ctrl-C or SIGTERM after keeping what it had (exit 130).
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// A command-line usage error (exit 2): a value out of range, options that contradict,
/// a request the model cannot serve, caught before any work.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Writes a line of results to stdout; a failed write (a closed pipe, a full disk) is the
/// caller's error to return.
pub fn out(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)?;
    o.write_all(b"\n")
}

/// Writes a line of diagnostics to stderr, ignoring a failure (there is nowhere left to
/// report it; a full or closed stderr must not end the run).
pub fn diag(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n"));
}

/// `println!` that returns the write's error instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::out(format_args!($($t)*))
    };
}

/// `eprintln!` that never panics.
#[macro_export]
macro_rules! diag {
    ($($t:tt)*) => {
        $crate::diag(format_args!($($t)*))
    };
}

/// Fails with a usage error.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::Usage(format!($($t)*))))
    };
}

/// llama.cpp spells the draft model `-md` and the server's slots `-np`, two-letter short
/// options clap cannot take: they become `--model-draft` and `--parallel` before parsing
/// (only as whole arguments, before `--`).
fn llama_cpp_spellings(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut rest = false;
    for a in args {
        if rest {
            out.push(a);
            continue;
        }
        if a == "--" {
            rest = true;
            out.push(a);
        } else if a == "-md" {
            out.push("--model-draft".into());
        } else if a == "-np" {
            out.push("--parallel".into());
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("-md=")) {
            out.push(format!("--model-draft={v}").into());
        } else {
            out.push(a);
        }
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(llama_cpp_spellings(std::env::args_os()));
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
        Command::Eval(a) => eval_cmd::run(a),
        Command::Tokenize(a) => tokenize_cmd::run(a),
        Command::Chat(a) => chat_cmd::run(a),
        Command::Serve(a) => serve::run(a),
    };
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Mismatch) => ExitCode::from(1),
        Ok(Outcome::Interrupted) => ExitCode::from(130),
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
                ) || matches!(
                    c.downcast_ref::<dspark_synth::SynthError>(),
                    Some(dspark_synth::SynthError::Cancelled)
                )
            }) {
                diag!("dspark: interrupted; nothing was written");
                return ExitCode::from(130);
            }
            diag!("dspark: error: {e:#}");
            if e.chain().any(|c| c.downcast_ref::<Usage>().is_some()) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
