//! Whether the agents' `sandbox_mode` can run here (docs/security.md): a
//! confined mode the kernel cannot enforce is refused (exit 2), unless
//! `allow_unsandboxed = true`, which warns once and runs unconfined.

use troupe_runtime::tools::{Sandbox, SandboxMode, SandboxStatus};

use crate::failure::Failure;

/// The mode the agents run in, and the one warning line to print, given
/// the mode asked for, the opt-out and what the kernel enforces.
pub fn decide(
    mode: SandboxMode,
    allow_unsandboxed: bool,
    status: &SandboxStatus,
) -> Result<(SandboxMode, Option<String>), Failure> {
    match status {
        SandboxStatus::FullyEnforced => Ok((mode, None)),
        SandboxStatus::NotEnforced(reason) if allow_unsandboxed => Ok((
            SandboxMode::DangerFullAccess,
            Some(format!(
                "troupe: warning: sandbox_mode {mode} cannot be enforced here ({reason}); \
                 commands run unconfined (allow_unsandboxed = true in troupe.toml)"
            )),
        )),
        SandboxStatus::NotEnforced(reason) => Err(Failure::bad_input(anyhow::anyhow!(
            "sandbox_mode {mode} cannot be enforced here: {reason}; run with \
             `--sandbox danger-full-access`, or set `allow_unsandboxed = true` in troupe.toml \
             to run unconfined with a warning (docs/security.md)"
        ))),
    }
}

/// [`decide`] with this machine's probe; prints the warning (once: a
/// run decides once).
pub fn resolve(mode: SandboxMode, allow_unsandboxed: bool) -> Result<SandboxMode, Failure> {
    let (mode, warning) = decide(mode, allow_unsandboxed, &Sandbox::probe_mode(mode))?;
    if let Some(line) = warning {
        eprintln!("{line}");
    }
    Ok(mode)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_unenforceable_mode_is_refused_unless_the_user_opts_out() {
        let missing = SandboxStatus::NotEnforced("Landlock is not supported".into());
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let e = decide(mode, false, &missing).unwrap_err();
            assert_eq!(e.code, crate::failure::exit::BAD_INPUT);
            let text = format!("{:#}", e.error);
            assert!(
                text.contains("allow_unsandboxed") && text.contains(mode.as_str()),
                "{text}"
            );
            assert_eq!(text.lines().count(), 1);
            let (ran, warning) = decide(mode, true, &missing).unwrap();
            assert_eq!(ran, SandboxMode::DangerFullAccess);
            assert_eq!(warning.unwrap().lines().count(), 1);
        }
        let ok = SandboxStatus::FullyEnforced;
        assert_eq!(
            decide(SandboxMode::ReadOnly, false, &ok).unwrap(),
            (SandboxMode::ReadOnly, None)
        );
    }
}
