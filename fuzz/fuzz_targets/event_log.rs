//! Arbitrary bytes as a session's events.jsonl, recovered and read back
//! the way resume does (see `troupe_fuzz::log`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    troupe_fuzz::log::run(data);
});
