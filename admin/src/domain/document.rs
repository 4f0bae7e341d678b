//! Documents people keep in files (a workflow with its jobs, the console editor's definition):
//! read from YAML or JSON, written as either. YAML 1.2 through `serde_yaml_ng`, so `on: failure`
//! stays a string (YAML 1.1 would read `on` as `true`), and JSON is read by the same parser as a
//! subset of YAML, so one text box takes both.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Code, Error};

/// How a document is spelled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// From a media type (`Content-Type` or `Accept`): the YAML types, else JSON.
    pub fn of_media_type(media: &str) -> Format {
        let essence = media
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" => Format::Yaml,
            _ => Format::Json,
        }
    }

    /// From a `format` query value: `yaml` or `json`.
    ///
    /// # Errors
    /// `invalid_field` on `format` for anything else.
    pub fn from_name(name: &str) -> Result<Format, Error> {
        match name {
            "json" => Ok(Format::Json),
            "yaml" | "yml" => Ok(Format::Yaml),
            other => Err(Error::invalid(
                "format",
                format!("`{other}`: use `yaml` or `json`"),
            )),
        }
    }

    pub fn media_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
        }
    }
}

/// The field a serde message names (`unknown field `x``, `missing field `y``).
fn named_field(message: &str) -> Option<String> {
    ["unknown field `", "missing field `"]
        .iter()
        .find_map(|marker| message.split(marker).nth(1))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned)
}

/// Reads `text` as YAML (JSON included) into `T`. A text that is not YAML at all is
/// `invalid_json` (400); one that is YAML of the wrong shape names the field when it can (422).
/// `within` prefixes the field (`definition`, `document`).
///
/// # Errors
/// As above; the message carries the line and column.
pub fn parse<T: DeserializeOwned>(text: &str, within: Option<&str>) -> Result<T, Error> {
    // First as a plain tree: a syntax error is told apart from a shape error.
    let tree: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| Error::Invalid {
        code: Code::InvalidJson,
        field: within.map(str::to_owned),
        message: format!("not readable as YAML or JSON: {e}"),
    })?;
    serde_yaml_ng::from_value(tree).map_err(|e| {
        let message = e.to_string();
        let field = match (within, named_field(&message)) {
            (Some(w), Some(f)) => Some(format!("{w}.{f}")),
            (Some(w), None) => Some(w.to_owned()),
            (None, f) => f,
        };
        Error::Invalid {
            code: Code::InvalidField,
            field,
            message,
        }
    })
}

/// Writes `value` as `format`.
///
/// # Errors
/// `Internal`: every value given here is plain data, so a failure is a bug.
pub fn write<T: Serialize>(value: &T, format: Format) -> Result<String, Error> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map_err(|e| Error::Internal(anyhow::anyhow!("encoding JSON: {e}"))),
        Format::Yaml => serde_yaml_ng::to_string(value)
            .map_err(|e| Error::Internal(anyhow::anyhow!("encoding YAML: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::workflow::{Condition, Definition};

    #[test]
    fn yaml_and_json_read_the_same_definition() {
        let yaml = "nodes:\n  - key: a\n    job_id: 1\n  - key: b\n    job_id: 2\nedges:\n  - from: a\n    to: b\n    on: failure\n";
        let json = r#"{"nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 2}],
                       "edges": [{"from": "a", "to": "b", "on": "failure"}]}"#;
        let from_yaml: Definition = parse(yaml, None).unwrap();
        let from_json: Definition = parse(json, None).unwrap();
        assert_eq!(from_yaml, from_json);
        assert_eq!(
            from_yaml.edges[0].on,
            Condition::Failure,
            "`on` is a key, not a boolean"
        );
        let again: Definition = parse(&write(&from_yaml, Format::Yaml).unwrap(), None).unwrap();
        assert_eq!(again, from_yaml);
    }

    #[test]
    fn errors_tell_syntax_from_shape_and_name_the_field() {
        let syntax = parse::<Definition>("nodes: [", Some("definition")).unwrap_err();
        assert_eq!(syntax.code(), Code::InvalidJson);
        assert_eq!(syntax.field(), Some("definition"));
        let shape =
            parse::<Definition>("nodes: []\nsurprise: 1\n", Some("definition")).unwrap_err();
        assert_eq!(shape.code(), Code::InvalidField);
        assert_eq!(shape.field(), Some("definition.surprise"));
        assert!(shape.to_string().contains("surprise"), "{shape}");
        let missing = parse::<Definition>("edges: []\n", None).unwrap_err();
        assert_eq!(missing.field(), Some("nodes"));
    }

    #[test]
    fn media_types_and_names_choose_the_format() {
        assert_eq!(Format::of_media_type("application/yaml"), Format::Yaml);
        assert_eq!(
            Format::of_media_type("text/x-yaml; charset=utf-8"),
            Format::Yaml
        );
        assert_eq!(Format::of_media_type("application/json"), Format::Json);
        assert_eq!(Format::of_media_type(""), Format::Json);
        assert_eq!(Format::from_name("yaml").unwrap(), Format::Yaml);
        assert_eq!(
            Format::from_name("xml").unwrap_err().field(),
            Some("format")
        );
    }
}
