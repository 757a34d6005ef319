//! Faults the scripted server cannot stage: a stall after part of the
//! stream was handed to the caller. A minimal HTTP/1.1 server on a raw
//! socket sends the headers, one SSE event, then nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use troupe_provider::{
    ModelEvent, ProviderClient, ProviderConfig, ProviderError, RetryPolicy, Timeouts,
};

use crate::scripted::{Outcome, call, request};

/// Answers every request with headers, one text chunk, then a stall;
/// counts the requests.
async fn stalling_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let task = tokio::spawn(async move {
        let mut open = Vec::new();
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let _ = sock.read(&mut buf).await.unwrap();
            let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(chunk.as_bytes()).await.unwrap();
            sock.flush().await.unwrap();
            open.push(sock); // keep it open and silent
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (format!("http://{addr}/v1"), served, task)
}

/// One call of the usual request through a client of `config` that
/// retries `max_retries` times, backing off from `initial_backoff`.
async fn call_retrying(
    config: ProviderConfig,
    max_retries: u32,
    initial_backoff: Duration,
) -> Outcome {
    let config = config.with_retry(RetryPolicy {
        max_retries,
        initial_backoff,
        max_backoff: Duration::from_secs(1),
    });
    let client = ProviderClient::new(config).unwrap();
    call(&client, &request()).await
}

#[tokio::test]
async fn idle_timeout_after_delivery_is_stream_broken_and_not_retried() {
    let (base, served, server) = stalling_server().await;
    let config = ProviderConfig::openai()
        .with_base_url(base)
        .without_key()
        .with_timeouts(Timeouts {
            idle: Duration::from_millis(300),
            ..Timeouts::default()
        });
    let o = call_retrying(config, 3, Duration::from_millis(10)).await;
    assert_eq!(o.events, vec![ModelEvent::TextDelta { text: "Hel".into() }]);
    match &o.error {
        Some(ProviderError::StreamBroken { message }) => assert!(message.contains("idle timeout")),
        other => panic!("{other:?}"),
    }
    assert!(o.elapsed < Duration::from_secs(2), "{:?}", o.elapsed);
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "not retried after an event was handed over"
    );
    server.abort();
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let config = ProviderConfig::openai()
        .with_base_url(format!("http://{addr}/v1"))
        .without_key();
    let o = call_retrying(config, 2, Duration::from_millis(100)).await;
    assert!(o.events.is_empty());
    match &o.error {
        Some(ProviderError::Retryable { status: None, .. }) => {}
        other => panic!("{other:?}"),
    }
    // Two backoffs: at least 50 ms + 100 ms with equal jitter.
    assert!(o.elapsed >= Duration::from_millis(150), "{:?}", o.elapsed);
}
