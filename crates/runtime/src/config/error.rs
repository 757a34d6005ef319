//! [`ConfigError`]: every way a configuration can be wrong, each naming
//! where (file and line, environment variable, or flag) and the fix.
//!
//! No variant ever holds a secret: keys are only named by their
//! environment variable, and a string value is never quoted back in a
//! type error.

use std::fmt;
use std::path::PathBuf;

use super::locate::Locator;

/// Why a configuration could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `troupe.toml` exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message} (fix the syntax at that spot)", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// A key troupe does not know.
    #[error(
        "{}: unknown key `{key}` in {}; valid keys: {} (fix the key or remove it{})",
        Where(path, *line),
        TableName(table),
        ValidKeys(valid),
        Suggestion(key, valid)
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key, when found.
        line: Option<usize>,
        /// The unknown key.
        key: String,
        /// The dotted path of its table (empty for the top level).
        table: String,
        /// The keys that table accepts.
        valid: Vec<String>,
    },
    /// A known key with a value of the wrong type or out of range.
    #[error("{}: `{key}`: {message} ({fix})", Where(path, *line))]
    InvalidValue {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key, when found.
        line: Option<usize>,
        /// The dotted key (`agent.max_turns`).
        key: String,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// A literal `api_key`: keys never go in the file.
    #[error(
        "{}: `api_key` is not allowed in {}: API keys never go in troupe.toml \
         (remove it, set `api_key_env = \"SOME_VAR\"` and export the key in that variable)",
        Where(path, Some(*line)),
        TableName(table)
    )]
    LiteralApiKey {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: usize,
        /// The dotted path of its table.
        table: String,
    },
    /// An environment variable holds a value that cannot be used.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong and the fix.
        message: String,
    },
    /// A command-line flag holds a value that cannot be used.
    #[error("flag {flag}: {message}")]
    Flag {
        /// The flag (`--max-turns`).
        flag: String,
        /// What is wrong and the fix.
        message: String,
    },
    /// A provider name (set through the Rust API) that is neither a kind
    /// nor a `[providers.<name>]` table.
    #[error(
        "unknown provider `{name}`: use openai, anthropic, gemini, openai-responses or a name defined under [providers]"
    )]
    UnknownProvider {
        /// The name.
        name: String,
    },
}

impl ConfigError {
    /// The 1-based line in `troupe.toml` the error points at, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::Syntax { line, .. } | Self::LiteralApiKey { line, .. } => Some(*line),
            Self::UnknownKey { line, .. } | Self::InvalidValue { line, .. } => *line,
            _ => None,
        }
    }

    /// Turns a serde error from deserializing `troupe.toml` into a
    /// located, explained error.
    pub(crate) fn from_toml(
        path: PathBuf,
        text: &str,
        loc: &Locator<'_>,
        err: toml::de::Error,
    ) -> Self {
        let (line, at) = match err.span() {
            Some(span) => (
                Some(Locator::position(text, span.start).0),
                loc.path_at(span.start),
            ),
            None => (None, Vec::new()),
        };
        let message = err.message().trim().to_owned();
        if let Some(rest) = message.strip_prefix("unknown field ") {
            let key = first_quoted(rest).unwrap_or_default();
            let table = table_of(&at, &key);
            return Self::UnknownKey {
                path,
                line,
                key,
                table,
                valid: all_quoted(rest).into_iter().skip(1).collect(),
            };
        }
        let key = at.join(".");
        let (message, fix) = explain(&message);
        Self::InvalidValue {
            path,
            line,
            key,
            message,
            fix,
        }
    }
}

/// The table holding `key` when the error path ends in it.
fn table_of(at: &[String], key: &str) -> String {
    match at.split_last() {
        Some((last, parent)) if last == key => parent.join("."),
        _ => at.join("."),
    }
}

/// Rewrites serde's message in the file's words, without quoting string
/// values back (they may be secrets), and picks the fix.
fn explain(message: &str) -> (String, String) {
    let mismatch = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    if let Some(rest) = mismatch
        && let Some((found, expected)) = rest.rsplit_once(", expected ")
    {
        let expected = type_name(expected);
        let found = if found.starts_with("string") {
            "a string"
        } else {
            found
        };
        return (
            format!("expected {expected}, found {found}"),
            format!("write {expected} here"),
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let quoted = all_quoted(rest);
        let (value, valid) = quoted
            .split_first()
            .map_or(("", &[][..]), |(v, r)| (v.as_str(), r));
        return (
            format!(
                "unknown value `{value}`; valid values: {}",
                valid.join(", ")
            ),
            "use one of the valid values".to_owned(),
        );
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        let key = first_quoted(rest).unwrap_or_default();
        return (
            format!("missing key `{key}`"),
            format!("add `{key} = ...` to this table"),
        );
    }
    (message.to_owned(), "see docs/config.md".to_owned())
}

/// The valid key closest to `key` (edit distance at most 2), if any.
fn closest<'v>(key: &str, valid: &'v [String]) -> Option<&'v str> {
    valid
        .iter()
        .map(|v| (distance(key, v), v))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v.as_str())
}

/// Levenshtein distance over chars (the "did you mean" of every unknown
/// key, here and in the CLI's file errors).
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// serde's Rust type names in TOML words.
fn type_name(expected: &str) -> String {
    let e = expected.trim();
    let words = match e {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer",
        "f32" | "f64" => "a number",
        "a boolean" => "a boolean (true or false)",
        "a string" | "path string" => "a string (in quotes)",
        "a sequence" => "an array of strings",
        "a map" => "a table",
        _ if e.starts_with("struct ") => "a table",
        _ if e.starts_with("enum ") || e.starts_with("variant ") => "a string (in quotes)",
        _ => e,
    };
    words.to_owned()
}

fn first_quoted(s: &str) -> Option<String> {
    all_quoted(s).into_iter().next()
}

/// Every `backtick-quoted` word of `s`, in order.
fn all_quoted(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// `path:line` or just `path`.
struct Where<'a>(&'a PathBuf, Option<usize>);

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(line) => write!(f, "{}:{line}", self.0.display()),
            None => write!(f, "{}", self.0.display()),
        }
    }
}

/// `[agent.harness]` or `the top level`.
struct TableName<'a>(&'a str);

impl fmt::Display for TableName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("the top level")
        } else {
            write!(f, "[{}]", self.0)
        }
    }
}

/// The list of valid keys, or a note that the table takes none.
struct ValidKeys<'a>(&'a [String]);

impl fmt::Display for ValidKeys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(none)")
        } else {
            f.write_str(&self.0.join(", "))
        }
    }
}

/// `; did you mean `max_turns`?` when a valid key is close.
struct Suggestion<'a>(&'a str, &'a [String]);

impl fmt::Display for Suggestion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match closest(self.0, self.1) {
            Some(near) => write!(f, "; did you mean `{near}`?"),
            None => Ok(()),
        }
    }
}
