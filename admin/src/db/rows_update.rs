//! One `UPDATE` that gives each row of a batch its own values:
//! `SET col = CASE id WHEN ? THEN ? … END, … WHERE id IN (…)`.
//!
//! A burst stores thousands of trigger answers and results, each row with values of its own
//! (its agent's sequence number, its exit code, its times). A statement per row is a round trip
//! per row on MariaDB; one per batch is one. Diesel's DSL cannot spell a `CASE` of a length known
//! only at run time, so this writes the SQL with diesel's own identifier quoting and binds.

use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use diesel::{QueryResult, RunQueryDsl};

use super::MultiBackend;

/// A value bound for one row; `None` is SQL `NULL`.
#[derive(Debug, Clone, Copy)]
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

#[derive(Debug)]
enum Part<'a> {
    Sql(&'static str),
    Ident(&'static str),
    Bind(Value<'a>),
}

/// The statement, built column by column; its SQL depends on the batch's size, so it is not kept
/// prepared (each size would be a statement kept for the connection's life).
#[derive(Debug)]
pub struct RowsUpdate<'a> {
    ids: Vec<i64>,
    parts: Vec<Part<'a>>,
    columns: usize,
    also: Option<(&'static str, Vec<&'a str>)>,
    matching: Option<(&'static str, Vec<Value<'a>>)>,
}

impl<'a> RowsUpdate<'a> {
    /// `UPDATE table SET`, for the rows whose `id` is in `ids`.
    pub fn new(table: &'static str, ids: Vec<i64>) -> Self {
        Self {
            ids,
            parts: vec![Part::Sql("UPDATE "), Part::Ident(table), Part::Sql(" SET ")],
            columns: 0,
            also: None,
            matching: None,
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
        self.next_column(column);
        self.parts.push(Part::Sql("CASE "));
        self.parts.push(Part::Ident("id"));
        for (&id, value) in self.ids.iter().zip(values) {
            self.parts.push(Part::Sql(" WHEN "));
            self.parts.push(Part::Bind(Value::BigInt(Some(id))));
            match how {
                Set::Always => {
                    self.parts.push(Part::Sql(" THEN "));
                    self.parts.push(Part::Bind(value));
                }
                Set::UnlessNull => {
                    self.parts.push(Part::Sql(" THEN COALESCE("));
                    self.parts.push(Part::Bind(value));
                    self.parts.push(Part::Sql(", "));
                    self.parts.push(Part::Ident(column));
                    self.parts.push(Part::Sql(")"));
                }
            }
        }
        self.parts.push(Part::Sql(" END"));
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
        self.matching = Some((column, values));
        self
    }
}

impl QueryFragment<MultiBackend> for RowsUpdate<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
        // Each batch size is another statement: not worth keeping on the connection.
        out.unsafe_to_cache_prepared();
        for part in &self.parts {
            match part {
                Part::Sql(sql) => out.push_sql(sql),
                Part::Ident(name) => out.push_identifier(name)?,
                Part::Bind(value) => push_value(&mut out, value)?,
            }
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
        if let Some((column, values)) = &self.matching {
            out.push_sql(" AND ");
            out.push_identifier(column)?;
            out.push_sql(" = CASE ");
            out.push_identifier("id")?;
            for (id, value) in self.ids.iter().zip(values) {
                out.push_sql(" WHEN ");
                out.push_bind_param::<BigInt, _>(id)?;
                out.push_sql(" THEN ");
                push_value(&mut out, value)?;
            }
            out.push_sql(" END");
        }
        Ok(())
    }
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
