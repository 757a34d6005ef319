//! Terminal-safe human output. Model text, file names and anything else a
//! model or a repository chose reach a person's terminal, where control
//! characters are commands: `ESC]0;…` sets the title, `ESC[2J` clears the
//! screen, `ESC]52;…` writes the clipboard. Human output shows every C0
//! control except newline and tab, DEL and every C1 control as a visible
//! escape (`\x1b`, `\x7f`, `\u{9b}`) instead. `--json` output is not
//! filtered: JSON escaping already makes it safe to print.

use std::io::Write;

/// Whether `b` is a C0 control (other than newline and tab) or DEL.
fn is_unsafe_byte(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f
}

/// `text` with its control characters (C0 but newline and tab, DEL, C1)
/// replaced by visible escapes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let u = u32::from(c);
        if u < 0x80 && is_unsafe_byte(u as u8) {
            out.push_str(&format!("\\x{u:02x}"));
        } else if (0x80..0xa0).contains(&u) {
            out.push_str(&format!("\\u{{{u:x}}}"));
        } else {
            out.push(c);
        }
    }
    out
}

/// A writer that escapes control characters on their way to `inner` (see
/// [`escape`]), or passes everything through when built for JSON output.
/// It works on bytes, so a C1 control split across two writes is caught
/// too.
pub struct Escaping<W: Write> {
    inner: W,
    on: bool,
    /// The last write ended with 0xC2, the lead byte of every C1 control.
    pending_c2: bool,
}

impl<W: Write> Escaping<W> {
    /// Escapes what goes to `inner`.
    pub fn new(inner: W) -> Self {
        Escaping {
            inner,
            on: true,
            pending_c2: false,
        }
    }

    /// Escapes what goes to `inner` unless the output is JSON.
    pub fn unless_json(inner: W, json: bool) -> Self {
        Escaping {
            on: !json,
            ..Escaping::new(inner)
        }
    }

    /// The unfiltered writer, for output that is JSON whatever the flags.
    pub fn raw(&mut self) -> &mut W {
        &mut self.inner
    }

    fn escaped(&mut self, buf: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(buf.len() + 8);
        for &b in buf {
            if self.pending_c2 {
                self.pending_c2 = false;
                if (0x80..0xa0).contains(&b) {
                    out.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes());
                    continue;
                }
                out.push(0xc2);
            }
            if b == 0xc2 {
                self.pending_c2 = true;
            } else if is_unsafe_byte(b) {
                out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
            } else {
                out.push(b);
            }
        }
        out
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.on {
            return self.inner.write(buf);
        }
        let out = self.escaped(buf);
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // Writes are whole strings, so a lead byte still held here starts
        // no C1 control.
        if std::mem::take(&mut self.pending_c2) {
            self.inner.write_all(&[0xc2])?;
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible_and_text_stays() {
        let hostile = "a\u{1b}]0;pwned\u{7}b\u{1b}[2J\r\u{7f}\u{9b}31m é\tx\n";
        let want = "a\\x1b]0;pwned\\x07b\\x1b[2J\\x0d\\x7f\\u{9b}31m é\tx\n";
        assert_eq!(escape(hostile), want);
        let mut w = Escaping::new(Vec::new());
        // Byte by byte, so the C1 control's two bytes arrive apart.
        for b in hostile.as_bytes() {
            w.write_all(&[*b]).unwrap();
        }
        assert_eq!(String::from_utf8(w.inner).unwrap(), want);
    }

    #[test]
    fn json_output_passes_through() {
        let mut w = Escaping::unless_json(Vec::new(), true);
        w.write_all(b"{\"a\":\"\x7f\"}").unwrap();
        assert_eq!(w.inner, b"{\"a\":\"\x7f\"}");
    }
}
