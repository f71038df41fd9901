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

#[inline(always)]
fn digit(n: u8) -> u8 {
    // 0..=9 -> '0'..='9', 10..=15 -> 'A'..='F'; branch-free so the block loop vectorises.
    n + b'0' + u8::from(n > 9) * 7
}

/// Appends `bytes` as upper-case hex (two digits per byte, no prefix).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    // SAFETY: only ASCII hex digits are written into the new tail, so the string stays valid UTF-8.
    let buf = unsafe { out.as_mut_vec() };
    let start = buf.len();
    buf.resize(start + bytes.len() * 2, 0);
    let dst = &mut buf[start..];
    let blocks = bytes.len() / 16;
    for (d, s) in dst.chunks_exact_mut(32).zip(bytes.chunks_exact(16)) {
        let mut tmp = [0u8; 32];
        for i in 0..16 {
            tmp[2 * i] = digit(s[i] >> 4);
            tmp[2 * i + 1] = digit(s[i] & 15);
        }
        d.copy_from_slice(&tmp);
    }
    for (d, &b) in dst[blocks * 32..].chunks_exact_mut(2).zip(&bytes[blocks * 16..]) {
        d[0] = digit(b >> 4);
        d[1] = digit(b & 15);
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
    fn hex_of_every_byte_value_and_odd_lengths() {
        let all: Vec<u8> = (0..=255).chain(0..7).collect();
        let mut s = String::new();
        push_hex(&mut s, &all);
        let want: String = all.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(s, want);
    }

    #[test]
    fn hex_is_raw_bytes_in_order() {
        let mut s = String::from("0x");
        push_hex(&mut s, &1.0f32.to_le_bytes());
        assert_eq!(s, "0x0000803F");
    }
}
