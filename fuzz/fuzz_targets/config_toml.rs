//! Arbitrary text as a troupe.toml: `Config::parse` (syntax, the checks
//! on literal keys, deserialization and validation).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(text) = troupe_fuzz::text(data) {
        let _ = troupe_runtime::config::Config::parse(text, std::path::Path::new("troupe.toml"));
    }
});
