//! Decisions on disk: `<session dir>/approvals/<approval_id>.json`, each
//! created once ([`claim`]). The file is the arbiter between every
//! answerer, in this process or another (`troupe approvals`): the first
//! to create it decided, a later one is told who did. It is durable
//! (fsync of the file and of the directory) before the decision is
//! acknowledged, so a crash between a decision and its
//! `troupe.approval_resolved` loses nothing: the resumed session finds
//! the file and applies it once.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use troupe_protocol::ApprovalDecisionRecord;

/// The directory of a session's decisions.
pub fn approvals_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("approvals")
}

/// Why a decision was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Someone decided first.
    #[error("approval {} was already decided: {} by {}", .0.approval_id, .0.decision, .0.by)]
    AlreadyDecided(Box<ApprovalDecisionRecord>),
    /// The id is not a UUID (it names a file).
    #[error("`{0}` is not an approval id: expected a UUID as `troupe approvals list` shows it")]
    BadId(String),
    /// The disk refused.
    #[error("cannot record the decision in {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn check_id(id: &str) -> Result<(), ClaimError> {
    let ok = id.len() == 36
        && id.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    if ok {
        Ok(())
    } else {
        Err(ClaimError::BadId(id.to_string()))
    }
}

/// The decision recorded for `id`, if any (a file that cannot be read or
/// parsed counts as none, with a warning: it was never acknowledged).
pub fn read(dir: &Path, id: &str) -> Option<ApprovalDecisionRecord> {
    check_id(id).ok()?;
    let path = dir.join(format!("{id}.json"));
    let text = fs::read_to_string(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(record) => Some(record),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable approval decision ignored");
            None
        }
    }
}

/// Records `record` as the one decision on its request: written whole to
/// a temporary file, synced, then linked to its name (which fails when
/// the name exists: someone decided first), and the directory synced.
pub fn claim(dir: &Path, record: &ApprovalDecisionRecord) -> Result<(), ClaimError> {
    check_id(&record.approval_id)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ClaimError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let target = dir.join(format!("{}.json", record.approval_id));
    if let Some(existing) = read(dir, &record.approval_id) {
        return Err(ClaimError::AlreadyDecided(Box::new(existing)));
    }
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        record.approval_id,
        std::process::id(),
        fastrand_suffix()
    ));
    let bytes = serde_json::to_vec(record).map_err(|e| ClaimError::Io {
        path: target.clone(),
        source: std::io::Error::other(e),
    })?;
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(ClaimError::Io {
            path: tmp,
            source: e,
        });
    }
    let linked = fs::hard_link(&tmp, &target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => troupe_runtime::fsutil::sync_dir(dir).map_err(io(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            match read(dir, &record.approval_id) {
                Some(existing) => Err(ClaimError::AlreadyDecided(Box::new(existing))),
                None => Err(ClaimError::Io {
                    path: target,
                    source: e,
                }),
            }
        }
        Err(e) => Err(ClaimError::Io {
            path: target,
            source: e,
        }),
    }
}

/// A suffix that keeps two claims of one process apart.
fn fastrand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::ApprovalDecision;

    fn record(id: &str, decision: ApprovalDecision, by: &str) -> ApprovalDecisionRecord {
        ApprovalDecisionRecord {
            approval_id: id.into(),
            decision,
            message: None,
            by: by.into(),
            content: None,
            decided_at_ms: now_ms(),
        }
    }

    #[test]
    fn the_first_claim_wins_and_a_second_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let id = "0193a3c4-1111-7222-8333-444455556666";
        claim(dir.path(), &record(id, ApprovalDecision::Deny, "human")).unwrap();
        let err = claim(
            dir.path(),
            &record(id, ApprovalDecision::Approve, "timeout"),
        )
        .unwrap_err();
        let ClaimError::AlreadyDecided(first) = &err else {
            panic!("{err}");
        };
        assert_eq!(first.decision, ApprovalDecision::Deny);
        assert!(err.to_string().contains("deny by human"), "{err}");
        assert_eq!(read(dir.path(), id).unwrap().by, "human");
        // no temporary file is left behind
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn an_id_that_is_not_a_uuid_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = claim(
            dir.path(),
            &record("../../etc/x", ApprovalDecision::Deny, "human"),
        )
        .unwrap_err();
        assert!(matches!(e, ClaimError::BadId(_)), "{e}");
    }
}
