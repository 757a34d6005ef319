//! Provider client benchmarks, each against a baseline measured in the same run.
//!
//! Run: `cargo bench -p troupe-runtime --bench provider`
//! (`-- --mb N --requests R` to change the defaults).
//!
//! 1. Parser throughput: the recorded OpenAI-compatible streams of
//!    tests/fixtures/providers, repeated to about N MB, fed in 1 KiB chunks through
//!    the SSE decoder + OpenAI decoder (a fresh parser per stream, as in a
//!    real call). Baselines on the same bytes: a plain newline split that
//!    only counts `data:` lines (the floor of any line-based parser), and
//!    `serde_json::Value` parsing of every data payload (pre-extracted).
//!    Anthropic and Gemini decoders are measured on their fixtures too.
//! 2. Per-request client overhead over loopback against the scripted model
//!    server: R streamed calls of a ~2 KB text answer through
//!    `ProviderClient` versus R raw reqwest POSTs of the same body that read
//!    the same response to its end, interleaved.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use troupe_runtime::provider::{
    AnthropicDecoder, GeminiDecoder, Message, ModelClient, ModelEvent, ModelRequest, OpenAiDecoder,
    ProviderClient, ProviderConfig, ProviderKind, SseDecoder, SseEvent, StreamDecoder,
    StreamParser,
};
use troupe_testkit::{Rule, Script, ScriptedServer};

struct Args {
    mb: usize,
    requests: usize,
}

fn args() -> Args {
    let mut a = Args {
        mb: 32,
        requests: 300,
    };
    let argv: Vec<String> = std::env::args().collect();
    for w in argv.windows(2) {
        match w[0].as_str() {
            "--mb" => a.mb = w[1].parse().expect("--mb N"),
            "--requests" => a.requests = w[1].parse().expect("--requests R"),
            _ => {}
        }
    }
    a
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/providers")
}

/// Every `.sse` file under `dir/<sub>` for the given provider folders.
fn streams(dirs: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for d in dirs {
        let dir = fixtures().join(d);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "sse"))
            .collect();
        paths.sort();
        out.extend(
            paths
                .iter()
                .map(|p: &PathBuf| std::fs::read(Path::new(p)).unwrap()),
        );
    }
    out
}

/// Repeats the streams until their total is at least `mb` MB.
fn corpus(base: &[Vec<u8>], mb: usize) -> (Vec<&[u8]>, usize) {
    let mut out = Vec::new();
    let mut total = 0;
    while total < mb * 1_000_000 {
        for s in base {
            out.push(s.as_slice());
            total += s.len();
        }
    }
    (out, total)
}

/// Best of `runs` timings of `f` over `bytes` bytes, in MB/s.
fn mbps(bytes: usize, runs: usize, mut f: impl FnMut() -> usize) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        black_box(f());
        best = best.min(t.elapsed());
    }
    bytes as f64 / 1e6 / best.as_secs_f64()
}

fn parse_all(corpus: &[&[u8]], make: impl Fn() -> Box<dyn StreamDecoder>) -> usize {
    let mut events = Vec::new();
    let mut n = 0;
    for stream in corpus {
        let mut p = StreamParser::new(make());
        for chunk in stream.chunks(1024) {
            let _ = p.feed(chunk, &mut events);
        }
        if !p.is_done() {
            let _ = p.finish(&mut events);
        }
        n += events.len();
        events.clear();
    }
    n
}

fn line_split_baseline(corpus: &[&[u8]]) -> usize {
    corpus
        .iter()
        .flat_map(|s| s.split(|b| *b == b'\n'))
        .filter(|l| l.starts_with(b"data:"))
        .count()
}

fn sse_only(corpus: &[&[u8]]) -> usize {
    let mut out: Vec<SseEvent> = Vec::new();
    let mut n = 0;
    for stream in corpus {
        let mut d = SseDecoder::new();
        for chunk in stream.chunks(1024) {
            d.feed(chunk, &mut out);
        }
        d.finish(&mut out);
        n += out.len();
        out.clear();
    }
    n
}

fn parser_table(mb: usize) {
    let openai = streams(&[
        "openai",
        "azure",
        "alibaba",
        "avian",
        "cerebras",
        "deepseek",
        "gateway",
        "groq",
        "llamacpp",
        "mistral",
        "ollama",
        "openrouter",
        "snowflake",
        "vllm",
        "xai",
        "zai",
    ]);
    let (corpus_oa, bytes_oa) = corpus(&openai, mb);
    let payloads: Vec<String> = corpus_oa
        .iter()
        .flat_map(|s| {
            let mut d = SseDecoder::new();
            let mut out = Vec::new();
            d.feed(s, &mut out);
            d.finish(&mut out);
            out.into_iter().map(|e| e.data).filter(|d| d != "[DONE]")
        })
        .collect();
    let payload_bytes: usize = payloads.iter().map(String::len).sum();
    let runs = 5;
    let split = mbps(bytes_oa, runs, || line_split_baseline(&corpus_oa));
    let serde_value = mbps(payload_bytes, runs, || {
        payloads
            .iter()
            .map(|p| {
                serde_json::from_str::<serde_json::Value>(p)
                    .map(|_| 1)
                    .unwrap_or(0)
            })
            .sum()
    });
    // Same wall time expressed over the whole stream bytes, for a fair ratio.
    let serde_over_stream = serde_value * bytes_oa as f64 / payload_bytes as f64;
    let sse = mbps(bytes_oa, runs, || sse_only(&corpus_oa));
    let ours = mbps(bytes_oa, runs, || {
        parse_all(&corpus_oa, || Box::new(OpenAiDecoder::new()))
    });

    let anthropic_streams = streams(&["anthropic"]);
    let (corpus_an, bytes_an) = corpus(&anthropic_streams, mb);
    let anthropic = mbps(bytes_an, runs, || {
        parse_all(&corpus_an, || Box::new(AnthropicDecoder::new()))
    });
    let gemini_streams = streams(&["gemini"]);
    let (corpus_ge, bytes_ge) = corpus(&gemini_streams, mb);
    let gemini = mbps(bytes_ge, runs, || {
        parse_all(&corpus_ge, || Box::new(GeminiDecoder::new()))
    });

    println!(
        "## Parser throughput ({:.1} MB of recorded OpenAI-compatible streams, 1 KiB chunks, best of {runs})\n",
        bytes_oa as f64 / 1e6
    );
    println!("| parser | MB/s | vs. serde_json::Value baseline |");
    println!("|---|---:|---:|");
    println!(
        "| baseline: newline split, count `data:` lines | {split:.0} | {:.2}x |",
        split / serde_over_stream
    );
    println!(
        "| baseline: serde_json::Value on every data payload | {serde_over_stream:.0} | 1.00x |"
    );
    println!(
        "| troupe SseDecoder only | {sse:.0} | {:.2}x |",
        sse / serde_over_stream
    );
    println!(
        "| troupe SSE + OpenAiDecoder (normalized events) | {ours:.0} | {:.2}x |",
        ours / serde_over_stream
    );
    println!(
        "| troupe SSE + AnthropicDecoder ({:.1} MB anthropic/) | {anthropic:.0} | |",
        bytes_an as f64 / 1e6
    );
    println!(
        "| troupe SSE + GeminiDecoder ({:.1} MB gemini/) | {gemini:.0} | |",
        bytes_ge as f64 / 1e6
    );
    println!();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// (mean, min, p50, p99)
fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration, Duration) {
    v.sort();
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    (mean, v[0], percentile(&v, 0.5), percentile(&v, 0.99))
}

/// One round: fresh clients (so fresh connections), a short warm-up, then
/// `n` calls of each, interleaved. Returns (baseline, ours) timings.
async fn loopback_round(
    server: &ScriptedServer,
    n: usize,
    text: &str,
) -> (Vec<Duration>, Vec<Duration>) {
    let config = ProviderConfig::new(ProviderKind::OpenAi)
        .with_base_url(server.openai_base_url())
        .with_key("bench-key");
    let client = ProviderClient::new(config).unwrap();
    let req = ModelRequest::new("bench-model").with_message(Message::user("go"));
    let url = ProviderKind::OpenAi.endpoint(&server.openai_base_url(), "bench-model");
    let body = client.request_body(&req).to_string();
    // Same transport settings as ProviderClient (TCP_NODELAY on).
    let raw = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let ours_once = || async {
        let mut s = client.stream(&req);
        let mut got = 0usize;
        while let Some(ev) = s.next().await {
            if let ModelEvent::TextDelta { text } = ev.unwrap() {
                got += text.len();
            }
        }
        assert_eq!(got, text.len());
    };
    let raw_once = || async {
        let resp = raw
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", "Bearer bench-key")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let mut s = resp.bytes_stream();
        let mut n = 0;
        while let Some(chunk) = s.next().await {
            n += chunk.unwrap().len();
        }
        assert!(n > text.len());
    };
    for _ in 0..3 {
        ours_once().await;
        raw_once().await;
    }
    let (mut base, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        raw_once().await;
        base.push(t.elapsed());
        let t = Instant::now();
        ours_once().await;
        ours.push(t.elapsed());
    }
    (base, ours)
}

async fn loopback_table(requests: usize) {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(45);
    let mut rule = Rule::tool_calls_until("unused", 0);
    rule.final_text = text.clone();
    let server = ScriptedServer::start(Script::rule(rule)).await.unwrap();
    let rounds = 15;
    let per_round = (requests / rounds).max(5);
    let (mut base_p50, mut ours_p50) = (Vec::new(), Vec::new());
    let (mut all_base, mut all_ours) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (base, ours) = loopback_round(&server, per_round, &text).await;
        base_p50.push(stats(base.clone()).2);
        ours_p50.push(stats(ours.clone()).2);
        all_base.extend(base);
        all_ours.extend(ours);
    }
    let limit = Duration::from_millis(30);
    let stalled = |v: &[Duration]| v.iter().filter(|d| **d > limit).count();
    let (sb, so) = (stalled(&base_p50), stalled(&ours_p50));
    base_p50.sort();
    ours_p50.sort();
    let (bb, ob) = (base_p50[0], ours_p50[0]);
    let (_, bmin, b50, b99) = stats(all_base);
    let (_, omin, o50, o99) = stats(all_ours);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "## Per-request overhead over loopback ({rounds} rounds x {per_round} streamed calls each, fresh clients per round; ~2 KB text answer in ~170 SSE chunks)\n"
    );
    println!(
        "| client | best round p50 µs | min µs | p50 µs (all) | p99 µs (all) | rounds stalled (p50 > 30 ms) | best round vs. baseline |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    println!(
        "| baseline: raw reqwest POST, read body to end | {:.0} | {:.0} | {:.0} | {:.0} | {sb}/{rounds} | 1.00x |",
        us(bb),
        us(bmin),
        us(b50),
        us(b99)
    );
    println!(
        "| troupe ProviderClient (OpenAI format), events to end | {:.0} | {:.0} | {:.0} | {:.0} | {so}/{rounds} | {:.2}x |",
        us(ob),
        us(omin),
        us(o50),
        us(o99),
        ob.as_secs_f64() / bb.as_secs_f64()
    );
    println!(
        "\nOverhead per request: {:+.0} µs (best round p50), {:+.0} µs (min)",
        us(ob) - us(bb),
        us(omin) - us(bmin)
    );
    println!(
        "A round counts as stalled when its p50 is above 30 ms (a connection whose small writes wait on delayed ACKs); best-of-rounds excludes such rounds."
    );
    server.shutdown().await;
}

fn main() {
    let a = args();
    parser_table(a.mb);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(loopback_table(a.requests));
}
