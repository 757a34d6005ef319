//! Tests of the loop state module: steering queue, loop run state files,
//! loop memory and the `remember` tool, the budget tree. Real files in
//! temp dirs, real threads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod budget;
mod loop_state;
mod memory;
mod steering;

use std::path::Path;

/// The file names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A fresh UUID text.
pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
