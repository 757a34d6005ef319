//! Arbitrary text as a pipeline file: `PipelineSpec::parse`, what
//! `troupe run p.toml` (and `POST /v1/pipelines`) call on the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(text) = troupe_fuzz::text(data) {
        let _ = troupe::PipelineSpec::parse(text, std::path::Path::new("p.toml"));
    }
});
