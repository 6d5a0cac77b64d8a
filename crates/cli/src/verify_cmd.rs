//! `dspark verify`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dspark_convert::report::Report;
use dspark_convert::verify::{
    check_finite, check_output_contract, check_report, check_source, written_by_dspark,
};
use dspark_gguf::GgufFile;

use crate::convert_cmd::open_source;
use crate::mmap::map_input;
use crate::Outcome;

/// Largest report read (a Kimi K3 report is 60 KB; one line per tensor and key).
const MAX_REPORT_LEN: u64 = 64 << 20;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The GGUF file.
    pub file: PathBuf,
    /// conversion-report.json to hold the file to (size, SHA256, tensors, metadata).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Source checkpoint folder: re-derive every tensor and compare bytes.
    #[arg(long)]
    pub source: Option<PathBuf>,
    /// Threads for the source check.
    #[arg(long, value_parser = crate::parse_threads)]
    pub threads: Option<usize>,
}

fn say(check: &str, findings: &[String]) -> Result<bool> {
    if findings.is_empty() {
        crate::outln!("ok   {check}")?;
        return Ok(true);
    }
    crate::outln!("FAIL {check}")?;
    for f in findings {
        crate::outln!("     - {f}")?;
    }
    Ok(false)
}

pub fn run(a: VerifyArgs) -> Result<Outcome> {
    let bytes = map_input(&a.file)?;
    let file = GgufFile::parse(&bytes).with_context(|| format!("{}", a.file.display()))?;
    crate::outln!(
        "ok   strict GGUF parse ({} keys, {} tensors, {} bytes)",
        file.kvs().len(),
        file.tensor_infos().len(),
        file.file_size()
    )?;
    let kind = dspark_contract::kind_of(&file);
    let (findings, summary) = match dspark_contract::check(&file, &dspark_quant::matrix_types()) {
        Ok(m) => (Vec::new(), Some(m.summary())),
        Err(e) => (e.findings.iter().map(|f| f.to_string()).collect(), None),
    };
    let mut all_ok = say(
        &format!("{kind} contract (what the runtime's loader requires)"),
        &findings,
    )?;
    for line in summary
        .iter()
        .flat_map(|s| s.describe().lines().map(str::to_string).collect::<Vec<_>>())
    {
        crate::outln!("     {line}")?;
    }
    all_ok &= say("every tensor value finite", &check_finite(&file))?;
    if written_by_dspark(&file) {
        all_ok &= say(
            "dspark output contract (provenance, types, order)",
            &check_output_contract(&file),
        )?;
    }
    let report = match &a.report {
        Some(p) => {
            let len = std::fs::metadata(p)
                .with_context(|| format!("{}: cannot read", p.display()))?
                .len();
            if len > MAX_REPORT_LEN {
                anyhow::bail!(
                    "{}: {len} bytes is too large for a conversion report (limit {MAX_REPORT_LEN})",
                    p.display()
                );
            }
            let text = std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))?;
            let r: Report = serde_json::from_slice(&text)
                .with_context(|| format!("{}: not a dspark conversion report", p.display()))?;
            all_ok &= say(
                &format!("matches report {}", p.display()),
                &check_report(&file, &bytes, &r),
            )?;
            Some(r)
        }
        None => None,
    };
    if let Some(dir) = &a.source {
        let (config, ckpt) = open_source(dir)?;
        let threads = crate::threads(a.threads);
        let findings = check_source(&file, &bytes, config, &ckpt, report.as_ref(), threads)?;
        let what = if report.is_some() {
            "bit-exact with a fresh conversion of the source (bytes and recorded errors)"
        } else {
            "bit-exact with a fresh conversion of the source"
        };
        all_ok &= say(what, &findings)?;
    }
    Ok(if all_ok {
        Outcome::Ok
    } else {
        Outcome::Mismatch
    })
}
