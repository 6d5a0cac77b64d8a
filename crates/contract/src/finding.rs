//! Findings: one broken rule each, naming the key or tensor, found vs expected.

use std::fmt;

/// What a finding is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Subject {
    /// A metadata key.
    Key(String),
    /// A tensor.
    Tensor(String),
    /// The file as a whole (its kind, a cross-check between two values).
    File,
}

/// One rule a model file breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The key or tensor at fault.
    pub subject: Subject,
    /// What is wrong: the value found and what was expected.
    pub msg: String,
}

impl Finding {
    /// A finding about key `key`.
    pub fn key(key: impl Into<String>, msg: impl Into<String>) -> Finding {
        Finding {
            subject: Subject::Key(key.into()),
            msg: msg.into(),
        }
    }

    /// A finding about tensor `name`.
    pub fn tensor(name: impl Into<String>, msg: impl Into<String>) -> Finding {
        Finding {
            subject: Subject::Tensor(name.into()),
            msg: msg.into(),
        }
    }

    /// A finding about the file (or a pair of files) as a whole.
    pub fn file(msg: impl Into<String>) -> Finding {
        Finding {
            subject: Subject::File,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::Key(k) => write!(f, "key `{k}`: {}", self.msg),
            Subject::Tensor(t) => write!(f, "tensor `{t}`: {}", self.msg),
            Subject::File => f.write_str(&self.msg),
        }
    }
}

/// A file that breaks its contract: every finding, in the order the check met them
/// (the first is the one a loader would have tripped on first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractError {
    /// What the file is checked as (`qwen3 target`, `dflash-draft drafter`, …).
    pub kind: &'static str,
    /// The broken rules; never empty.
    pub findings: Vec<Finding>,
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a valid {}: ", self.kind)?;
        match self.findings.split_first() {
            Some((first, [])) => write!(f, "{first}"),
            Some((first, rest)) => write!(f, "{first} (and {} more)", rest.len()),
            None => f.write_str("(no findings)"),
        }
    }
}

impl std::error::Error for ContractError {}
