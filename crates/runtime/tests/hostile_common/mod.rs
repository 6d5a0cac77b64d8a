//! Helpers the hostile-file suites share: a contract's findings on crafted bytes.

use dspark_contract::{ContractError, Subject};
use dspark_gguf::{GgmlType, GgufFile};

/// The weight types this build runs.
pub fn types() -> Vec<GgmlType> {
    dspark_quant::matrix_types().to_vec()
}

/// Every finding of `bytes` checked by `check` as a file of `kind` (empty when it passes).
pub fn findings_by(
    bytes: &[u8],
    kind: &str,
    check: impl Fn(&GgufFile<'_>, &[GgmlType]) -> Result<(), ContractError>,
) -> Vec<(Subject, String)> {
    let file = GgufFile::parse(bytes).unwrap();
    match check(&file, &types()) {
        Ok(_) => Vec::new(),
        Err(e) => {
            assert_eq!(e.kind, kind);
            e.findings
                .into_iter()
                .map(|f| (f.subject.clone(), f.to_string()))
                .collect()
        }
    }
}

/// Whether a finding names the key or tensor `what`.
pub fn about(f: &[(Subject, String)], what: &str) -> bool {
    f.iter().any(|(s, _)| match s {
        Subject::Key(k) | Subject::Tensor(k) => k == what,
        _ => false,
    })
}
