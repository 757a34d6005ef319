//! The permission policy: which tools, and which `exec_command` commands,
//! may run. Deny wins.
//!
//! A rule is one of:
//! - `*`: every tool;
//! - a tool name: `write_file`;
//! - `tool(<glob>)`: the tool, when its subject matches the glob. The
//!   subject of `exec_command` is its `command`; of `read_mcp_resource`,
//!   its `uri`; of a path-taking tool, its
//!   `path`. In the glob `*` matches any run of characters (spaces and `/`
//!   included) and `?` one character; everything else is literal.
//!
//! A call is denied if any `deny` rule matches; else allowed if `allow` is
//! empty or any `allow` rule matches; else denied. `ask` rules (matched as
//! deny rules are) sit between the two: what they mean depends on the
//! agent's `approval_policy` (`crate::approvals`, docs/approvals.md).
//!
//! Commands are matched segment by segment: `a && b; c | d` has the
//! segments `a`, `b`, `c`, `d` (split on `&&`, `||`, `;`, `|`, newline,
//! without regard to quoting). A deny rule matches if it matches the whole
//! command or any segment; an allow pattern list allows the command only
//! if every segment matches some allow rule (so `exec_command(cargo *)`
//! does not allow `cargo test && rm -rf /`). This is a guard against
//! accidents, not a sandbox: `$(...)` and `sh -c` can hide a command.
//!
//! An `exec_command` `wait` call has no command (it waits on a process that
//! already passed the policy): it is matched by rules naming the tool with
//! or without a pattern, except that a pattern deny rule never matches it.

use serde_json::Value;

use super::ToolError;

/// Allow and deny rules from the `[permissions]` table of `troupe.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PermissionPolicy {
    /// Rules that allow; empty allows every call that no deny rule matches.
    pub allow: Vec<String>,
    /// Rules that deny; they win over `ask` and `allow`.
    pub deny: Vec<String>,
    /// Rules that always ask a person (or the reviewer agent) before the
    /// call runs; they win over `allow`. Under `approval_policy = never`
    /// nobody is asked and they deny.
    pub ask: Vec<String>,
}

/// One parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule<'a> {
    /// `*` or a tool name.
    tool: &'a str,
    /// The subject glob, for `tool(<glob>)`.
    pattern: Option<&'a str>,
}

impl<'a> Rule<'a> {
    fn parse(text: &'a str) -> Result<Self, String> {
        let text = text.trim();
        match text.find('(') {
            None if text.is_empty() => Err("empty rule".to_string()),
            None => Ok(Rule {
                tool: text,
                pattern: None,
            }),
            Some(open) => {
                let pattern = text[open + 1..]
                    .strip_suffix(')')
                    .ok_or_else(|| format!("rule `{text}` opens `(` but does not end with `)`"))?;
                let tool = text[..open].trim();
                if tool.is_empty() {
                    return Err(format!("rule `{text}` has no tool name before `(`"));
                }
                Ok(Rule {
                    tool,
                    pattern: Some(pattern),
                })
            }
        }
    }

    fn names(&self, tool: &str) -> bool {
        self.tool == "*" || self.tool == tool
    }
}

impl PermissionPolicy {
    /// A policy that allows everything.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Checks every rule's syntax; the errors name the bad rules.
    pub fn validate(&self) -> Result<(), String> {
        let errors: Vec<String> = self
            .allow
            .iter()
            .chain(&self.deny)
            .chain(&self.ask)
            .filter_map(|rule| Rule::parse(rule).err())
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Decides a call of `tool` with `args`. A malformed rule never
    /// matches (see [`PermissionPolicy::validate`]).
    pub fn check(&self, tool: &str, args: &Value) -> Result<(), ToolError> {
        self.check_deny(tool, args)?;
        let subject = subject(tool, args);
        let segments = subject.map(split_segments).unwrap_or_default();
        if self.allow.is_empty() || self.allowed(tool, subject, &segments) {
            return Ok(());
        }
        Err(ToolError::Denied(format!(
            "`{tool}` call matches no allow rule (allow = [{}]); to allow it, add a rule such as `{tool}` to [permissions] allow in troupe.toml",
            self.allow.join(", ")
        )))
    }

    /// The deny rules alone: `Err` when one matches the call.
    pub fn check_deny(&self, tool: &str, args: &Value) -> Result<(), ToolError> {
        match first_match(&self.deny, tool, args) {
            Some(rule) => Err(ToolError::Denied(format!(
                "`{tool}` call matches the deny rule `{rule}`; to allow it, change [permissions] deny in troupe.toml"
            ))),
            None => Ok(()),
        }
    }

    /// The first `ask` rule that matches the call (matched as deny rules
    /// are: the whole command or any of its segments).
    pub fn ask_rule(&self, tool: &str, args: &Value) -> Option<&str> {
        first_match(&self.ask, tool, args)
    }

    /// The first `ask` rule that matches the call and names `tool` itself
    /// (not `*`).
    pub fn ask_rule_naming(&self, tool: &str, args: &Value) -> Option<&str> {
        self.ask
            .iter()
            .find(|text| {
                Rule::parse(text).is_ok_and(|rule| rule.tool == tool)
                    && first_match(std::slice::from_ref(*text), tool, args).is_some()
            })
            .map(|text| text.trim())
    }

    /// Whether an `allow` rule names the call (false when `allow` is
    /// empty: then no rule allows it, it is only not restricted).
    pub fn allow_matches(&self, tool: &str, args: &Value) -> bool {
        let subject = subject(tool, args);
        let segments = subject.map(split_segments).unwrap_or_default();
        !self.allow.is_empty() && self.allowed(tool, subject, &segments)
    }

    fn allowed(&self, tool: &str, subject: Option<&str>, segments: &[&str]) -> bool {
        let rules: Vec<Rule<'_>> = self
            .allow
            .iter()
            .filter_map(|text| Rule::parse(text).ok())
            .filter(|rule| rule.names(tool))
            .collect();
        if rules.iter().any(|rule| rule.pattern.is_none()) {
            return true;
        }
        let Some(subject) = subject else {
            return !rules.is_empty();
        };
        let patterns: Vec<&str> = rules.iter().filter_map(|rule| rule.pattern).collect();
        let any = |text: &str| patterns.iter().any(|p| glob(p, text));
        if segments.len() <= 1 {
            return any(subject.trim());
        }
        segments.iter().all(|seg| any(seg))
    }
}

/// The first of `rules` (trimmed) that matches a call of `tool` with
/// `args`: a rule naming the tool without a pattern, or one whose pattern
/// matches the whole subject or one of its segments. A malformed rule
/// never matches.
fn first_match<'r>(rules: &'r [String], tool: &str, args: &Value) -> Option<&'r str> {
    let subject = subject(tool, args);
    let segments = subject.map(split_segments).unwrap_or_default();
    rules.iter().map(|text| text.trim()).find(|text| {
        let Ok(rule) = Rule::parse(text) else {
            return false;
        };
        rule.names(tool)
            && match (rule.pattern, subject) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(p), Some(s)) => glob(p, s.trim()) || segments.iter().any(|seg| glob(p, seg)),
            }
    })
}

/// What a pattern rule matches for `tool`: the command of an
/// `exec_command` run, the `uri` of a `read_mcp_resource`, else a `path`
/// argument.
pub fn subject<'v>(tool: &str, args: &'v Value) -> Option<&'v str> {
    let key = match tool {
        "exec_command" => "command",
        "read_mcp_resource" => "uri",
        _ => "path",
    };
    args.get(key).and_then(Value::as_str)
}

/// The command's segments between shell control operators (`&&`, `||`,
/// `;`, `|`, `&`, newline), trimmed, empty ones dropped. The `&` of a
/// redirection (`2>&1`, `&>`) is not an operator.
fn split_segments(command: &str) -> Vec<&str> {
    let bytes = command.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let next = bytes.get(i + 1).copied();
        let op_len = match bytes[i] {
            b';' | b'\n' => 1,
            b'|' if next == Some(b'|') => 2,
            b'|' => 1,
            b'&' if next == Some(b'&') => 2,
            b'&' if next == Some(b'>') || (i > 0 && matches!(bytes[i - 1], b'>' | b'<')) => 0,
            b'&' => 1,
            _ => 0,
        };
        if op_len == 0 {
            i += 1;
            continue;
        }
        push_segment(&mut out, &command[start..i]);
        i += op_len;
        start = i;
    }
    push_segment(&mut out, &command[start..]);
    out
}

fn push_segment<'a>(out: &mut Vec<&'a str>, segment: &'a str) {
    let segment = segment.trim();
    if !segment.is_empty() {
        out.push(segment);
    }
}

/// Glob match with `*` (any run, `/` and spaces included) and `?` (one
/// character); everything else literal. Iterative with backtracking on the
/// last `*`, so it is linear-ish and never recurses.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((star_p, star_t)) = star {
            pi = star_p + 1;
            ti = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}
