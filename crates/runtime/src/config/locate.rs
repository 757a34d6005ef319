//! Where things are in `troupe.toml`: lines of keys, the key under a byte
//! offset, and the keys that must never appear.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A parsed document kept for its spans, to point errors at lines.
pub(crate) struct Locator<'a> {
    text: &'a str,
    doc: Spanned<DeTable<'a>>,
}

impl<'a> Locator<'a> {
    /// Parses `text`; a syntax error comes back as toml's error.
    pub(crate) fn parse(text: &'a str) -> Result<Self, toml::de::Error> {
        let doc = DeTable::parse(text)?;
        Ok(Self { text, doc })
    }

    /// The 1-based line and column of byte `offset` in `text`.
    pub(crate) fn position(text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rfind('\n').map_or(before.chars().count(), |nl| {
            before[nl + 1..].chars().count()
        }) + 1;
        (line, column)
    }

    /// The line of the key at `path` (`["agent", "max_turns"]`); when the
    /// key is absent, the line of its nearest present ancestor.
    pub(crate) fn key_line(&self, path: &[&str]) -> Option<usize> {
        let mut table = self.doc.get_ref();
        let mut line = None;
        for key in path {
            let (k, v) = table.iter().find(|(k, _)| k.get_ref() == key)?;
            line = Some(Self::position(self.text, k.span().start).0);
            match v.get_ref() {
                DeValue::Table(inner) => table = inner,
                _ => break,
            }
        }
        line
    }

    /// The key path whose key or value covers byte `offset`, innermost
    /// first found; empty when nothing covers it.
    pub(crate) fn path_at(&self, offset: usize) -> Vec<String> {
        let mut path = Vec::new();
        walk_to(self.doc.get_ref(), offset, &mut path);
        path
    }

    /// Every path ending in a key named `name`, with the key's line.
    pub(crate) fn find_key(&self, name: &str) -> Vec<(Vec<String>, usize)> {
        let mut found = Vec::new();
        let mut path = Vec::new();
        self.collect(self.doc.get_ref(), name, &mut path, &mut found);
        found
    }

    fn collect(
        &self,
        table: &DeTable<'a>,
        name: &str,
        path: &mut Vec<String>,
        found: &mut Vec<(Vec<String>, usize)>,
    ) {
        for (k, v) in table.iter() {
            path.push(k.get_ref().to_string());
            if k.get_ref() == name {
                found.push((path.clone(), Self::position(self.text, k.span().start).0));
            }
            if let DeValue::Table(inner) = v.get_ref() {
                self.collect(inner, name, path, found);
            }
            path.pop();
        }
    }
}

fn walk_to(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    for (k, v) in table.iter() {
        path.push(k.get_ref().to_string());
        if k.span().contains(&offset) {
            return true;
        }
        if let DeValue::Table(inner) = v.get_ref()
            && walk_to(inner, offset, path)
        {
            return true;
        }
        // A table in an array (`[[hooks.lifecycle.stop]]`, or an inline
        // table in a list): its keys are named under the array's key.
        if let DeValue::Array(items) = v.get_ref() {
            for item in items.iter() {
                if let DeValue::Table(inner) = item.get_ref()
                    && walk_to(inner, offset, path)
                {
                    return true;
                }
            }
        }
        if v.span().contains(&offset) {
            return true;
        }
        path.pop();
    }
    false
}
