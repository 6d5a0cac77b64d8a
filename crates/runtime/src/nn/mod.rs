//! The building blocks both models are made of: the Qwen3-style decoder layer and its
//! SwiGLU FFN (`layer`), attention (`attention`), RMSNorm / SiLU / softmax ([`ops`]),
//! rotary embeddings ([`rope`]).

pub(crate) mod attention;
pub mod decoder;
pub(crate) mod layer;
pub mod ops;
pub mod rope;
