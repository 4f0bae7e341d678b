//! Output for people: aligned columns, times in UTC; or the API's JSON as it came (`-o json`).

use serde_json::Value;

/// One column: its heading and how a row's cell is read from the item.
pub struct Column {
    pub heading: &'static str,
    pub cell: fn(&Value) -> String,
}

/// Renders `items` as a table, one line per item, columns two spaces apart.
pub fn render(columns: &[Column], items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| columns.iter().map(|c| one_line((c.cell)(item))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([c.heading.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut columns.iter().map(|c| c.heading));
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A cell stays on its line: control characters (a newline in a message) become spaces.
fn one_line(cell: String) -> String {
    if cell.chars().any(char::is_control) {
        cell.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    } else {
        cell
    }
}

/// A field as text: strings bare, null as `-`, anything else as JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// UTC milliseconds as `2026-11-26 19:04:05`, `-` when absent.
pub fn time(value: &Value) -> String {
    value
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// A duration between two millisecond fields, `-` unless both are there.
pub fn duration(from: &Value, to: &Value) -> String {
    match (from.as_i64(), to.as_i64()) {
        (Some(from), Some(to)) if to >= from => {
            let ms = to - from;
            if ms < 1_000 {
                format!("{ms}ms")
            } else if ms < 60_000 {
                format!("{:.1}s", ms as f64 / 1_000.0)
            } else {
                format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000)
            }
        }
        _ => "-".into(),
    }
}

/// How one field of an object is read as text.
pub type Field = (&'static str, fn(&Value) -> String);

/// `key: value` lines for one object (`get` of a job, run, group).
pub fn fields(value: &Value, keys: &[Field]) -> String {
    let width = keys.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    keys.iter()
        .map(|(key, cell)| format!("{key:width$}  {}\n", one_line(cell(value))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_line_up_and_cells_stay_on_one_line() {
        let columns = [
            Column {
                heading: "ID",
                cell: |v| text(&v["id"]),
            },
            Column {
                heading: "NAME",
                cell: |v| text(&v["name"]),
            },
            Column {
                heading: "NOTE",
                cell: |v| text(&v["note"]),
            },
        ];
        let out = render(
            &columns,
            &[
                json!({"id": 7, "name": "nightly backup", "note": "a\nb"}),
                json!({"id": 12, "name": "x", "note": null}),
            ],
        );
        assert_eq!(
            out,
            "ID  NAME            NOTE\n7   nightly backup  a b\n12  x               -\n"
        );
    }

    #[test]
    fn durations_and_times_read_like_people_write_them() {
        assert_eq!(duration(&json!(1000), &json!(1250)), "250ms");
        assert_eq!(duration(&json!(0), &json!(61_500)), "1m01s");
        assert_eq!(duration(&json!(0), &Value::Null), "-");
        assert_eq!(time(&json!(0)), "1970-01-01 00:00:00");
        assert_eq!(time(&Value::Null), "-");
    }
}
