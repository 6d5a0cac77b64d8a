//! Any bytes as a whole safetensors file, through the converter's header validation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((n, entries)) = dspark_convert::source::parse_header(data, data.len() as u64) {
        let mut end = 0;
        for e in &entries {
            assert!(e.begin == end && e.end >= e.begin, "validated offsets tile the data");
            end = e.end;
        }
        assert_eq!(8 + n + end, data.len() as u64);
    }
});
