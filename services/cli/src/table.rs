//! Aligned text tables for terminal output: columns padded to their widest cell, two
//! spaces apart; the last column is never padded, so long text can run on.

use std::io::Write;

pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self { headers: headers.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len(), "one cell per column");
        self.rows.push(cells.into_iter().map(|cell| single_line(&cell)).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn write(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.headers.iter().map(|header| header.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header_cells: Vec<String> = self.headers.iter().map(|header| header.to_string()).collect();
        write_line(out, &header_cells, &widths)?;
        for row in &self.rows {
            write_line(out, row, &widths)?;
        }
        Ok(())
    }
}

fn write_line(out: &mut dyn Write, cells: &[String], widths: &[usize]) -> std::io::Result<()> {
    let mut line = String::new();
    for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
        let last = index + 1 == cells.len();
        if last {
            line.push_str(cell);
        } else {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// Control characters (newlines in content) would break the alignment.
fn single_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// `0.123` for dimension, importance and salience values (stored rounded to 3 decimals).
pub fn number(value: f64) -> String {
    format!("{value:.3}")
}

pub fn optional<T: ToString>(value: Option<T>) -> String {
    value.map(|value| value.to_string()).unwrap_or_else(|| "-".into())
}

pub fn time(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_the_last_runs_on() {
        let mut table = Table::new(&["id", "type", "content"]);
        table.row(vec!["1".into(), "episodic".into(), "Bought a sword\nfor fifty gold".into()]);
        table.row(vec!["22".into(), "semantic".into(), "Regular".into()]);
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "id  type      content\n1   episodic  Bought a sword for fifty gold\n22  semantic  Regular\n");
    }
}
