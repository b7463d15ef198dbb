//! Text tables for people: every column but the last padded to its widest
//! cell (in characters), two spaces apart, no trailing spaces. The one
//! renderer of `multinode hosts`, `multinode check`, exec_all's failure
//! table and `multinode ps`; and [`printable`], what such text shows of
//! strings a job chose (its command lines, names, stack frames).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with its control characters shown as escapes, for a terminal: a
/// job's command line, process name or stack frame is the job's to choose,
/// and raw, an ESC or a BEL would retitle the operator's terminal, clear
/// it or move the cursor, a line feed make a fake line. The escapes are
/// C's and those of the shell's `$'...'` (visible, and unambiguous: a
/// backslash is doubled): `\t`, `\n`, `\r`, `\e` (ESC), `\\`, `\xHH` for
/// the other C0 controls and DEL, `\uHHHH` for the C1 controls (U+0080 to
/// U+009F, which a terminal may take as ESC sequences) and for the format
/// characters ([`is_format`]: bidi overrides such as U+202E, which show
/// text backwards, zero-width ones, which hide a difference) and line and
/// paragraph separators. Everything else, any script included, is shown as
/// it is. Text without any of these is returned as it is, not copied.
pub fn printable(text: &str) -> Cow<'_, str> {
    let needs = |c: char| c == '\\' || c.is_control() || is_format(c);
    if !text.contains(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() || is_format(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// An error line that may hold text escaped where it came in (a server's
/// disconnect text, escaped by the transport) beside text from elsewhere
/// (an agent's words): as [`printable`] shows it when it holds a control
/// or format character, else as it is, so that text escaped once is not
/// escaped again (its backslashes doubled).
pub fn printable_once(text: &str) -> Cow<'_, str> {
    if text.contains(|c: char| c.is_control() || is_format(c)) {
        printable(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// Text from outside (a server's disconnect message, a node's error) as
/// [`printable`] shows it, cut to `max` characters first (with `...`): a
/// peer chooses its length too.
pub fn printable_cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => printable(text).into_owned(),
        Some((end, _)) => format!("{}...", printable(&text[..end])),
    }
}

/// Unicode's format characters (general category Cf), and the line and
/// paragraph separators (U+2028, U+2029): invisible, or changing how the
/// text around them shows (U+202E shows what follows backwards). The
/// table is Unicode 15's Cf; std has no general category.
fn is_format(c: char) -> bool {
    matches!(
        c as u32,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x2028..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    )
}

/// The widths of a table's columns, fitted to its rows.
pub struct Columns {
    widths: Vec<usize>,
}

impl Columns {
    /// Fits every column but the last to the widest cell of `rows` (the header included).
    pub fn fit<R: AsRef<[S]>, S: AsRef<str>>(rows: &[R]) -> Columns {
        let mut widths: Vec<usize> = Vec::new();
        for row in rows {
            let row = row.as_ref();
            let padded = row.len().saturating_sub(1);
            if widths.len() < padded {
                widths.resize(padded, 0);
            }
            for (w, cell) in widths.iter_mut().zip(&row[..padded]) {
                *w = (*w).max(cell.as_ref().chars().count());
            }
        }
        Columns { widths }
    }

    /// One line (without its newline).
    pub fn line<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let cell = cell.as_ref();
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let width = self.widths.get(i).copied().unwrap_or(0);
                out.push_str(cell);
                let pad = width.saturating_sub(cell.chars().count()) + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.truncate(out.trim_end().len());
        out
    }
}

/// Every row as a line, each ended with a newline.
pub fn render<R: AsRef<[S]>, S: AsRef<str>>(rows: &[R]) -> String {
    let columns = Columns::fit(rows);
    let mut out = String::new();
    for row in rows {
        out.push_str(&columns.line(row.as_ref()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_as_escapes_and_the_rest_as_it_is() {
        assert!(matches!(
            printable("python3 train.py --lr=0.1 gpü"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            printable("\x1b]0;PWNED\x07\x1b[2J sleep 25"),
            "\\e]0;PWNED\\x07\\e[2J sleep 25"
        );
        assert_eq!(
            printable("a\tb\nc\rd\x00\x7f\u{9b}1m\u{85}é"),
            "a\\tb\\nc\\rd\\x00\\x7f\\u009b1m\\u0085é"
        );
        // A backslash is doubled: what was typed never reads as an escape.
        assert_eq!(printable("echo \\e[2J"), "echo \\\\e[2J");
    }

    #[test]
    fn format_characters_are_escaped_and_outside_text_is_cut() {
        // U+202E shows `txt.exe` as `exe.txt`; zero-width ones hide a difference.
        assert_eq!(
            printable("rank\u{202e}txt.exe\u{200b}\u{2066}x\u{feff}\u{2028}"),
            "rank\\u202etxt.exe\\u200b\\u2066x\\ufeff\\u2028"
        );
        assert!(matches!(printable("ǅ ﬁ 日本 ü"), Cow::Borrowed(_)));
        // Escaped once, shown as it is; raw, escaped.
        let once = printable("\x1b]0;x\x07 C:\\dir");
        assert_eq!(printable_once(&once), once);
        assert_eq!(printable_once("\x1b[2J"), "\\e[2J");
        assert_eq!(printable_cut("abc", 3), "abc");
        assert_eq!(printable_cut("ab\x1bcd", 3), "ab\\e...");
        assert_eq!(printable_cut(&"é".repeat(300), 200).chars().count(), 203);
    }

    #[test]
    fn columns_are_padded_but_the_last_and_lines_trimmed() {
        let rows = [
            ["RANK", "HOST", "NOTE"],
            ["0", "gpü01", "ok"],
            ["10", "n", ""],
        ];
        assert_eq!(
            render(&rows),
            "RANK  HOST   NOTE\n0     gpü01  ok\n10    n\n"
        );
    }
}
