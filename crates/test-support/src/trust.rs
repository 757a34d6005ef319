//! Workspace trust in tests (docs/security.md#workspace-trust): every
//! troupe process a helper of this crate starts gets this test process's
//! own user configuration directory (`TROUPE_CONFIG_DIR`), never the
//! developer's `~/.config/troupe`; [`trust`] trusts a workspace there
//! through the binary, as a user would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// This test process's configuration directory (not created until a
/// workspace is trusted).
pub fn config_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::temp_dir().join(format!("troupe-test-config-{}", std::process::id()))
    })
}

/// `cmd` with [`config_dir`] as its `TROUPE_CONFIG_DIR`.
pub fn isolated(cmd: &mut Command) -> &mut Command {
    cmd.env("TROUPE_CONFIG_DIR", config_dir())
}

/// Trusts `ws`'s troupe.toml, as it is now, in [`config_dir`] (what
/// `troupe trust WS` records), without a process: for fixtures written
/// by a test, such as [`crate::git::repo_at`]'s.
pub fn trust_fixture(ws: &Path) {
    use troupe_runtime::config::trust::{TrustStore, assess};
    let env = |var: &str| (var == "TROUPE_CONFIG_DIR").then(|| config_dir().display().to_string());
    let assessment = assess(
        ws,
        troupe_protocol::ApprovalPolicy::Untrusted,
        &troupe_runtime::config::ConfigOverrides::default(),
        &env,
    )
    .unwrap_or_else(|e| panic!("cannot assess {}: {e}", ws.display()));
    TrustStore::in_dir(config_dir().to_path_buf())
        .trust(&assessment)
        .unwrap_or_else(|e| panic!("cannot trust {}: {e}", ws.display()));
}

/// `troupe trust WS` with [`config_dir`]: the workspace's troupe.toml,
/// as it is now, is trusted for the troupe processes this crate's helpers
/// start (and any given [`isolated`]).
pub fn trust(bin: &Path, ws: &Path) {
    let out = isolated(&mut Command::new(bin))
        .arg("trust")
        .arg(ws)
        .env("TROUPE_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} trust: {e}", bin.display()));
    assert!(
        out.status.success(),
        "troupe trust {} failed: {}",
        ws.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
