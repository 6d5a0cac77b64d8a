//! `dspark convert` and `dspark synth`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use dspark_convert::config::DraftConfig;
use dspark_convert::plan::{
    default_file_name, model_name, CarriedVocab, FileLayout, Options, OutType, Plan,
};
use dspark_convert::report::{error_summary, Report};
use dspark_convert::source::{Checkpoint, SourceLayout};
use dspark_convert::write::write_gguf;
use dspark_output::{check_distinct, check_output, parent_or_cwd, AtomicFile};
use dspark_testkit::drafter::{write_synth, SynthGeometry};
use dspark_testkit::kimi_k3::{write_k3_pair, K3Geometry};
use dspark_testkit::target::{pair_drafter, write_pair, Qwen3Geometry};
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

/// The vocabulary and depth of `--vocab-from`: its `tokenizer.ggml.*` keys (its mask id
/// excluded: the drafter's own is written), the SHA256 of the file, and
/// `<arch>.block_count` when it has one.
fn read_vocab(path: &Path) -> Result<(CarriedVocab, usize, Option<u64>)> {
    let bytes = crate::mmap::map_input(path)?;
    let file = dspark_gguf::GgufFile::parse(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let keys: Vec<(String, dspark_gguf::Value)> = file
        .kvs()
        .iter()
        .filter(|(k, _)| {
            k.starts_with("tokenizer.") && k.as_str() != dspark_contract::names::tokenizer::MASK_ID
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let tokens = match file.get(dspark_contract::names::tokenizer::TOKENS) {
        Some(dspark_gguf::Value::Array(dspark_gguf::Array::String(t))) => t.len(),
        _ => bail!(
            "{}: no {} array: --vocab-from needs a GGUF that carries its tokenizer",
            path.display(),
            dspark_contract::names::tokenizer::TOKENS
        ),
    };
    let depth = file
        .get(dspark_contract::names::ARCHITECTURE)
        .and_then(dspark_gguf::Value::as_str)
        .and_then(|arch| file.get(&format!("{arch}.block_count")))
        .and_then(|v| match v {
            dspark_gguf::Value::U32(n) => Some(u64::from(*n)),
            _ => None,
        });
    let sha256 = dspark_convert::verify::sha256_hex(&bytes);
    Ok((CarriedVocab { keys, sha256 }, tokens, depth))
}

fn parse_outtype(s: &str) -> Result<OutType, String> {
    OutType::parse(s).ok_or_else(|| format!("`{s}` is not one of q8_0, f16, bf16, f32"))
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Geometry: a drafter checkpoint (tiny: 119 K parameters, small: ≈ 250 M,
    /// kimi-k3-dspark: 2.25 B, the reference), or a target and its drafter (qwen3-tiny,
    /// qwen3-small, qwen3-0.6b: DIR/target.gguf, DIR/tokenizer.json and DIR/draft/).
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

/// The target named by --vocab-from must have the drafter's vocabulary and hold every
/// captured layer; a layer llama.cpp cannot tap is a warning.
fn check_target_fit(
    config: &DraftConfig,
    path: &Path,
    tokens: usize,
    depth: Option<u64>,
) -> Result<()> {
    if tokens as u64 != config.vocab_size.value {
        bail!(
            "{}: the target has {tokens} tokens, but {} says {} ({})",
            path.display(),
            config.path.display(),
            config.vocab_size.value,
            config.vocab_size.from
        );
    }
    if let Some(depth) = depth {
        if let Some(bad) = config
            .target_layer_ids
            .value
            .iter()
            .find(|&&id| id >= depth)
        {
            bail!(
                "{}: captured layer {bad} ({}) is outside the target's {depth} layers",
                path.display(),
                config.target_layer_ids.from
            );
        }
        warn_untappable(config, depth, &path.display().to_string());
    }
    Ok(())
}

/// llama.cpp taps a target layer's input, so it cannot give the output of the last layer
/// (`llama-cpp-dflash-layout.md` §6.1): a drafter capturing it aborts there.
fn warn_untappable(config: &DraftConfig, depth: u64, depth_from: &str) {
    for &id in &config.target_layer_ids.value {
        if id + 1 == depth {
            crate::diag!(
                "dspark: warning: captured layer {id} is the last of the target's {depth} ({depth_from}): llama.cpp cannot tap its output (it aborts with \"layer input tensor is null\"); dspark can"
            );
        }
    }
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
    let carried = a.vocab_from.as_deref().map(read_vocab).transpose()?;
    let options = Options {
        outtype: a.outtype,
        layout: a.layout,
        vocab: carried
            .as_ref()
            .filter(|_| a.layout == FileLayout::LlamaCpp)
            .map(|(v, _, _)| v.clone()),
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
    if let (Some((_, tokens, depth)), Some(path)) = (&carried, &a.vocab_from) {
        check_target_fit(&config, path, *tokens, *depth)?;
    } else if let Some(depth) = &config.num_target_layers {
        warn_untappable(&config, depth.value, &depth.from);
    }
    if let (Some((_, tokens, depth)), Some(path)) = (&carried, &a.vocab_from) {
        check_target_fit(&config, path, *tokens, *depth)?;
    } else if let Some(depth) = &config.num_target_layers {
        warn_untappable(&config, depth.value, &depth.from);
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

/// `synth --geometry qwen3-*`: `DIR/target.gguf` (random Qwen3, Q8_0 matrices),
/// `DIR/tokenizer.json` for its synthetic vocabulary, and `DIR/draft/` (a DSpark drafter
/// checkpoint that fits it).
fn synth_target_pair(a: &SynthArgs, t: &Qwen3Geometry) -> Result<Outcome> {
    write_pair(t, &a.out, a.seed, &|_, _| !CANCEL.load(Ordering::SeqCst))?;
    if !a.quiet {
        let d = pair_drafter(t);
        crate::outln!(
            "{}: target.gguf ({} layers, hidden {}, vocabulary {}), tokenizer.json and draft/ (captures {:?}, {} parameters), seed {}",
            a.out.display(),
            t.layers,
            t.hidden,
            t.vocab,
            t.capture_layers(),
            d.parameters(),
            a.seed
        )?;
    }
    Ok(Outcome::Ok)
}

/// `synth --geometry kimi-k3-*`: `DIR/target.gguf` (random Kimi K3), `DIR/tokenizer.json`
/// and `DIR/draft/` (a DSpark drafter checkpoint capturing MLA layers).
fn synth_k3_pair(a: &SynthArgs, g: &K3Geometry) -> Result<Outcome> {
    write_k3_pair(g, &a.out, a.seed, &|_, _| !CANCEL.load(Ordering::SeqCst))?;
    if !a.quiet {
        crate::outln!(
            "{}: target.gguf (kimi-k3, {} layers, MLA at {:?}, hidden {}, {} experts top-{}, vocabulary {}), tokenizer.json and draft/ (captures {:?}, {} parameters), seed {}",
            a.out.display(),
            g.layers,
            g.mla_layers,
            g.hidden,
            g.experts,
            g.experts_used,
            g.vocab,
            g.captures,
            g.drafter().parameters(),
            a.seed
        )?;
    }
    Ok(Outcome::Ok)
}

pub fn run_synth(a: SynthArgs) -> Result<Outcome> {
    if let Some(g) = K3Geometry::by_name(&a.geometry) {
        let created = synth_outputs(&a, true)?;
        return in_new_folder(created, || synth_k3_pair(&a, &g));
    }
    if let Some(t) = Qwen3Geometry::by_name(&a.geometry) {
        let created = synth_outputs(&a, true)?;
        return in_new_folder(created, || synth_target_pair(&a, &t));
    }
    let Some(g) = SynthGeometry::by_name(&a.geometry) else {
        bail!(
            "unknown geometry `{}` (expected tiny, small, kimi-k3-dspark, qwen3-tiny, qwen3-small, qwen3-0.6b, kimi-k3-tiny or kimi-k3-small)",
            a.geometry
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
