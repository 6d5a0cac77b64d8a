//! `dspark convert` and `dspark synth`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use dspark_convert::config::DraftConfig;
use dspark_convert::plan::{default_file_name, model_name, FileLayout, Options, OutType, Plan};
use dspark_convert::report::{error_summary, Report};
use dspark_convert::source::{Checkpoint, SourceLayout};
use dspark_convert::vocab_from::{untappable, TargetVocab};
use dspark_convert::write::write_gguf;
use dspark_output::{check_distinct, check_output, parent_or_cwd, AtomicFile};
use dspark_synth::drafter::{write_synth, SynthGeometry};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{Outcome, CANCEL};

/// Name of the report written beside the output by default.
pub const REPORT_FILE: &str = "conversion-report.json";

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Checkpoint folder: config.json plus model.safetensors or model.safetensors.index.json.
    pub src: PathBuf,
    /// Output GGUF (default: NAME-TYPE.gguf in the current folder, e.g. Kimi-K3-DSpark-Q8_0.gguf).
    #[arg(short = 'o', long = "out")]
    pub out: Option<PathBuf>,
    /// Output type of the matrices: q8_0, f16, bf16 or f32 (norms and the confidence head stay F32).
    #[arg(long, default_value = "q8_0", value_parser = parse_outtype)]
    pub outtype: OutType,
    /// Report path (default: conversion-report.json beside the output).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// general.name (default: from --source-repo, else the source folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Source repository ORG/NAME, recorded in the metadata and the report.
    #[arg(long)]
    pub source_repo: Option<String>,
    /// Pinned source revision, recorded in the metadata and the report.
    #[arg(long)]
    pub source_revision: Option<String>,
    /// Quantization threads (default: all cores). The output does not depend on it.
    #[arg(long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
    /// Print the plan and the exact output size; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replace an existing output (and report).
    #[arg(long)]
    pub force: bool,
    /// No progress bar and no summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Skip source tensors this converter does not know, listing them in the report.
    #[arg(long)]
    pub allow_extra: bool,
    /// Convert NaN / Inf values instead of refusing the tensor.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Output layout: dflash-draft (the generic drafter format) or llama.cpp (its
    /// `dflash` architecture, as its converter writes it; needs --vocab-from).
    #[arg(long, default_value = "dflash-draft", value_parser = parse_layout)]
    pub layout: FileLayout,
    /// The target GGUF whose vocabulary (tokenizer.ggml.*) a llama.cpp-layout drafter
    /// carries; its depth is also checked against the captured layers.
    #[arg(long, value_name = "TARGET.gguf")]
    pub vocab_from: Option<PathBuf>,
}

fn parse_layout(s: &str) -> Result<FileLayout, String> {
    FileLayout::parse(s).ok_or_else(|| format!("`{s}` is not one of dflash-draft, llama.cpp"))
}

fn parse_outtype(s: &str) -> Result<OutType, String> {
    OutType::parse(s).ok_or_else(|| format!("`{s}` is not one of q8_0, f16, bf16, f32"))
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Geometry: a drafter checkpoint (tiny: 119 K parameters, small: ≈ 250 M,
    /// kimi-k3-dspark: 2.25 B, the reference), or a target and its drafter
    /// (DIR/target.gguf, DIR/tokenizer.json and DIR/draft/): qwen3-tiny, qwen3-small,
    /// qwen3-0.6b, llama-tiny, llama-tiny-options, llama-small, llama-smollm2,
    /// kimi-k3-tiny, kimi-k3-small, kimi-k3-large (38.5 GB, experts MXFP4: larger
    /// than most machines' memory; written as a stream).
    #[arg(long)]
    pub geometry: String,
    /// Output folder (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Random seed; the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Replace files an earlier synth left in the output folder.
    #[arg(long)]
    pub force: bool,
}

/// The files `synth` writes into `out` for `pair` (a target and its drafter) or a drafter
/// alone: each must be new unless --force; a folder synth created is removed again when
/// it fails.
fn synth_outputs(a: &SynthArgs, pair: bool) -> Result<Option<PathBuf>> {
    let files: Vec<PathBuf> = if pair {
        [
            "target.gguf",
            "tokenizer.json",
            "draft/config.json",
            "draft/model.safetensors",
        ]
        .iter()
        .map(|f| a.out.join(f))
        .collect()
    } else {
        vec![a.out.join("config.json"), a.out.join("model.safetensors")]
    };
    let created = (!a.out.exists()).then(|| a.out.clone());
    for f in &files {
        if f.parent().is_some_and(Path::is_dir) {
            check_output(f, &[], a.force)?;
        }
    }
    Ok(created)
}

/// Runs a synth into a folder, removing the folder again if synth created it and failed.
fn in_new_folder(created: Option<PathBuf>, f: impl FnOnce() -> Result<Outcome>) -> Result<Outcome> {
    let r = f();
    if let (Err(_), Some(dir)) = (&r, created) {
        let _ = std::fs::remove_dir_all(&dir);
    }
    r
}

/// Opens a checkpoint folder: its config and its validated weight files.
pub fn open_source(dir: &Path) -> Result<(DraftConfig, Checkpoint)> {
    let layout = SourceLayout::discover(dir)?;
    let config = DraftConfig::read(&layout.config_path())?;
    let ckpt = Checkpoint::open(layout)?;
    Ok((config, ckpt))
}

fn progress_bar(total: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "dspark: {msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

fn human(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

fn print_plan(plan: &Plan, out: &Path) -> Result<()> {
    let layout = plan.layout();
    let mut so = std::io::stdout().lock();
    writeln!(
        so,
        "{:<34} {:<5} {:<16} {:<5} {:>14}",
        "tensor", "src", "shape", "type", "bytes"
    )?;
    for (t, (_, bytes)) in plan.tensors.iter().zip(&layout.tensors) {
        let shape = format!("{:?}", t.source_shape);
        let fallback = t
            .fallback
            .as_deref()
            .map(|f| format!("  ({f})"))
            .unwrap_or_default();
        writeln!(
            so,
            "{:<34} {:<5} {:<16} {:<5} {:>14}{fallback}",
            t.name,
            t.source_dtype.name(),
            shape,
            t.ty.name(),
            bytes
        )?;
    }
    for s in &plan.skipped {
        writeln!(so, "{s:<34} skipped (--allow-extra)")?;
    }
    let counts: Vec<String> = plan
        .type_counts()
        .iter()
        .map(|(ty, n)| format!("{n} {ty}"))
        .collect();
    writeln!(
        so,
        "{} tensors ({}), {} parameters; output {} would be exactly {} bytes ({})",
        plan.tensors.len(),
        counts.join(", "),
        plan.parameters,
        out.display(),
        layout.file_size,
        human(layout.file_size)
    )?;
    Ok(())
}

fn cancelled() -> Result<()> {
    if CANCEL.load(Ordering::SeqCst) {
        return Err(dspark_convert::error::ConvertError::Cancelled.into());
    }
    Ok(())
}

pub fn run_convert(a: ConvertArgs) -> Result<Outcome> {
    let started = Instant::now();
    if a.layout == FileLayout::LlamaCpp && a.vocab_from.is_none() {
        crate::usage!(
            "--layout llama.cpp carries the target's vocabulary: give --vocab-from TARGET.gguf"
        );
    }
    let target_vocab = match a.vocab_from.as_deref() {
        Some(p) => Some(TargetVocab::read(p, &crate::mmap::map_input(p)?)?),
        None => None,
    };
    let options = Options {
        outtype: a.outtype,
        layout: a.layout,
        vocab: target_vocab
            .as_ref()
            .filter(|_| a.layout == FileLayout::LlamaCpp)
            .map(|t| t.carried.clone()),
        name: a.name.clone(),
        source_repo: a.source_repo.clone(),
        source_revision: a.source_revision.clone(),
        allow_extra: a.allow_extra,
        allow_nonfinite: a.allow_nonfinite,
    };
    // 1. The destination is known from the options alone: checked first (the report and
    //    the GGUF differ, neither exists unless --force, the folder takes a temporary
    //    file). Then the source's files, from its folder listing: no output may be one.
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(default_file_name(
            &model_name(&a.src, &options),
            options.outtype,
        ))
    });
    let report_path = a
        .report
        .clone()
        .unwrap_or_else(|| parent_or_cwd(&out).join(REPORT_FILE));
    let mut temps = None;
    if !a.dry_run {
        check_distinct(&[&out, &report_path])?;
        for p in [&out, &report_path] {
            check_output(p, &[], a.force)?;
        }
        temps = Some((AtomicFile::create(&out)?, AtomicFile::create(&report_path)?));
    }
    let layout = SourceLayout::discover(&a.src)?;
    if !a.dry_run {
        let mut inputs = layout.input_files();
        inputs.extend(a.vocab_from.iter().cloned());
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        for p in [&out, &report_path] {
            check_output(p, &inputs, a.force)?;
        }
    }

    // 2. The source, checked completely before any data is read.
    let config = DraftConfig::read(&layout.config_path())?;
    let warnings = match (&target_vocab, &a.vocab_from, &config.num_target_layers) {
        (Some(t), Some(path), _) => t.check_fit(&config, path)?,
        (None, _, Some(depth)) => untappable(&config, depth.value, &depth.from),
        _ => Vec::new(),
    };
    for w in warnings {
        crate::diag!("dspark: warning: {w}");
    }
    let ckpt = Checkpoint::open(layout)?;
    let plan = Plan::new(config, &ckpt, options)?;
    let Some((tmp, rtmp)) = temps else {
        print_plan(&plan, &out)?;
        return Ok(Outcome::Ok);
    };
    let layout = plan.layout();
    tmp.reserve(layout.file_size)?;
    cancelled()?;

    // 3. Convert.
    let pb = progress_bar(layout.file_size - layout.data_offset, a.quiet, "converting");
    let threads = crate::threads(a.threads);
    let n_tensors = plan.tensors.len();
    let result = write_gguf(
        &plan,
        &ckpt,
        tmp.file(),
        &out,
        threads,
        &CANCEL,
        &|done, tensors| {
            pb.set_position(done);
            pb.set_message(format!("tensor {tensors}/{n_tensors}"));
        },
    );
    pb.finish_and_clear();
    let result = result?;
    cancelled()?;

    // 4. The report, then both renames.
    let sizes: Vec<u64> = ckpt.files.iter().map(|f| f.len).collect();
    let out_name = out
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let report = Report::new(&plan, &result, &sizes, &out_name);
    let report_err = |e: std::io::Error| {
        let msg = if e.kind() == std::io::ErrorKind::StorageFull {
            "no space left on device".to_string()
        } else {
            e.to_string()
        };
        anyhow::anyhow!(
            "{}: cannot write the report: {msg}; nothing was written",
            report_path.display()
        )
    };
    rtmp.file()
        .write_all(report.to_json().as_bytes())
        .map_err(report_err)?;
    rtmp.sync()?;
    cancelled()?;
    tmp.commit()?;
    rtmp.commit()?;

    if !a.quiet {
        let (rms, max, _) = error_summary(&plan, &result);
        let counts: Vec<String> = plan
            .type_counts()
            .iter()
            .map(|(ty, n)| format!("{n} {ty}"))
            .collect();
        let src_size: u64 = sizes.iter().sum();
        crate::outln!(
            "{}: {} tensors ({}), {} parameters, {} -> {} ({:.2}%), relative RMSE rms {:.6} max {:.6}, {:.1} s",
            out.display(),
            plan.tensors.len(),
            counts.join(", "),
            plan.parameters,
            human(src_size),
            human(result.output_size),
            100.0 * result.output_size as f64 / src_size.max(1) as f64,
            rms,
            max,
            started.elapsed().as_secs_f64()
        )?;
    }
    Ok(Outcome::Ok)
}

pub fn run_synth(a: SynthArgs) -> Result<Outcome> {
    // A target with a drafter that fits it (`DIR/target.gguf`, `DIR/tokenizer.json`,
    // `DIR/draft/`), of any architecture the synth crate writes.
    if let Some(write) = dspark_synth::pair(&a.geometry) {
        let created = synth_outputs(&a, true)?;
        let pb = progress_bar(0, a.quiet, "synthesizing");
        let r = in_new_folder(created, || {
            let what = write(&a.out, a.seed, &|done, total| {
                pb.set_length(total);
                pb.set_position(done);
                !CANCEL.load(Ordering::SeqCst)
            })?;
            pb.finish_and_clear();
            if !a.quiet {
                crate::outln!("{}: {what}, seed {}", a.out.display(), a.seed)?;
            }
            Ok(Outcome::Ok)
        });
        pb.finish_and_clear();
        return r;
    }
    let Some(g) = SynthGeometry::by_name(&a.geometry) else {
        let pairs: Vec<&str> = dspark_synth::PAIRS.iter().map(|(n, _)| *n).collect();
        bail!(
            "unknown geometry `{}` (expected tiny, small, kimi-k3-dspark or one of {})",
            a.geometry,
            pairs.join(", ")
        );
    };
    let total: u64 = g.parameters() * 2;
    let created = synth_outputs(&a, false)?;
    let pb = progress_bar(total, a.quiet, "synthesizing");
    in_new_folder(created, || {
        write_synth(&g, &a.out, a.seed, &|done, _| {
            pb.set_position(done);
            !CANCEL.load(Ordering::SeqCst)
        })?;
        Ok(Outcome::Ok)
    })?;
    pb.finish_and_clear();
    if !a.quiet {
        crate::outln!(
            "{}: {} drafter, {} parameters, seed {}",
            a.out.display(),
            g.name,
            g.parameters(),
            a.seed
        )?;
    }
    Ok(Outcome::Ok)
}
