//! One `UPDATE` that gives each row of a batch its own values:
//! `SET col = CASE id WHEN ? THEN ? … ELSE ? END, … WHERE id IN (…)`.
//!
//! A burst stores thousands of trigger answers and results, each row with values of its own
//! (its agent's sequence number, its exit code, its times). A statement per row is a round trip
//! per row on MariaDB; one per batch is one. Diesel's DSL cannot spell a `CASE` of a length known
//! only at run time, so this writes the SQL with diesel's own identifier quoting and binds.
//!
//! Most columns of a batch hold the same value in most rows (every result `succeeded`, exit
//! code 0, one agent's address): a column names only the rows that differ from its most common
//! value, which the others take in the `ELSE`, and a column every row leaves as it is is not
//! written at all. A `CASE` with a branch for every row and column made a result batch's
//! statement 28 KB for 40 rows, and MariaDB spent more of its CPU parsing and preparing it than
//! storing the rows (BENCHMARKS.md, issue 17).

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use diesel::{QueryResult, RunQueryDsl};

use super::MultiBackend;

/// A value bound for one row; `None` is SQL `NULL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value<'a> {
    Text(Option<&'a str>),
    Int(Option<i32>),
    BigInt(Option<i64>),
    Bool(Option<bool>),
}

/// How a column takes its row's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// The value, `NULL` included.
    Always,
    /// The value, unless it is `NULL`: then the column keeps what it has.
    UnlessNull,
}

impl Value<'_> {
    fn is_null(&self) -> bool {
        match self {
            Value::Text(v) => v.is_none(),
            Value::Int(v) => v.is_none(),
            Value::BigInt(v) => v.is_none(),
            Value::Bool(v) => v.is_none(),
        }
    }
}

/// The value most of `values` are (of those tied, the one that got there first), and the
/// positions of the others.
fn most_common<'a>(values: &[Value<'a>]) -> (Value<'a>, Vec<usize>) {
    let mut counts: std::collections::HashMap<Value<'a>, usize> =
        std::collections::HashMap::with_capacity(values.len().min(16));
    let mut best: Option<(Value<'a>, usize)> = None;
    for &value in values {
        let count = counts.entry(value).or_insert(0);
        *count += 1;
        if best.is_none_or(|(_, most)| *count > most) {
            best = Some((value, *count));
        }
    }
    let common = best.map_or(Value::BigInt(None), |(value, _)| value);
    let others = values
        .iter()
        .enumerate()
        .filter(|(_, value)| **value != common)
        .map(|(i, _)| i)
        .collect();
    (common, others)
}

#[derive(Debug)]
enum Part<'a> {
    Sql(&'static str),
    Ident(&'static str),
    Bind(Value<'a>),
}

/// The statement, built column by column; its SQL depends on the batch's size and on which rows
/// differ, so it is not kept prepared (each would be a statement kept for the connection's life).
#[derive(Debug)]
pub struct RowsUpdate<'a> {
    ids: Vec<i64>,
    parts: Vec<Part<'a>>,
    columns: usize,
    also: Option<(&'static str, Vec<&'a str>)>,
    /// `AND column = …`, from `where_each_equals`.
    matching: Vec<Part<'a>>,
}

impl<'a> RowsUpdate<'a> {
    /// `UPDATE table SET`, for the rows whose `id` is in `ids`.
    pub fn new(table: &'static str, ids: Vec<i64>) -> Self {
        Self {
            ids,
            parts: vec![Part::Sql("UPDATE "), Part::Ident(table), Part::Sql(" SET ")],
            columns: 0,
            also: None,
            matching: Vec::new(),
        }
    }

    fn next_column(&mut self, column: &'static str) {
        if self.columns > 0 {
            self.parts.push(Part::Sql(", "));
        }
        self.columns += 1;
        self.parts.push(Part::Ident(column));
        self.parts.push(Part::Sql(" = "));
    }

    /// `column` takes `values[i]` in the row `ids[i]`.
    ///
    /// # Panics
    /// When `values` and the ids differ in length (a caller's bug).
    #[must_use]
    pub fn column(mut self, column: &'static str, how: Set, values: Vec<Value<'a>>) -> Self {
        assert_eq!(values.len(), self.ids.len(), "a value per row");
        let (common, others) = most_common(&values);
        let keeps = |value: &Value<'_>| how == Set::UnlessNull && value.is_null();
        if others.is_empty() && keeps(&common) {
            return self;
        }
        self.next_column(column);
        let value_of = |value: Value<'a>| {
            if keeps(&value) {
                Part::Ident(column)
            } else {
                Part::Bind(value)
            }
        };
        per_row(
            &mut self.parts,
            &self.ids,
            &values,
            common,
            &others,
            value_of,
        );
        self
    }

    /// `column` becomes `to` in the rows where it is `from`, and stays as it is in the others.
    #[must_use]
    pub fn text_from_to(mut self, column: &'static str, from: &'a str, to: &'a str) -> Self {
        self.next_column(column);
        self.parts.push(Part::Sql("CASE WHEN "));
        self.parts.push(Part::Ident(column));
        self.parts.push(Part::Sql(" = "));
        self.parts.push(Part::Bind(Value::Text(Some(from))));
        self.parts.push(Part::Sql(" THEN "));
        self.parts.push(Part::Bind(Value::Text(Some(to))));
        self.parts.push(Part::Sql(" ELSE "));
        self.parts.push(Part::Ident(column));
        self.parts.push(Part::Sql(" END"));
        self
    }

    /// Only the rows whose `column` is one of `values` change.
    #[must_use]
    pub fn where_text_in(mut self, column: &'static str, values: Vec<&'a str>) -> Self {
        self.also = Some((column, values));
        self
    }

    /// Only the rows whose `column` equals their own `values[i]` change (`NULL` matches nothing).
    ///
    /// # Panics
    /// When `values` and the ids differ in length (a caller's bug).
    #[must_use]
    pub fn where_each_equals(mut self, column: &'static str, values: Vec<Value<'a>>) -> Self {
        assert_eq!(values.len(), self.ids.len(), "a value per row");
        let (common, others) = most_common(&values);
        self.matching.push(Part::Sql(" AND "));
        self.matching.push(Part::Ident(column));
        self.matching.push(Part::Sql(" = "));
        per_row(
            &mut self.matching,
            &self.ids,
            &values,
            common,
            &others,
            Part::Bind,
        );
        self
    }
}

/// Each row's value: `common` alone when no row differs from it, else a `CASE` naming the rows
/// that do (`others`, positions in `ids` and `values`) with `common` in its `ELSE`.
fn per_row<'a>(
    parts: &mut Vec<Part<'a>>,
    ids: &[i64],
    values: &[Value<'a>],
    common: Value<'a>,
    others: &[usize],
    value_of: impl Fn(Value<'a>) -> Part<'a>,
) {
    if others.is_empty() {
        parts.push(value_of(common));
        return;
    }
    parts.push(Part::Sql("CASE "));
    parts.push(Part::Ident("id"));
    for &i in others {
        parts.push(Part::Sql(" WHEN "));
        parts.push(Part::Bind(Value::BigInt(Some(ids[i]))));
        parts.push(Part::Sql(" THEN "));
        parts.push(value_of(values[i]));
    }
    parts.push(Part::Sql(" ELSE "));
    parts.push(value_of(common));
    parts.push(Part::Sql(" END"));
}

impl QueryFragment<MultiBackend> for RowsUpdate<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
        // Each batch's sizes and differing rows make another statement: not worth keeping.
        out.unsafe_to_cache_prepared();
        for part in &self.parts {
            push_part(&mut out, part)?;
        }
        if self.columns == 0 {
            // Every column keeps what every row has: a statement that changes nothing still
            // counts the rows it matches.
            out.push_identifier("id")?;
            out.push_sql(" = ");
            out.push_identifier("id")?;
        }
        out.push_sql(" WHERE ");
        out.push_identifier("id")?;
        out.push_sql(" IN (");
        for (i, id) in self.ids.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_bind_param::<BigInt, _>(id)?;
        }
        out.push_sql(")");
        if let Some((column, values)) = &self.also {
            out.push_sql(" AND ");
            out.push_identifier(column)?;
            out.push_sql(" IN (");
            for (i, value) in values.iter().enumerate() {
                if i > 0 {
                    out.push_sql(", ");
                }
                out.push_bind_param::<Text, _>(value)?;
            }
            out.push_sql(")");
        }
        for part in &self.matching {
            push_part(&mut out, part)?;
        }
        Ok(())
    }
}

fn push_part<'b>(out: &mut AstPass<'_, 'b, MultiBackend>, part: &'b Part<'_>) -> QueryResult<()> {
    match part {
        Part::Sql(sql) => out.push_sql(sql),
        Part::Ident(name) => out.push_identifier(name)?,
        Part::Bind(value) => push_value(out, value)?,
    }
    Ok(())
}

fn push_value<'b>(
    out: &mut AstPass<'_, 'b, MultiBackend>,
    value: &'b Value<'_>,
) -> QueryResult<()> {
    match value {
        Value::Text(v) => out.push_bind_param::<Nullable<Text>, _>(v),
        Value::Int(v) => out.push_bind_param::<Nullable<Integer>, _>(v),
        Value::BigInt(v) => out.push_bind_param::<Nullable<BigInt>, _>(v),
        Value::Bool(v) => out.push_bind_param::<Nullable<Bool>, _>(v),
    }
}

impl QueryId for RowsUpdate<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Conn> RunQueryDsl<Conn> for RowsUpdate<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn binds(parts: &[Part<'_>]) -> usize {
        parts
            .iter()
            .filter(|part| matches!(part, Part::Bind(_)))
            .count()
    }

    /// What keeps a burst's statements short: the rows that share a column's most common value
    /// are not named in it.
    #[test]
    fn a_column_names_only_the_rows_that_differ_from_its_most_common_value() {
        let a = Value::Text(Some("a"));
        let b = Value::Text(Some("b"));
        let null = Value::Text(None);
        assert_eq!(most_common(&[a, b, b, a, null]), (b, vec![0, 3, 4]));
        assert_eq!(most_common(&[a, a, a]), (a, vec![]));

        let ids = || vec![1, 2, 3, 4, 5];
        // Two rows differ: a WHEN and a THEN each, and the ELSE.
        let mixed = RowsUpdate::new("t", ids()).column("c", Set::Always, vec![a, a, b, a, null]);
        assert_eq!(binds(&mixed.parts), 5);
        let same = RowsUpdate::new("t", ids()).column("c", Set::Always, vec![a; 5]);
        assert_eq!(binds(&same.parts), 1);
        // A NULL under UnlessNull keeps the column: no bind for it, nor for a column all NULL.
        let kept = RowsUpdate::new("t", ids())
            .column("c", Set::UnlessNull, vec![null, null, a, null, null])
            .column("d", Set::UnlessNull, vec![null; 5]);
        assert_eq!((binds(&kept.parts), kept.columns), (2, 1));
        let matching = RowsUpdate::new("t", ids()).where_each_equals("m", vec![a, a, a, b, a]);
        assert_eq!(binds(&matching.matching), 3);
    }
}
