//! Any bytes as `config.json`, through the converter's config resolution.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = dspark_convert::config::DraftConfig::from_json(&json, std::path::Path::new("config.json"));
    }
});
