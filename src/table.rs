//! Text tables for people: every column but the last padded to its widest
//! cell (in characters), two spaces apart, no trailing spaces. The one
//! renderer of `multinode hosts`, `multinode check`, exec_all's failure
//! table and `multinode ps`.

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
