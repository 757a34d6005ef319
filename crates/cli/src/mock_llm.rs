//! `troupe mock-llm --script FILE [--listen 127.0.0.1:PORT]`: serve a script
//! with the scripted model server until Ctrl-C.
//!
//! The first line of stdout is `listening on http://ADDR`, so a test or a
//! benchmark that starts the binary with port 0 reads the bound address
//! from it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use troupe_testkit::{Script, ScriptedServer};

/// Loads `script`, serves it on `listen` and prints the bound address as the
/// first line of stdout; returns after Ctrl-C, once the server has stopped.
pub async fn run(script: &Path, listen: SocketAddr) -> anyhow::Result<()> {
    let script = Script::from_path(script)?;
    let server = ScriptedServer::start_on(script, listen).await?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on {}", server.base_url())?;
    out.flush().context("flushing stdout")?;
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    let violations = server.violations();
    let requests = server.request_count();
    server.shutdown().await;
    writeln!(
        out,
        "served {requests} request(s), {} invariant violation(s)",
        violations.len()
    )?;
    for v in violations {
        writeln!(out, "  - {v}")?;
    }
    Ok(())
}
