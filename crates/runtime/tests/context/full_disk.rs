//! A history archive on a full disk, on a real filesystem: a 64 KiB tmpfs
//! (mounting needs root: `#[ignore = "needs root"]`, run by `.ci/run`).

use std::path::Path;

use troupe_runtime::context::HistoryArchive;
use troupe_runtime::provider::Message;

// The store's tests own the tmpfs helper; one copy, included from there.
#[allow(dead_code)]
#[path = "../../../store/tests/store/tmpfs.rs"]
mod tmpfs;

use tmpfs::Tmpfs;

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.contains(".tmp-"))
        .collect()
}

#[test]
#[ignore = "needs root"]
fn a_history_archive_on_a_full_disk_fails_and_leaves_no_temp_file() {
    let fs = Tmpfs::mount("64k");
    let derived = fs.path().join("derived");
    let mut archive = HistoryArchive::new(&derived, None);
    // A small archive fits; a large one does not.
    archive.write_history(&[Message::user("small")]).unwrap();
    let big = vec![Message::user("z".repeat(256 * 1024))];
    let err = archive.write_history(&big).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(leftovers(&derived), Vec::<String>::new());
    // The space is back: the next small archive is written.
    let (n, _) = archive.write_history(&[Message::user("again")]).unwrap();
    assert_eq!(n, 2);
}
