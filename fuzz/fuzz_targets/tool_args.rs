//! A model's arguments string for a built-in tool: validation against the
//! tool's schema, permission rules, typed reads (see `troupe_fuzz::tools`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    troupe_fuzz::tools::run(data);
});
