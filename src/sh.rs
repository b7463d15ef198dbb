//! Quoting for `sh`, one rule for every command line and `export` line
//! `multinode` writes: the bytes in single quotes, each `'` written as
//! `'\''`. Safe for any bytes, and predictable to read (no `$'...'` forms),
//! so no quoting crate is needed.

/// `'text'` for sh, with `'` written as `'\''`.
pub fn quote(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.push(b'\'');
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// A word of a command line as `sh` reads it back: as it is when every byte
/// is one `sh` takes literally (`--nodes`, `0-3,5`, `1.5`), else [`quote`]d.
pub fn word(bytes: &[u8]) -> Vec<u8> {
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"-_.,:/+@%".contains(b);
    if !bytes.is_empty() && bytes.iter().all(plain) {
        bytes.to_vec()
    } else {
        quote(bytes)
    }
}

/// [`quote`] for text.
pub fn quote_str(text: &str) -> String {
    String::from_utf8(quote(text.as_bytes())).expect("quoting adds only ASCII to UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_quotes_everything() {
        assert_eq!(quote_str("a b"), "'a b'");
        assert_eq!(quote_str("it's"), r"'it'\''s'");
        assert_eq!(quote(b"\xff$x"), b"'\xff$x'");
        assert_eq!(quote_str(""), "''");
    }

    #[test]
    fn a_word_is_quoted_only_when_sh_would_read_it_otherwise() {
        assert_eq!(word(b"--nodes"), b"--nodes");
        assert_eq!(word(b"0-3,5"), b"0-3,5");
        assert_eq!(word(b"a b"), b"'a b'");
        assert_eq!(word(b"$x"), b"'$x'");
        assert_eq!(word(b"~"), b"'~'");
        assert_eq!(word(b""), b"''");
    }
}
