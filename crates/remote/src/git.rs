//! Repositories across machines as git bundles: checkpoints and the
//! result commit back from a worker, made and applied in-process (git2;
//! the base out to it: [`crate::cache`]).

use std::collections::HashMap;
use std::path::Path;

use async_nats::jetstream::object_store::{ObjectMetadata, ObjectStore};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::error::RemoteError;

const AUTHOR: [&str; 4] = [
    "-c",
    "user.name=troupe worker",
    "-c",
    "user.email=worker@troupe.invalid",
];

/// Runs `git ARGS` in `dir`; its stdout, trimmed.
pub async fn git(dir: &Path, args: &[&str]) -> Result<String, RemoteError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(AUTHOR)
        .args(args)
        .output()
        .await
        .map_err(|e| RemoteError::Git {
            what: args.join(" "),
            why: format!("cannot run git ({e}); install git"),
        })?;
    if !out.status.success() {
        return Err(RemoteError::Git {
            what: args.join(" "),
            why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Stores the file at `file` as object `name` (with `metadata`), then
/// removes the file.
pub async fn put_file(
    store: &ObjectStore,
    file: &Path,
    name: &str,
    metadata: HashMap<String, String>,
) -> Result<(), RemoteError> {
    // Retried as event publishes are (a NATS restart mid-upload times its
    // chunk acks out): a transient outage does not fail the incarnation.
    let mut last = String::new();
    for attempt in 0..STORE_ATTEMPTS {
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(|e| RemoteError::io(format!("open {}", file.display()), e))?;
        let meta = ObjectMetadata {
            name: name.to_string(),
            metadata: metadata.clone(),
            ..Default::default()
        };
        match store.put(meta, &mut f).await {
            Ok(_) => {
                let _ = tokio::fs::remove_file(file).await;
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        tracing::debug!(attempt, object = name, error = %last, "storing a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    let _ = tokio::fs::remove_file(file).await;
    Err(RemoteError::Nats(format!("store {name}: {last}")))
}

/// How often, and how far apart, a bundle's upload or download is tried
/// (30 s in all, as an event publish).
const STORE_ATTEMPTS: u32 = 120;
const STORE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// Fetches object `name` into `scratch` and returns the file.
pub async fn get_bundle(
    store: &ObjectStore,
    name: &str,
    scratch: &Path,
) -> Result<std::path::PathBuf, RemoteError> {
    Ok(get_object(store, name, scratch).await?.0)
}

/// Fetches object `name` into `scratch`: the file and the object's
/// metadata.
pub async fn get_object(
    store: &ObjectStore,
    name: &str,
    scratch: &Path,
) -> Result<(std::path::PathBuf, HashMap<String, String>), RemoteError> {
    let mut last = String::new();
    let mut got = None;
    for attempt in 0..STORE_ATTEMPTS {
        match fetch(store, name).await {
            Ok(fetched) => {
                got = Some(fetched);
                break;
            }
            // Not there is final; anything else may be a restarting server.
            Err(FetchError::NotFound(e)) => {
                return Err(RemoteError::Nats(format!("fetch {name}: {e}")));
            }
            Err(FetchError::Transient(e)) => last = e,
        }
        tracing::debug!(attempt, object = name, error = %last, "fetching a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    let Some((bytes, metadata)) = got else {
        return Err(RemoteError::Nats(format!("fetch {name}: {last}")));
    };
    let file = scratch.join(format!("{}.bundle", name.replace('/', "_")));
    tokio::fs::write(&file, bytes)
        .await
        .map_err(|e| RemoteError::io(format!("write {}", file.display()), e))?;
    Ok((file, metadata))
}

enum FetchError {
    NotFound(String),
    Transient(String),
}

/// Object `name`'s bytes and metadata, in one try.
async fn fetch(
    store: &ObjectStore,
    name: &str,
) -> Result<(Vec<u8>, HashMap<String, String>), FetchError> {
    use async_nats::jetstream::object_store::GetErrorKind;
    let mut obj = store.get(name).await.map_err(|e| match e.kind() {
        GetErrorKind::NotFound | GetErrorKind::BucketLink | GetErrorKind::InvalidName => {
            FetchError::NotFound(e.to_string())
        }
        _ => FetchError::Transient(e.to_string()),
    })?;
    let mut bytes = Vec::new();
    obj.read_to_end(&mut bytes)
        .await
        .map_err(|e| FetchError::Transient(e.to_string()))?;
    Ok((bytes, obj.info().metadata.clone()))
}

/// Puts the tree of the commit in `bundle` (a checkpoint or a result)
/// into the working copy at `dir`, index and files, leaving `HEAD` where
/// it is: what `git fetch BUNDLE` and `git read-tree -u --reset` did, in
/// process (git2: no `git` process on a call's path). A bundle whose
/// prerequisites or objects the repository lacks is an error naming the
/// object.
pub async fn apply_tree(bundle: &Path, dir: &Path) -> Result<(), RemoteError> {
    let (b, d) = (bundle.to_path_buf(), dir.to_path_buf());
    tokio::task::spawn_blocking(move || apply_bundle(&b, &d))
        .await
        .map_err(|e| RemoteError::Git {
            what: "apply a bundle".into(),
            why: e.to_string(),
        })?
}

/// The objects of a bundle below which they are written loose, as `git
/// fetch` does (`fetch.unpackLimit`); a bigger one is kept as a pack.
const UNPACK_LIMIT: usize = 100;

/// [`apply_tree`], blocking.
fn apply_bundle(bundle: &Path, dir: &Path) -> Result<(), RemoteError> {
    let failed = |what: &str| {
        let what = format!("{what} ({} into {})", bundle.display(), dir.display());
        move |e: git2::Error| RemoteError::Git {
            what: what.clone(),
            why: e.message().to_string(),
        }
    };
    let bytes = std::fs::read(bundle)
        .map_err(|e| RemoteError::io(format!("read {}", bundle.display()), e))?;
    let parsed = parse_bundle(&bytes).map_err(|why| RemoteError::Git {
        what: format!("read {}", bundle.display()),
        why,
    })?;
    let repo = git2::Repository::open(dir).map_err(failed("open the repository"))?;
    let odb = repo.odb().map_err(failed("open the object database"))?;
    if let Some(p) = parsed.prerequisites.iter().find(|p| !odb.exists(**p)) {
        return Err(RemoteError::Git {
            what: format!("apply {}", bundle.display()),
            why: format!(
                "the repository at {} lacks its prerequisite commit {p}",
                dir.display()
            ),
        });
    }
    if !parsed.pack.is_empty() {
        let scratch = bundle.parent().unwrap_or(dir);
        unpack(&odb, parsed.pack, scratch)?;
    }
    let commit = repo
        .find_commit(parsed.head)
        .map_err(|e| RemoteError::Git {
            what: format!("apply {}", bundle.display()),
            why: format!(
                "its commit {} is not in the repository: {}",
                parsed.head,
                e.message()
            ),
        })?;
    let tree = commit.tree().map_err(failed("read the commit's tree"))?;
    // A checkout killed half-way is done again by the next writer of this
    // git dir (the note names the commit), whatever that writer is.
    let (_write, _) =
        troupe_worktree::GitWrite::begin(&repo, &troupe_worktree::apply_note(parsed.head))
            .map_err(|e| RemoteError::Git {
                what: format!("apply {}", bundle.display()),
                why: e.to_string(),
            })?;
    let mut co = git2::build::CheckoutBuilder::new();
    co.force();
    repo.checkout_tree(tree.as_object(), Some(&mut co))
        .map_err(failed("check the tree out"))?;
    // The index as `read-tree --reset` leaves it (checkout wrote the
    // entries it touched; any other is reset to the tree).
    let mut index = repo.index().map_err(failed("read the index"))?;
    if index.write_tree().ok() != Some(tree.id()) {
        index.read_tree(&tree).map_err(failed("reset the index"))?;
        index.write().map_err(failed("write the index"))?;
    }
    Ok(())
}

/// A v2 bundle: its prerequisite commits, its (first) head, its pack.
struct Bundle<'a> {
    prerequisites: Vec<git2::Oid>,
    head: git2::Oid,
    pack: &'a [u8],
}

fn parse_bundle(bytes: &[u8]) -> Result<Bundle<'_>, String> {
    let mut rest = bytes;
    let mut line = || -> Result<&[u8], String> {
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("its header does not end")?;
        let (l, r) = rest.split_at(end);
        rest = &r[1..];
        Ok(l)
    };
    if line()? != b"# v2 git bundle" {
        return Err("not a v2 git bundle".into());
    }
    let oid = |hex: &[u8]| {
        std::str::from_utf8(hex)
            .ok()
            .and_then(|h| git2::Oid::from_str(h).ok())
            .ok_or_else(|| {
                format!(
                    "a bad object id in its header: {}",
                    String::from_utf8_lossy(hex)
                )
            })
    };
    let mut prerequisites = Vec::new();
    let mut head = None;
    loop {
        let l = line()?;
        if l.is_empty() {
            break;
        }
        if let Some(p) = l.strip_prefix(b"-") {
            let hex = p.split(|b| *b == b' ').next().unwrap_or(p);
            prerequisites.push(oid(hex)?);
        } else if head.is_none() {
            let hex = l.split(|b| *b == b' ').next().unwrap_or(l);
            head = Some(oid(hex)?);
        }
    }
    let head = head.ok_or("it names no commit")?;
    Ok(Bundle {
        prerequisites,
        head,
        pack: rest,
    })
}

/// Adds the objects of `pack` to `odb`: loose when they are few, else the
/// pack itself (indexed in `scratch` first, its thin bases from `odb`).
fn unpack(odb: &git2::Odb<'_>, pack: &[u8], scratch: &Path) -> Result<(), RemoteError> {
    use std::io::Write;
    let failed = |what: &'static str| {
        move |e: git2::Error| RemoteError::Git {
            what: what.into(),
            why: e.message().to_string(),
        }
    };
    let tmp = scratch.join(format!("unpack-{}", uuid::Uuid::new_v4().simple()));
    let packs = tmp.join("pack");
    std::fs::create_dir_all(&packs)
        .map_err(|e| RemoteError::io(format!("create {}", packs.display()), e))?;
    let copied = (|| {
        let mut indexer =
            git2::Indexer::new(Some(odb), &packs, 0o644, true).map_err(failed("index a pack"))?;
        indexer.write_all(pack).map_err(|e| RemoteError::Git {
            what: "index a pack".into(),
            why: e.to_string(),
        })?;
        indexer.commit().map_err(failed("index a pack"))?;
        let temp = git2::Odb::new().map_err(failed("open a pack"))?;
        temp.add_disk_alternate(&tmp.to_string_lossy())
            .map_err(failed("open a pack"))?;
        let mut ids = Vec::new();
        temp.foreach(|id| {
            ids.push(*id);
            true
        })
        .map_err(failed("list a pack"))?;
        if ids.len() >= UNPACK_LIMIT {
            return Ok(false);
        }
        for id in ids {
            if odb.exists(id) {
                continue;
            }
            let obj = temp.read(id).map_err(failed("read a pack's object"))?;
            odb.write(obj.kind(), obj.data())
                .map_err(failed("write an object"))?;
        }
        Ok(true)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    if !copied? {
        let mut writer = odb.packwriter().map_err(failed("store a pack"))?;
        writer.write_all(pack).map_err(|e| RemoteError::Git {
            what: "store a pack".into(),
            why: e.to_string(),
        })?;
        writer.commit().map_err(failed("store a pack"))?;
    }
    Ok(())
}

/// Commits everything in the working copy at `dir` onto its branch
/// `troupe-bundle` (`HEAD` points to it, see [`crate::cache`]) and stores
/// the commits since `since` as bundle object `name`, in-process (git2:
/// no `git` process on a call's path); `false`, and nothing stored, when
/// nothing changed since `HEAD`.
pub async fn checkpoint(
    store: &ObjectStore,
    dir: &Path,
    since: &str,
    message: &str,
    name: &str,
) -> Result<bool, RemoteError> {
    let (dir2, since2, message2) = (dir.to_path_buf(), since.to_string(), message.to_string());
    let bundle = tokio::task::spawn_blocking(move || commit_and_bundle(&dir2, &since2, &message2))
        .await
        .map_err(|e| RemoteError::Git {
            what: "checkpoint".into(),
            why: e.to_string(),
        })?
        .map_err(|e| RemoteError::Git {
            what: format!("checkpoint of {}", dir.display()),
            why: e.message().to_string(),
        })?;
    let Some(bytes) = bundle else {
        return Ok(false);
    };
    put_bytes(store, name, &bytes).await?;
    Ok(true)
}

/// The bundle (`since..troupe-bundle`) after committing the working copy,
/// or `None` when it is clean.
fn commit_and_bundle(
    dir: &Path,
    since: &str,
    message: &str,
) -> Result<Option<Vec<u8>>, git2::Error> {
    let repo = git2::Repository::open(dir)?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true);
    if repo.statuses(Some(&mut opts))?.is_empty() {
        return Ok(None);
    }
    // A worker killed mid-commit leaves no lock for the next commit here.
    let (_write, _) = troupe_worktree::GitWrite::begin(&repo, "commit")
        .map_err(|e| git2::Error::from_str(&e.to_string()))?;
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head()?.peel_to_commit()?;
    let sig = git2::Signature::now("troupe worker", "worker@troupe.invalid")?;
    let commit = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])?;
    let base = git2::Oid::from_str(since)?;
    let mut walk = repo.revwalk()?;
    walk.push(commit)?;
    walk.hide(base)?;
    let mut pack = repo.packbuilder()?;
    pack.insert_walk(&mut walk)?;
    let mut buf = git2::Buf::new();
    pack.write_buf(&mut buf)?;
    let mut out =
        format!("# v2 git bundle\n-{base}\n{commit} refs/heads/troupe-bundle\n\n").into_bytes();
    out.extend_from_slice(&buf);
    Ok(Some(out))
}

/// Stores `bytes` as object `name`, retried as [`put_file`].
async fn put_bytes(store: &ObjectStore, name: &str, bytes: &[u8]) -> Result<(), RemoteError> {
    let mut last = String::new();
    for attempt in 0..STORE_ATTEMPTS {
        let mut reader = bytes;
        match store.put(name, &mut reader).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tracing::debug!(attempt, object = name, error = %last, "storing a bundle failed; retrying");
        tokio::time::sleep(STORE_RETRY).await;
    }
    Err(RemoteError::Nats(format!("store {name}: {last}")))
}

/// Whether the working copy at `dir` differs from its `HEAD` (in-process).
pub async fn is_dirty(dir: &Path) -> Result<bool, RemoteError> {
    let d = dir.to_path_buf();
    let dirty = tokio::task::spawn_blocking(move || -> Result<bool, git2::Error> {
        let repo = git2::Repository::open(&d)?;
        let mut opts = git2::StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true);
        Ok(!repo.statuses(Some(&mut opts))?.is_empty())
    })
    .await
    .map_err(|e| RemoteError::Git {
        what: "status".into(),
        why: e.to_string(),
    })?;
    dirty.map_err(|e| RemoteError::Git {
        what: format!("status of {}", dir.display()),
        why: e.message().to_string(),
    })
}
