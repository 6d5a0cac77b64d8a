//! `config.json` of a drafter checkpoint, with every value's origin.
//!
//! Producers spell the same settings differently (`docs/GGUF.md` §6.4): SpecForge
//! nests the DSpark settings in `dflash_config` and RoPE in `rope_parameters`, DeepSpec
//! keeps them flat, speculators nests the backbone in `transformer_layer_config`, and
//! DeepSeek prefixes `dspark_`. Each value is looked up in a fixed order of candidate
//! keys and remembers which one it came from; the report prints that origin. Field names
//! keep config.json's spelling.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{ConvertError, Result};

/// A config value and the key it was read from (or the rule that derived it).
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// `config key`, `derived: <rule>` or `default`.
    pub from: String,
}

impl<T> Sourced<T> {
    fn new(value: T, from: impl Into<String>) -> Sourced<T> {
        Sourced {
            value,
            from: from.into(),
        }
    }
}

/// RoPE scaling settings (`rope_parameters` or `rope_scaling`).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeScaling {
    /// `rope_type` / `type`, e.g. `yarn`.
    pub rope_type: Sourced<String>,
    /// `factor`.
    pub factor: Sourced<f64>,
    /// `original_max_position_embeddings`.
    pub original_max_position_embeddings: Option<Sourced<u64>>,
    /// `beta_fast`.
    pub beta_fast: Option<Sourced<f64>>,
    /// `beta_slow`.
    pub beta_slow: Option<Sourced<f64>>,
    /// `attention_factor` / `attn_factor`.
    pub attention_factor: Option<Sourced<f64>>,
}

/// The settings of a DSpark / DFlash drafter that the GGUF records.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct DraftConfig {
    /// Where the config was read from.
    pub path: PathBuf,
    pub architectures: Vec<String>,
    pub hidden_size: Sourced<u64>,
    pub num_hidden_layers: Sourced<u64>,
    pub num_attention_heads: Sourced<u64>,
    pub num_key_value_heads: Sourced<u64>,
    pub head_dim: Sourced<u64>,
    pub intermediate_size: Sourced<u64>,
    pub vocab_size: Sourced<u64>,
    pub draft_vocab_size: Sourced<u64>,
    pub rms_norm_eps: Sourced<f64>,
    pub max_position_embeddings: Sourced<u64>,
    pub rope_theta: Sourced<f64>,
    pub rope_scaling: Option<RopeScaling>,
    pub block_size: Sourced<u64>,
    /// The TARGET model's depth (e.g. 93), not the number of captured layers.
    pub num_target_layers: Option<Sourced<u64>>,
    /// Captured target layers, 0-based, in fc input order.
    pub target_layer_ids: Sourced<Vec<u64>>,
    pub target_hidden_size: Option<Sourced<u64>>,
    pub mask_token_id: Option<Sourced<u64>>,
    pub markov_rank: Option<Sourced<u64>>,
    pub markov_head_type: Option<Sourced<String>>,
    pub enable_confidence_head: Option<Sourced<bool>>,
    pub confidence_head_with_markov: Option<Sourced<bool>>,
    pub sample_from_anchor: Option<Sourced<bool>>,
}

/// Upper bound for any size in a config (2^31): larger values are refused as absurd
/// before they reach arithmetic.
const MAX_SIZE: u64 = 1 << 31;

struct Lookup<'a> {
    root: &'a Json,
    path: &'a Path,
}

impl<'a> Lookup<'a> {
    fn err(&self, key: &str, msg: impl Into<String>) -> ConvertError {
        ConvertError::Config {
            path: self.path.to_path_buf(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }

    /// The first present, non-null candidate (dotted paths walk nested objects).
    fn find(&self, candidates: &[&str]) -> Option<(&'a Json, String)> {
        candidates.iter().find_map(|&key| {
            let mut v = self.root;
            for part in key.split('.') {
                v = v.get(part)?;
            }
            (!v.is_null()).then(|| (v, key.to_string()))
        })
    }

    fn uint(&self, candidates: &[&str]) -> Result<Option<Sourced<u64>>> {
        let Some((v, key)) = self.find(candidates) else {
            return Ok(None);
        };
        let n = v
            .as_u64()
            .ok_or_else(|| self.err(&key, format!("expected a non-negative integer, found {v}")))?;
        if n > MAX_SIZE {
            return Err(self.err(&key, format!("{n} is larger than {MAX_SIZE}")));
        }
        Ok(Some(Sourced::new(n, key)))
    }

    fn req_uint(&self, candidates: &[&str]) -> Result<Sourced<u64>> {
        let v = self.uint(candidates)?.ok_or_else(|| {
            self.err(
                candidates[0],
                "missing (also looked for: ".to_string() + &candidates[1..].join(", ") + ")",
            )
        })?;
        if v.value == 0 {
            return Err(self.err(&v.from, "must be at least 1"));
        }
        Ok(v)
    }

    fn float(&self, candidates: &[&str]) -> Result<Option<Sourced<f64>>> {
        let Some((v, key)) = self.find(candidates) else {
            return Ok(None);
        };
        let x = v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| self.err(&key, format!("expected a finite number, found {v}")))?;
        Ok(Some(Sourced::new(x, key)))
    }

    fn string(&self, candidates: &[&str]) -> Result<Option<Sourced<String>>> {
        let Some((v, key)) = self.find(candidates) else {
            return Ok(None);
        };
        let s = v
            .as_str()
            .ok_or_else(|| self.err(&key, format!("expected a string, found {v}")))?;
        Ok(Some(Sourced::new(s.to_string(), key)))
    }

    fn boolean(&self, candidates: &[&str]) -> Result<Option<Sourced<bool>>> {
        let Some((v, key)) = self.find(candidates) else {
            return Ok(None);
        };
        let b = v
            .as_bool()
            .ok_or_else(|| self.err(&key, format!("expected true or false, found {v}")))?;
        Ok(Some(Sourced::new(b, key)))
    }
}

/// Backbone keys may sit at the top level or (speculators) in `transformer_layer_config`.
macro_rules! backbone {
    ($k:literal) => {
        &[$k, concat!("transformer_layer_config.", $k)]
    };
}

impl DraftConfig {
    /// Reads and resolves `path`.
    pub fn read(path: &Path) -> Result<DraftConfig> {
        let text = crate::source::read_small(path)?;
        let root: Json = serde_json::from_slice(&text).map_err(|e| ConvertError::Config {
            path: path.to_path_buf(),
            key: "(file)".into(),
            msg: format!("not valid JSON: {e}"),
        })?;
        DraftConfig::from_json(&root, path)
    }

    /// Resolves an already parsed config; `path` is used in messages.
    pub fn from_json(root: &Json, path: &Path) -> Result<DraftConfig> {
        let l = Lookup { root, path };
        if !root.is_object() {
            return Err(l.err("(file)", "expected a JSON object"));
        }
        let architectures = match l.find(&["architectures"]) {
            Some((Json::Array(a), _)) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        let hidden_size = l.req_uint(backbone!("hidden_size"))?;
        let num_attention_heads = l.req_uint(backbone!("num_attention_heads"))?;
        let num_key_value_heads = match l.uint(backbone!("num_key_value_heads"))? {
            Some(v) => v,
            None => Sourced::new(
                num_attention_heads.value,
                "derived: num_attention_heads (no GQA)",
            ),
        };
        let head_dim = match l.uint(backbone!("head_dim"))? {
            Some(v) => v,
            None => {
                if hidden_size.value % num_attention_heads.value != 0 {
                    return Err(l.err(
                        "head_dim",
                        "missing, and hidden_size is not a multiple of num_attention_heads",
                    ));
                }
                Sourced::new(
                    hidden_size.value / num_attention_heads.value,
                    "derived: hidden_size / num_attention_heads",
                )
            }
        };
        let vocab_size = l.req_uint(backbone!("vocab_size"))?;
        let draft_vocab_size = match l.uint(&["draft_vocab_size"])? {
            Some(v) => v,
            None => Sourced::new(
                vocab_size.value,
                "derived: vocab_size (no draft_vocab_size)",
            ),
        };
        let rms_norm_eps = l
            .float(backbone!("rms_norm_eps"))?
            .ok_or_else(|| l.err("rms_norm_eps", "missing"))?;

        // RoPE: rope_parameters (transformers v5) or rope_theta + rope_scaling (v4).
        let rope_theta = l
            .float(&[
                "rope_parameters.rope_theta",
                "rope_theta",
                "transformer_layer_config.rope_theta",
                "transformer_layer_config.rope_parameters.rope_theta",
            ])?
            .ok_or_else(|| l.err("rope_theta", "missing (also looked in rope_parameters)"))?;
        let rope_scaling = Self::rope_scaling(&l)?;

        let target_layer_ids = Self::target_layer_ids(&l)?;
        let block_size = l.req_uint(&[
            "dflash_config.block_size",
            "block_size",
            "dspark_block_size",
            "draft_block_size",
        ])?;
        let target_hidden_size = l.uint(&["target_hidden_size"])?;
        if let Some(t) = &target_hidden_size {
            if t.value != hidden_size.value {
                return Err(l.err(
                    &t.from,
                    format!(
                        "{} differs from hidden_size {}: an fc over target features of another width is not representable in dflash-draft",
                        t.value, hidden_size.value
                    ),
                ));
            }
        }
        Self::check_unsupported(&l)?;
        let markov_head_type = l.string(&[
            "dflash_config.markov_head_type",
            "markov_head_type",
            "dspark_markov_head_type",
        ])?;
        if let Some(t) = &markov_head_type {
            if t.value != "vanilla" {
                return Err(l.err(
                    &t.from,
                    format!("markov head type `{}` is not supported (only `vanilla` fits the dflash-draft contract)", t.value),
                ));
            }
        }
        DraftConfig {
            path: path.to_path_buf(),
            architectures,
            num_hidden_layers: l.req_uint(backbone!("num_hidden_layers"))?,
            intermediate_size: l.req_uint(backbone!("intermediate_size"))?,
            max_position_embeddings: l.req_uint(backbone!("max_position_embeddings"))?,
            num_target_layers: l.uint(&["num_target_layers", "dflash_config.num_target_layers"])?,
            mask_token_id: l.uint(&[
                "dflash_config.mask_token_id",
                "mask_token_id",
                "dspark_noise_token_id",
            ])?,
            markov_rank: l.uint(&[
                "dflash_config.markov_rank",
                "markov_rank",
                "dspark_markov_rank",
            ])?,
            enable_confidence_head: l.boolean(&[
                "dflash_config.enable_confidence_head",
                "enable_confidence_head",
            ])?,
            confidence_head_with_markov: l.boolean(&[
                "dflash_config.confidence_head_with_markov",
                "confidence_head_with_markov",
            ])?,
            sample_from_anchor: l
                .boolean(&["dflash_config.sample_from_anchor", "sample_from_anchor"])?,
            hidden_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            vocab_size,
            draft_vocab_size,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            block_size,
            target_layer_ids,
            target_hidden_size,
            markov_head_type,
        }
        .check_bounds()
    }

    /// Settings the drafter's forward pass does not implement, refused naming the key:
    /// an activation other than SiLU, sliding-window or other non-full attention layers,
    /// attention biases, and unknown attention modes or projectors.
    fn check_unsupported(l: &Lookup<'_>) -> Result<()> {
        if let Some(act) = l.string(backbone!("hidden_act"))? {
            if act.value != "silu" {
                return Err(l.err(
                    &act.from,
                    format!(
                        "`{}` is not supported (the drafter's FFN is SwiGLU: `silu`)",
                        act.value
                    ),
                ));
            }
        }
        if let Some((v, key)) = l.find(backbone!("layer_types")) {
            let types = v
                .as_array()
                .ok_or_else(|| l.err(&key, format!("expected an array, found {v}")))?;
            if let Some(t) = types.iter().find(|t| t.as_str() != Some("full_attention")) {
                return Err(l.err(
                    &key,
                    format!("layer type {t} is not supported (every layer attends to the full context: `full_attention`)"),
                ));
            }
        }
        if let Some(b) = l.boolean(backbone!("attention_bias"))? {
            if b.value {
                return Err(l.err(
                    &b.from,
                    "attention biases are not supported (dflash-draft has no bias tensors)",
                ));
            }
        }
        for (keys, known) in [
            (
                &["dflash_config.attention_mode", "attention_mode"][..],
                &["gqa", "mha"][..],
            ),
            (
                &["dflash_config.projector_type", "projector_type"][..],
                &["dspark"][..],
            ),
        ] {
            if let Some(v) = l.string(keys)? {
                if !known.contains(&v.value.as_str()) {
                    return Err(l.err(
                        &v.from,
                        format!(
                            "`{}` is not one this converter knows ({})",
                            v.value,
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn rope_scaling(l: &Lookup<'_>) -> Result<Option<RopeScaling>> {
        for section in [
            "rope_parameters",
            "rope_scaling",
            "transformer_layer_config.rope_scaling",
        ] {
            let Some((obj, _)) = l.find(&[section]) else {
                continue;
            };
            if !obj.is_object() {
                return Err(l.err(section, format!("expected an object, found {obj}")));
            }
            let key = |k: &str| format!("{section}.{k}");
            let (k_type, k_type_legacy) = (key("rope_type"), key("type"));
            let Some(rope_type) = l.string(&[&k_type, &k_type_legacy])? else {
                continue;
            };
            if rope_type.value == "default" || rope_type.value == "none" {
                return Ok(None);
            }
            let k_factor = key("factor");
            let factor = l.float(&[&k_factor])?.ok_or_else(|| {
                l.err(
                    &k_factor,
                    format!("missing for rope type `{}`", rope_type.value),
                )
            })?;
            let (k_orig, k_bf, k_bs, k_af, k_af2) = (
                key("original_max_position_embeddings"),
                key("beta_fast"),
                key("beta_slow"),
                key("attention_factor"),
                key("attn_factor"),
            );
            return Ok(Some(RopeScaling {
                rope_type,
                factor,
                original_max_position_embeddings: l.uint(&[&k_orig])?,
                beta_fast: l.float(&[&k_bf])?,
                beta_slow: l.float(&[&k_bs])?,
                attention_factor: l.float(&[&k_af, &k_af2])?,
            }));
        }
        Ok(None)
    }

    fn target_layer_ids(l: &Lookup<'_>) -> Result<Sourced<Vec<u64>>> {
        let candidates = [
            "dflash_config.target_layer_ids",
            "target_layer_ids",
            "dspark_target_layer_ids",
            "aux_hidden_state_layer_ids",
            "eagle_aux_hidden_state_layer_ids",
        ];
        let (v, key) = l.find(&candidates).ok_or_else(|| {
            l.err(
                candidates[0],
                format!(
                    "missing (also looked for: {}); the captured target layers cannot be guessed",
                    candidates[1..].join(", ")
                ),
            )
        })?;
        let arr = v.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
            l.err(
                &key,
                format!("expected a non-empty array of layer ids, found {v}"),
            )
        })?;
        let one_based = key == "eagle_aux_hidden_state_layer_ids";
        let mut ids = Vec::with_capacity(arr.len());
        for x in arr {
            let n = x
                .as_u64()
                .filter(|&n| n <= i32::MAX as u64 && !(one_based && n == 0))
                .ok_or_else(|| {
                    l.err(
                        &key,
                        format!(
                            "layer id {x} is not a valid {} index",
                            if one_based { "1-based" } else { "0-based" }
                        ),
                    )
                })?;
            ids.push(if one_based { n - 1 } else { n });
        }
        let from = if one_based {
            format!("{key} (1-based, minus one)")
        } else {
            key
        };
        Ok(Sourced::new(ids, from))
    }

    /// Refuses sizes outside the `dflash-draft` contract's bounds
    /// (`dspark_contract::bounds`), before any arithmetic or allocation uses them. The
    /// planned file is checked against the whole contract later ([`crate::plan::Plan`]).
    fn check_bounds(self) -> Result<DraftConfig> {
        use dspark_contract::bounds as b;
        let captured = self.target_layer_ids.value.len() as u64;
        let checks: [(&str, u64, std::ops::RangeInclusive<u64>); 8] = [
            (
                &self.hidden_size.from,
                self.hidden_size.value,
                b::EMBEDDING_LENGTH,
            ),
            (
                &self.num_hidden_layers.from,
                self.num_hidden_layers.value,
                b::BLOCK_COUNT,
            ),
            (
                &self.num_attention_heads.from,
                self.num_attention_heads.value,
                b::HEAD_COUNT,
            ),
            (
                &self.num_key_value_heads.from,
                self.num_key_value_heads.value,
                b::HEAD_COUNT,
            ),
            (&self.head_dim.from, self.head_dim.value, b::HEAD_DIM),
            (
                &self.intermediate_size.from,
                self.intermediate_size.value,
                b::FEED_FORWARD_LENGTH,
            ),
            (&self.block_size.from, self.block_size.value, b::BLOCK_SIZE),
            (&self.target_layer_ids.from, captured, b::CAPTURED_LAYERS),
        ];
        for (key, v, range) in checks {
            if !range.contains(&v) {
                return Err(ConvertError::Config {
                    path: self.path.clone(),
                    key: key.to_string(),
                    msg: format!(
                        "{v} is outside {}..={}, the dflash-draft contract's bound",
                        range.start(),
                        range.end()
                    ),
                });
            }
        }
        Ok(self)
    }

    /// True when the config says the Markov head exists (a rank is given).
    pub fn has_markov(&self) -> bool {
        self.markov_rank.as_ref().is_some_and(|r| r.value > 0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn base() -> Json {
        dspark_testkit::drafter::SynthGeometry::tiny().config_json()
    }

    fn read(v: &Json) -> Result<DraftConfig> {
        DraftConfig::from_json(v, Path::new("config.json"))
    }

    fn err(v: &Json) -> String {
        read(v).unwrap_err().to_string()
    }

    #[test]
    fn specforge_layout_resolves_with_origins() {
        let c = read(&base()).unwrap();
        assert_eq!(
            c.target_layer_ids,
            Sourced::new(vec![1, 4, 6], "dflash_config.target_layer_ids")
        );
        assert_eq!(c.rope_theta.from, "rope_parameters.rope_theta");
        let rs = c.rope_scaling.unwrap();
        assert_eq!(
            (rs.rope_type.value.as_str(), rs.factor.value),
            ("yarn", 4.0)
        );
        assert_eq!(rs.original_max_position_embeddings.unwrap().value, 1024);
        assert_eq!(c.num_target_layers.unwrap().value, 8);
        assert_eq!(c.markov_rank.unwrap().from, "dflash_config.markov_rank");
        assert_eq!(
            c.draft_vocab_size.from,
            "derived: vocab_size (no draft_vocab_size)"
        );
    }

    #[test]
    fn transformers_v4_rope_and_legacy_type_key() {
        let mut v = base();
        let o = v.as_object_mut().unwrap();
        o.remove("rope_parameters");
        o.insert("rope_theta".into(), json!(1e6));
        o.insert("rope_scaling".into(), json!({"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32.0}));
        let c = read(&v).unwrap();
        assert_eq!(c.rope_theta, Sourced::new(1e6, "rope_theta"));
        let rs = c.rope_scaling.unwrap();
        assert_eq!(rs.rope_type.from, "rope_scaling.type");
        assert_eq!(rs.beta_fast.unwrap().value, 32.0);
    }

    #[test]
    fn flat_deepspec_and_deepseek_and_eagle_spellings() {
        let mut v = base();
        let dc = v.as_object_mut().unwrap().remove("dflash_config").unwrap();
        let o = v.as_object_mut().unwrap();
        o.insert("target_layer_ids".into(), dc["target_layer_ids"].clone());
        o.insert("markov_rank".into(), json!(32));
        let c = read(&v).unwrap();
        assert_eq!(c.target_layer_ids.from, "target_layer_ids");
        assert_eq!(c.markov_rank.unwrap().from, "markov_rank");

        let o = v.as_object_mut().unwrap();
        o.remove("target_layer_ids");
        o.insert("dspark_target_layer_ids".into(), json!([2, 3]));
        assert_eq!(read(&v).unwrap().target_layer_ids.value, vec![2, 3]);

        let o = v.as_object_mut().unwrap();
        o.remove("dspark_target_layer_ids");
        o.insert("eagle_aux_hidden_state_layer_ids".into(), json!([2, 5, 7]));
        let c = read(&v).unwrap();
        assert_eq!(c.target_layer_ids.value, vec![1, 4, 6]);
        assert!(c.target_layer_ids.from.contains("1-based"));
        v["eagle_aux_hidden_state_layer_ids"] = json!([0, 5]);
        assert!(err(&v).contains("not a valid 1-based index"));
    }

    #[test]
    fn speculators_nests_the_backbone() {
        let mut v = base();
        let o = v.as_object_mut().unwrap();
        let mut inner = serde_json::Map::new();
        for k in [
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "rms_norm_eps",
            "max_position_embeddings",
        ] {
            inner.insert(k.into(), o.remove(k).unwrap());
        }
        o.insert("transformer_layer_config".into(), Json::Object(inner));
        let c = read(&v).unwrap();
        assert_eq!(
            c.hidden_size,
            Sourced::new(64, "transformer_layer_config.hidden_size")
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let mut v = base();
        v["hidden_size"] = json!("64");
        assert_eq!(
            err(&v),
            "config.json: hidden_size: expected a non-negative integer, found \"64\""
        );
        let mut v = base();
        v["intermediate_size"] = json!(1u64 << 40);
        assert!(err(&v).contains("intermediate_size: 1099511627776 is larger than"));
        let mut v = base();
        v.as_object_mut().unwrap().remove("rms_norm_eps");
        assert_eq!(err(&v), "config.json: rms_norm_eps: missing");
        let mut v = base();
        v["target_hidden_size"] = json!(128);
        assert!(err(&v).contains("target_hidden_size: 128 differs from hidden_size 64"));
        for (key, value) in [
            ("num_hidden_layers", 1u64 << 31),
            ("num_key_value_heads", 0),
            ("head_dim", 4096),
        ] {
            let mut v = base();
            v[key] = json!(value);
            assert!(
                err(&v).contains(&format!("{key}: {value} is outside ")),
                "{key}: {}",
                err(&v)
            );
        }
        // Settings the drafter does not implement are refused, not ignored.
        for (key, value, want) in [
            ("hidden_act", json!("gelu"), "`gelu` is not supported"),
            (
                "layer_types",
                json!(["sliding_attention", "full_attention"]),
                "layer type \"sliding_attention\"",
            ),
            (
                "attention_bias",
                json!(true),
                "attention biases are not supported",
            ),
        ] {
            let mut v = base();
            v[key] = value;
            assert!(err(&v).contains(want), "{key}: {}", err(&v));
        }
        let mut v = base();
        v["dflash_config"]["projector_type"] = json!("mlp");
        assert!(
            err(&v).contains("dflash_config.projector_type: `mlp` is not one this converter knows")
        );
        let mut v = base();
        v["dflash_config"]["target_layer_ids"] = json!([]);
        assert!(err(&v).contains("expected a non-empty array"));
        assert!(err(&json!([1, 2])).contains("expected a JSON object"));
    }
}
