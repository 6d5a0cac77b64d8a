//! placeholder
#![forbid(unsafe_code)]
pub mod config;
pub mod error;
pub mod names;
pub mod plan;
pub mod report;
pub mod source;
pub mod synth;
pub mod verify;
pub mod write;
