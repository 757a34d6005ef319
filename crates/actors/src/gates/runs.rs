//! troupe's own runs for one judgement: required checks on an export of
//! the head commit, and the same commands on an export of the base.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::agent::EventSink;
use troupe_runtime::verifier::{CheckOutput, CheckRunner, VerifyRequest};

use super::Requirements;
use crate::verify::VerifyCall;

/// troupe's own runs for one judgement, each in a clean export of a
/// commit (exported once, on first need, into a temporary directory
/// removed on drop): required checks on the head (what merges, not the
/// worktree with its untracked and ignored files), and, where a class
/// needs it, the same commands on the base.
pub(super) struct Runs {
    worktree: PathBuf,
    head: String,
    base: String,
    timeout: Duration,
    name: String,
    settings: troupe_runtime::verifier::VerifierSettings,
    sink: Arc<dyn EventSink>,
    runner: Option<CheckRunner>,
    head_dir: Option<Result<TempTree, String>>,
    base_dir: Option<Result<TempTree, String>>,
    count: u32,
}

impl Runs {
    pub(super) fn new(
        request: &VerifyRequest,
        needs: &Requirements,
        call: &VerifyCall<'_>,
        sink: &Arc<dyn EventSink>,
    ) -> Self {
        let mut settings = call.settings.clone();
        settings.spool_dir = Some(call.env.log.dir().join("derived"));
        settings.cancel = call.cancel.clone();
        Runs {
            worktree: request.worktree.clone(),
            head: request.head.clone(),
            base: request.base.clone(),
            timeout: needs.check_timeout,
            name: call.name.clone(),
            settings,
            sink: Arc::clone(sink),
            runner: None,
            head_dir: None,
            base_dir: None,
            count: 0,
        }
    }

    fn runner(&mut self) -> Result<&CheckRunner, String> {
        if self.runner.is_none() {
            let runner = CheckRunner::new(
                &self.settings,
                &self.worktree,
                Arc::clone(&self.sink),
                Some(self.name.clone()),
                self.timeout,
            )
            .map_err(|e| format!("troupe cannot run the checks: {e}"))?;
            self.runner = Some(runner);
        }
        self.runner
            .as_ref()
            .ok_or_else(|| "troupe cannot run the checks".to_string())
    }

    fn item_id(&mut self, side: &str) -> String {
        self.count += 1;
        let tail = self.name.rsplit('/').next().unwrap_or(&self.name);
        format!("check-{tail}-{}-{side}", self.count)
    }

    /// A required check on the head's files.
    pub(super) async fn on_head(&mut self, command: &str) -> Result<CheckOutput, String> {
        if self.head_dir.is_none() {
            self.head_dir = Some(TempTree::export(&self.worktree, &self.head));
        }
        let dir = match self.head_dir.as_ref() {
            Some(Ok(tree)) => tree.path.clone(),
            Some(Err(e)) => return Err(format!("troupe cannot export the head: {e}")),
            None => return Err("troupe cannot export the head".into()),
        };
        let id = self.item_id("head");
        let runner = self.runner()?;
        Ok(runner.run(command, &dir, id).await)
    }

    /// `command` on the base, in `cwd` (as the head's run gave it) and
    /// with the worktree's path rewritten to the base's; `None` when the
    /// base cannot be exported, the directory is outside the worktree, or
    /// the checks cannot run.
    pub(super) async fn on_base(
        &mut self,
        command: &str,
        cwd: Option<&str>,
    ) -> Option<CheckOutput> {
        if self.base_dir.is_none() {
            self.base_dir = Some(TempTree::export(&self.worktree, &self.base));
        }
        let root = match self.base_dir.as_ref()? {
            Ok(tree) => tree.path.clone(),
            Err(e) => {
                tracing::warn!(error = %e, "the base cannot be exported; its runs are skipped");
                return None;
            }
        };
        let (command, dir) = on_base_of(command, cwd, &self.worktree, &root)?;
        let id = self.item_id("base");
        let runner = self.runner().ok()?;
        Some(runner.run(&command, &dir, id).await)
    }
}

/// The base's version of a command run in the worktree: every mention of
/// the worktree's path replaced by the base's root, and its directory
/// (`cwd`: relative to the worktree, or absolute inside it) moved there
/// too. `None` for a directory outside the worktree, which has no base.
fn on_base_of(
    command: &str,
    cwd: Option<&str>,
    worktree: &Path,
    base: &Path,
) -> Option<(String, PathBuf)> {
    let mut command = command.to_string();
    let mut dir = base.to_path_buf();
    let mut forms = vec![worktree.to_path_buf()];
    if let Ok(real) = worktree.canonicalize() {
        forms.push(real);
    }
    for form in &forms {
        if let Some(text) = form.to_str().filter(|t| t.len() > 1) {
            command = command.replace(text, &base.to_string_lossy());
        }
    }
    if let Some(cwd) = cwd.filter(|c| !c.is_empty()) {
        let cwd = Path::new(cwd);
        let rest = if cwd.is_absolute() {
            forms.iter().find_map(|f| cwd.strip_prefix(f).ok())?
        } else {
            cwd
        };
        if rest
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return None;
        }
        dir = dir.join(rest);
    }
    Some((command, dir))
}

/// A commit's files in a temporary directory, removed on drop.
struct TempTree {
    path: PathBuf,
}

impl TempTree {
    fn export(repo: &Path, rev: &str) -> Result<TempTree, String> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let path = std::env::temp_dir().join(format!("troupe-base-{}", &id[..12]));
        let tree = TempTree { path };
        troupe_worktree::export_commit(repo, rev, &tree.path).map_err(|e| e.to_string())?;
        Ok(tree)
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot remove the base's files");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_base_run_is_the_same_command_in_the_same_place_of_the_base() {
        let wt = Path::new("/work/repo/.vtcode/worktrees/s-fixer");
        let base = Path::new("/tmp/troupe-base-1");
        assert_eq!(
            on_base_of("sh test.sh", None, wt, base),
            Some(("sh test.sh".into(), base.to_path_buf()))
        );
        // The worktree's path, wherever it appears, becomes the base's.
        assert_eq!(
            on_base_of(
                "cd /work/repo/.vtcode/worktrees/s-fixer && python3 test_calc.py",
                None,
                wt,
                base
            ),
            Some((
                "cd /tmp/troupe-base-1 && python3 test_calc.py".into(),
                base.to_path_buf()
            ))
        );
        // A directory inside the worktree moves with it, relative or absolute.
        for cwd in ["sub/dir", "/work/repo/.vtcode/worktrees/s-fixer/sub/dir"] {
            assert_eq!(
                on_base_of("sh t.sh", Some(cwd), wt, base),
                Some(("sh t.sh".into(), base.join("sub/dir"))),
                "{cwd}"
            );
        }
        // Outside the worktree there is no base to run in.
        assert_eq!(on_base_of("sh t.sh", Some("/etc"), wt, base), None);
        assert_eq!(on_base_of("sh t.sh", Some("../other"), wt, base), None);
    }
}
