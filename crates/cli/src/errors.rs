//! Every error the command prints is one line starting `troupe:`
//! (docs/cli.md): parse errors from TOML and JSON (which span several lines
//! with a source snippet) become `FILE:LINE:COL: message`, an unknown key
//! gets a "did you mean", and clap's usage errors are folded to one line.

/// The error and its causes on one line, each cause once: many library
/// errors already include their source in their own message.
pub fn message(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    one_line(&text)
}

/// Folds a message to one line: a TOML parse error's snippet is replaced
/// by its position, a JSON error's trailing position moves before the
/// message, an unknown key gets the closest valid one, remaining line
/// breaks become `; `.
pub fn one_line(text: &str) -> String {
    let text = fold_toml(text)
        .or_else(|| fold_json(text))
        .unwrap_or_else(|| text.to_string());
    let mut text = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if let Some(hint) = did_you_mean(&text)
        && !text.contains("did you mean")
    {
        text.push_str(&hint);
    }
    text
}

/// `PREFIX: TOML parse error at line L, column C\n  |\n...\nMESSAGE` →
/// `PREFIX:L:C: MESSAGE`.
fn fold_toml(text: &str) -> Option<String> {
    const MARK: &str = "TOML parse error at line ";
    let at = text.find(MARK)?;
    let prefix = text[..at].trim_end().trim_end_matches(':');
    let rest = &text[at + MARK.len()..];
    let (pos, tail) = rest.split_once('\n').unwrap_or((rest, ""));
    let (line, col) = pos.split_once(", column ")?;
    // The snippet's lines start with a gutter (`  |`, `3 |`); the message
    // is what follows them.
    let message: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !is_gutter(l))
        .collect();
    let message = message.join("; ");
    let place = if prefix.is_empty() {
        format!("line {line}, column {}", col.trim())
    } else {
        format!("{prefix}:{line}:{}", col.trim())
    };
    Some(format!("{place}: {message}"))
}

fn is_gutter(line: &str) -> bool {
    match line.split_once('|') {
        Some((left, _)) => left.trim().chars().all(|c| c.is_ascii_digit()),
        None => false,
    }
}

/// `PREFIX: MESSAGE at line L column C` → `PREFIX:L:C: MESSAGE`.
fn fold_json(text: &str) -> Option<String> {
    let (head, pos) = text.rsplit_once(" at line ")?;
    let (line, col) = pos.trim_end().split_once(" column ")?;
    if !line.chars().all(|c| c.is_ascii_digit()) || !col.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (prefix, message) = head.split_once(": ")?;
    Some(format!("{prefix}:{line}:{col}: {message}"))
}

/// `; did you mean `max_rounds`?` for serde's ``unknown field `x`, expected
/// one of `a`, `b` `` (or `unknown variant`) when a valid name is close.
fn did_you_mean(text: &str) -> Option<String> {
    let at = text
        .find("unknown field `")
        .or_else(|| text.find("unknown variant `"))?;
    let quoted: Vec<&str> = text[at..].split('`').skip(1).step_by(2).collect();
    let (key, valid) = quoted.split_first()?;
    let near = valid
        .iter()
        .map(|v| (troupe_runtime::config::edit_distance(key, v), *v))
        .filter(|(d, v)| *d <= 2 || (key.len() > 3 && (v.contains(key) || key.contains(v))))
        .min_by_key(|(d, _)| *d)?
        .1;
    Some(format!("; did you mean `{near}`?"))
}

/// A clap usage error on one line: what is wrong, clap's tip, the usage
/// and where to read more.
pub fn clap_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut what = Vec::new();
    let mut usage = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if line.starts_with("For more information") {
            continue;
        } else {
            what.push(line.strip_prefix("error: ").unwrap_or(line).to_string());
        }
    }
    let mut line = String::new();
    for w in what {
        if !line.is_empty() {
            line.push_str(if w.starts_with("tip:") { "; " } else { " " });
        }
        line.push_str(&w);
    }
    if let Some(u) = usage {
        line.push_str(&format!(" (usage: {u}; see --help)"));
    } else {
        line.push_str(" (see --help)");
    }
    line
}

/// A clap value parser for counts: `--max-turns -1` or `0` says the value
/// must be a positive integer (clap alone would suggest `-- -1`).
pub fn positive_u32(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 => u32::try_from(n).map_err(|_| format!("`{s}` is too large")),
        Ok(_) => Err("the value must be a positive integer, like 15".into()),
        Err(_) => Err("not a number: the value must be a positive integer, like 15".into()),
    }
}

/// A clap value parser for `--reasoning-effort`.
pub fn reasoning_effort(s: &str) -> Result<troupe_runtime::provider::ReasoningEffort, String> {
    use troupe_runtime::provider::ReasoningEffort as E;
    match s.trim().to_ascii_lowercase().as_str() {
        "minimal" => Ok(E::Minimal),
        "low" => Ok(E::Low),
        "medium" => Ok(E::Medium),
        "high" => Ok(E::High),
        _ => Err(format!(
            "`{s}` is not a reasoning effort: use minimal, low, medium or high"
        )),
    }
}

/// A clap value parser for amounts of money: positive, finite.
pub fn positive_usd(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => Err("the value must be a positive amount in USD, like 0.50".into()),
        Err(_) => Err("not a number: the value must be a positive amount in USD, like 0.50".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_snippet_becomes_file_line_col_with_a_suggestion() {
        let text = "p.toml: TOML parse error at line 3, column 1\n  |\n3 | max_round = 2\n  | ^^^^^^^^^\nunknown field `max_round`, expected one of `name`, `max_rounds`, `verifier_model`\n";
        assert_eq!(
            one_line(text),
            "p.toml:3:1: unknown field `max_round`, expected one of `name`, `max_rounds`, `verifier_model`; did you mean `max_rounds`?"
        );
    }

    #[test]
    fn a_json_position_moves_to_the_file() {
        let text = "invalid JSON script /tmp/u.json: unknown field `replys`, expected one of `replies`, `rule` at line 1 column 9";
        assert_eq!(
            one_line(text),
            "invalid JSON script /tmp/u.json:1:9: unknown field `replys`, expected one of `replies`, `rule`; did you mean `replies`?"
        );
    }

    #[test]
    fn a_far_key_gets_no_suggestion_and_plain_text_is_unchanged() {
        let text = "x.toml: TOML parse error at line 1, column 1\n  |\n1 | zzzzzz = 1\n  | ^^^^^^\nunknown field `zzzzzz`, expected one of `replies`, `rule`\n";
        assert_eq!(
            one_line(text),
            "x.toml:1:1: unknown field `zzzzzz`, expected one of `replies`, `rule`"
        );
        assert_eq!(one_line("workspace /x is a file"), "workspace /x is a file");
        assert_eq!(one_line("a\n  b\n"), "a; b");
    }
}
