//! Arbitrary text as a scripted-server script (`troupe mock-llm --script`,
//! `--script FILE`): byte 0 picks TOML or JSON, the rest is the text, as
//! `Script::from_path` parses a `.toml` or `.json` file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use troupe_testkit::Script;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if let Some(text) = troupe_fuzz::text(rest) {
        let _ = if pick & 1 == 0 {
            Script::from_toml_str(text)
        } else {
            Script::from_json_str(text)
        };
    }
});
