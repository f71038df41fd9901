//! Text primitives: MLIR identifiers and strings, and fast hex for constants.

use std::fmt::Write as _;

/// True when `name` is a bare MLIR identifier (`[A-Za-z_][A-Za-z0-9_$.]*`).
#[must_use]
pub fn is_bare_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.'))
}

/// An MLIR string literal: `"…"`, with `"` `\` and every byte outside printable ASCII escaped as
/// `\XX`, so any key (newlines, quotes, non-ASCII) round-trips to the same bytes.
#[must_use]
pub fn string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for &b in s.as_bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\{b:02X}");
        }
    }
    out.push('"');
    out
}

/// A symbol reference: `@name` when bare, `@"…"` otherwise.
#[must_use]
pub fn symbol(name: &str) -> String {
    if is_bare_identifier(name) { format!("@{name}") } else { format!("@{}", string_literal(name)) }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Appends `bytes` as upper-case hex (two digits per byte, no prefix).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    // SAFETY: only ASCII hex digits are appended, so the string stays valid UTF-8.
    let buf = unsafe { out.as_mut_vec() };
    buf.reserve(bytes.len() * 2);
    for &b in bytes {
        buf.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_quoting() {
        assert!(is_bare_identifier("model.layers.0.w"));
        assert!(!is_bare_identifier("0lead"));
        assert!(!is_bare_identifier("a/b"));
        assert!(!is_bare_identifier(""));
        assert_eq!(symbol("w1"), "@w1");
        assert_eq!(symbol("a\"b\\\nc/d::é"), r#"@"a\22b\5C\0Ac/d::\C3\A9""#);
    }

    #[test]
    fn hex_is_raw_bytes_in_order() {
        let mut s = String::from("0x");
        push_hex(&mut s, &1.0f32.to_le_bytes());
        assert_eq!(s, "0x0000803F");
    }
}
