//! How an answer is printed: a table for people, JSON or YAML for scripts.

use serde::Serialize;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot write the answer as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot write the answer as YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
}

impl Format {
    /// `value` in this format; `table` writes the table.
    pub fn render<T: Serialize>(
        self,
        value: &T,
        table: impl FnOnce(&T) -> String,
    ) -> Result<String, RenderError> {
        Ok(match self {
            Format::Table => table(value),
            Format::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
            Format::Yaml => serde_norway::to_string(value)?,
        })
    }
}

/// Rows aligned in columns, two spaces apart (as kubectl prints), the header first.
pub fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_trimmed() {
        let rows = vec![
            vec!["1".to_string(), "zone-a".to_string(), "web-28".to_string()],
            vec!["10".to_string(), "b".to_string(), String::new()],
        ];
        assert_eq!(
            columns(&["N", "ZONE", "PODS"], &rows),
            "N   ZONE    PODS\n1   zone-a  web-28\n10  b\n"
        );
    }
}
