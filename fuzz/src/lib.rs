//! Shared drivers of the fuzz targets in `fuzz_targets/`. Each target is a
//! one-line `fuzz_target!` calling one of these, so the drivers can be
//! read (and reused by a reproduction) in one place.

pub mod log;
pub mod stream;
pub mod tools;

/// The input as UTF-8, or `None` (the parsers take `&str`; the callers
/// read files with `read_to_string`, which refuses other bytes).
pub fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A directory for the targets that need files: under `/dev/shm` when it
/// exists (fsync and rename are cheap there), else the system temp dir.
/// One per process, removed at exit only when the process ends normally.
pub fn scratch_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let made = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("troupe-fuzz-")
                .tempdir_in(shm)
        } else {
            tempfile::Builder::new().prefix("troupe-fuzz-").tempdir()
        };
        made.unwrap_or_else(|e| panic!("cannot create the fuzz scratch dir: {e}"))
    })
    .path()
}
