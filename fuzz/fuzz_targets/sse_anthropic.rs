//! Arbitrary bytes as a streamed response body through SSE framing, the
//! `AnthropicDecoder` and the response accumulator, in chunk splits chosen by the
//! input's first bytes (see `troupe_fuzz::stream`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use troupe_provider::AnthropicDecoder;

fuzz_target!(|data: &[u8]| {
    troupe_fuzz::stream::run(data, AnthropicDecoder::new);
});
