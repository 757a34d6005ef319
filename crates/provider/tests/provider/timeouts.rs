//! The three time limits of an attempt, scaled down: each one that trips
//! says which limit it was, its value and the `troupe.toml` key that
//! raises it; a wait under a limit is accepted. The local profile's own
//! values (minutes) are checked as a resolution, not waited for.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use troupe_provider::{
    ModelEvent, ProviderClient, ProviderConfig, ProviderError, ProviderProfile, RetryPolicy,
    Timeouts,
};
use troupe_testkit::{Reply, Script, ScriptedServer};

use crate::scripted::{call, request};

/// A raw HTTP/1.1 server on 127.0.0.1 that answers one request with
/// headers and one SSE text event, then keeps the connection open and
/// silent: a local server that stopped mid-stream.
async fn stops_mid_stream() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut open = Vec::new();
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 64 * 1024];
            let _ = sock.read(&mut buf).await;
            let event =
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Thinking\"}}]}\n\n";
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(chunk.as_bytes()).await;
            let _ = sock.flush().await;
            open.push(sock);
        }
    });
    (format!("http://{addr}/v1"), task)
}

fn local(base: &str, timeouts: Timeouts) -> ProviderConfig {
    ProviderConfig::openai()
        .with_base_url(base)
        .without_key()
        .with_profile(ProviderProfile::detect(base))
        .with_name("llama")
        .with_timeouts(timeouts)
        .with_retry(RetryPolicy::none())
}

fn message(error: &Option<ProviderError>) -> String {
    match error {
        Some(e) => e.to_string(),
        None => panic!("the call succeeded"),
    }
}

#[tokio::test]
async fn a_stream_that_stops_mid_way_trips_the_idle_limit_and_says_so() {
    let (base, server) = stops_mid_stream().await;
    let config = local(
        &base,
        Timeouts {
            idle: Duration::from_millis(300),
            ..Timeouts::local()
        },
    );
    assert_eq!(config.profile, ProviderProfile::Local, "a loopback server");
    let client = ProviderClient::new(config).unwrap();
    let o = call(&client, &request()).await;
    assert_eq!(
        o.events,
        vec![ModelEvent::TextDelta {
            text: "Thinking".into()
        }]
    );
    assert!(
        matches!(o.error, Some(ProviderError::StreamBroken { .. })),
        "{:?}",
        o.error
    );
    let text = message(&o.error);
    for part in [
        "idle timeout",
        "300 ms",
        "`idle_timeout_ms`",
        "[providers.llama]",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(
        !text.contains("profile = \"local\""),
        "already local: {text}"
    );
    assert!(o.elapsed < Duration::from_secs(3), "{:?}", o.elapsed);
    server.abort();
}

#[tokio::test]
async fn slow_headers_trip_the_first_byte_limit_and_say_so() {
    let server = ScriptedServer::start(Script::replies(vec![
        Reply::text("late").with_delay_ms(3_000),
    ]))
    .await
    .unwrap();
    // A hosted-profile config (as `profile = "hosted"` gives) on the
    // scripted server.
    let config = ProviderConfig::openai()
        .with_base_url(server.openai_base_url())
        .without_key()
        .with_name("openai")
        .with_timeouts(Timeouts {
            first_byte: Duration::from_millis(400),
            ..Timeouts::hosted()
        })
        .with_retry(RetryPolicy::none());
    let client = ProviderClient::new(config).unwrap();
    let o = call(&client, &request()).await;
    assert!(o.events.is_empty());
    assert!(
        matches!(o.error, Some(ProviderError::Retryable { status: None, .. })),
        "{:?}",
        o.error
    );
    let text = message(&o.error);
    for part in [
        "first-byte timeout",
        "400 ms",
        "`first_byte_timeout_ms` (now 400)",
        "[providers.openai]",
        "profile = \"local\"",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(o.elapsed < Duration::from_secs(2), "{:?}", o.elapsed);
}

#[tokio::test]
async fn a_slow_first_byte_under_the_limit_is_accepted() {
    // Scaled down: the first byte comes after 600 ms, past a 300 ms
    // limit (as a 4-minute prompt is past the hosted 60 s) and under a
    // 3 s one (as it is under the local 20 minutes).
    let slow = || Script::replies(vec![Reply::text("first token").with_delay_ms(600)]);
    let server = ScriptedServer::start(slow()).await.unwrap();
    let base = server.openai_base_url();
    let tight = local(
        &base,
        Timeouts {
            first_byte: Duration::from_millis(300),
            ..Timeouts::local()
        },
    );
    let o = call(&ProviderClient::new(tight).unwrap(), &request()).await;
    assert!(message(&o.error).contains("first-byte timeout"));

    let server = ScriptedServer::start(slow()).await.unwrap();
    let base = server.openai_base_url();
    let roomy = local(
        &base,
        Timeouts {
            first_byte: Duration::from_secs(3),
            idle: Duration::from_secs(3),
            ..Timeouts::local()
        },
    );
    let o = call(&ProviderClient::new(roomy).unwrap(), &request()).await;
    assert!(o.error.is_none(), "{:?}", o.error);
    assert_eq!(o.response().text, "first token");
    assert!(o.elapsed >= Duration::from_millis(600), "{:?}", o.elapsed);
    // The local profile's own limits cover the real case: 12,000 prompt
    // tokens at 20 tokens/s before the first token, on either side of
    // the headers.
    let real = Duration::from_secs(12_000 / 20);
    let t = ProviderProfile::detect(&base).timeouts();
    assert!(t.first_byte > real && t.idle > real, "{t:?}");
    assert!(
        Timeouts::hosted().first_byte < real,
        "the old default trips it"
    );
}

#[tokio::test]
async fn a_connect_that_never_completes_trips_the_connect_limit_and_says_so() {
    // A listener that never accepts, with a backlog of 1: once its queue
    // is full the kernel drops further SYNs, so a connect hangs.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let listener = socket.listen(1).unwrap();
    let mut held = Vec::new();
    let mut full = false;
    for _ in 0..16 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(s)) => held.push(s),
            _ => {
                full = true;
                break;
            }
        }
    }
    assert!(full, "the backlog never filled");
    let config = local(
        &format!("http://{addr}/v1"),
        Timeouts {
            connect: Duration::from_millis(300),
            ..Timeouts::local()
        },
    );
    let o = call(&ProviderClient::new(config).unwrap(), &request()).await;
    let text = message(&o.error);
    for part in [
        "connect timeout",
        "300 ms",
        "`connect_timeout_ms`",
        "[providers.llama]",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(o.elapsed < Duration::from_secs(3), "{:?}", o.elapsed);
    drop(listener);
}

#[test]
fn loopback_hosts_are_local_and_others_hosted() {
    for url in [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434",
        "http://[::1]:8000/v1",
        "http://[::ffff:127.0.0.1]:8000/v1",
        "http://api.localhost/v1",
    ] {
        assert_eq!(
            ProviderProfile::detect(url),
            ProviderProfile::Local,
            "{url}"
        );
    }
    for url in [
        "https://api.openai.com/v1",
        "http://10.0.0.5:8000/v1",
        "http://localhost.evil.example/v1",
        "not a url",
        "",
    ] {
        assert_eq!(
            ProviderProfile::detect(url),
            ProviderProfile::Hosted,
            "{url}"
        );
    }
    assert_eq!(ProviderProfile::Local.timeouts(), Timeouts::local());
    assert_eq!(Timeouts::default(), Timeouts::hosted());
}
