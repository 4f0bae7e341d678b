//! The layered-settings machinery of both binaries' configs (the agent's `config` and the
//! admin's): built-in defaults, then a TOML file, then environment variables, then flags, each
//! value remembered with where it came from, so every error names the key and its source.
//! Each config keeps its own keys, prefixes and validation; this holds what they share.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(String),
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("the default"),
            Source::File(path) => write!(f, "config file {}", path.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::Flag(flag) => write!(f, "flag --{flag}"),
        }
    }
}

/// A configuration problem, naming the key and where its value came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config key `{key}` ({origin}): {message}")]
pub struct ConfigError {
    pub key: String,
    pub origin: String,
    pub message: String,
}

/// Every known key's raw text and source; a later layer replaces an earlier one.
#[derive(Debug, Clone)]
pub struct Layers {
    keys: Vec<&'static str>,
    values: BTreeMap<&'static str, (String, Source)>,
}

impl Layers {
    /// The known keys with their defaults (`None`: no default).
    pub fn new(keys: impl IntoIterator<Item = (&'static str, Option<&'static str>)>) -> Self {
        let mut layers = Layers {
            keys: Vec::new(),
            values: BTreeMap::new(),
        };
        for (key, default) in keys {
            layers.keys.push(key);
            if let Some(value) = default {
                layers.set(key, value.to_owned(), Source::Default);
            }
        }
        layers
    }

    /// The known key spelled `name`.
    pub fn known(&self, name: &str) -> Option<&'static str> {
        self.keys.iter().copied().find(|k| *k == name)
    }

    pub fn set(&mut self, key: &'static str, value: String, source: Source) {
        self.values.insert(key, (value, source));
    }

    /// Reads a TOML file of top-level keys. Strings, integers and booleans are taken as text;
    /// any other value goes to `other`, which turns it into text or says what was expected. A
    /// key that is not known is refused with `unknown` as the message.
    ///
    /// # Errors
    /// An unreadable or invalid file (key `config`), an unknown key, or a value `other` refuses.
    pub fn read_file(
        &mut self,
        path: &Path,
        unknown: &str,
        other: impl Fn(&'static str, toml::Value) -> Result<String, String>,
    ) -> Result<(), ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            key: key.to_owned(),
            origin: Source::File(path.to_owned()).to_string(),
            message,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("config", format!("cannot read the file: {e}")))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| err("config", format!("not valid TOML: {e}")))?;
        for (name, value) in table {
            let key = self
                .known(&name)
                .ok_or_else(|| err(&name, unknown.to_owned()))?;
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                value => other(key, value).map_err(|message| err(key, message))?,
            };
            self.set(key, text, Source::File(path.to_owned()));
        }
        Ok(())
    }

    /// Takes `value` from the environment variable `var`, whose name after the prefix is
    /// `suffix`; false when that names no key (the caller decides whether that is an error).
    pub fn set_env(&mut self, var: &str, suffix: &str, value: &str) -> bool {
        match self.known(&suffix.to_ascii_lowercase()) {
            Some(key) => {
                self.set(key, value.to_owned(), Source::Env(var.to_owned()));
                true
            }
            None => false,
        }
    }

    /// Takes `value` from the flag for `key` (spelled with `-` on the command line).
    ///
    /// # Errors
    /// `key` is not known.
    pub fn set_flag(&mut self, key: &str, value: String) -> Result<(), ConfigError> {
        let known = self.known(key).ok_or_else(|| ConfigError {
            key: key.to_owned(),
            origin: Source::Flag(key.to_owned()).to_string(),
            message: "unknown flag".into(),
        })?;
        self.set(known, value, Source::Flag(key.replace('_', "-")));
        Ok(())
    }

    /// Where the value of `key` came from; `None` when it has none.
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.values.get(key).map(|(_, source)| source)
    }

    /// An error about `key`, naming where its value came from.
    pub fn error(&self, key: &str, message: String) -> ConfigError {
        ConfigError {
            key: key.to_owned(),
            origin: self
                .source(key)
                .map_or_else(|| Source::Default.to_string(), Source::to_string),
            message,
        }
    }

    /// The value of `key` exactly as given.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|(value, _)| value.as_str())
    }

    /// The value of `key`, trimmed (possibly empty).
    pub fn get(&self, key: &str) -> Option<String> {
        self.raw(key).map(|v| v.trim().to_owned())
    }

    /// The value of `key`, trimmed; `None` when it is unset or blank.
    pub fn text(&self, key: &str) -> Option<String> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// A whole number in `min..=max`.
    ///
    /// # Errors
    /// Not a whole number, or out of range.
    pub fn number(&self, key: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
        let text = self.get(key).unwrap_or_default();
        let n: u64 = text
            .parse()
            .map_err(|_| self.error(key, format!("`{text}` is not a whole number")))?;
        if !(min..=max).contains(&n) {
            return Err(self.error(key, format!("{n} is out of range {min}..={max}")));
        }
        Ok(n)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn later_layers_win_and_errors_name_the_source() {
        let mut layers = Layers::new([("workers", Some("2")), ("name", None)]);
        assert_eq!(layers.source("workers"), Some(&Source::Default));
        assert!(layers.set_env("JF_WORKERS", "WORKERS", "x"));
        assert!(!layers.set_env("JF_OTHER", "OTHER", "1"));
        let err = layers.number("workers", 1, 9).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config key `workers` (environment variable JF_WORKERS): `x` is not a whole number"
        );
        layers.set_flag("workers", "12".into()).unwrap();
        assert_eq!(
            layers.number("workers", 1, 9).unwrap_err().message,
            "12 is out of range 1..=9"
        );
        assert_eq!(layers.error("workers", "m".into()).origin, "flag --workers");
        assert_eq!(
            layers.set_flag("nope", "1".into()).unwrap_err().message,
            "unknown flag"
        );
        assert_eq!(layers.error("name", "m".into()).origin, "the default");
        layers.set("name", "  ".into(), Source::Default);
        assert_eq!(layers.get("name").as_deref(), Some(""));
        assert_eq!(layers.text("name"), None);
    }

    #[test]
    fn a_file_gives_text_and_refuses_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "workers = 3\nname = \"n\"\nlist = [1]\n").unwrap();
        let mut layers = Layers::new([("workers", None), ("name", None), ("list", None)]);
        let err = layers
            .read_file(&path, "unknown key", |_, v| {
                Err(format!("unexpected {}", v.type_str()))
            })
            .unwrap_err();
        assert_eq!(
            (err.key.as_str(), err.message.as_str()),
            ("list", "unexpected array")
        );
        std::fs::write(&path, "other = 1\n").unwrap();
        let err = layers
            .read_file(&path, "unknown key", |_, _| Ok(String::new()))
            .unwrap_err();
        assert_eq!(
            (err.key.as_str(), err.message.as_str()),
            ("other", "unknown key")
        );
        std::fs::write(&path, "workers = 3\nname = \"n\"\n").unwrap();
        layers
            .read_file(&path, "unknown key", |_, _| Ok(String::new()))
            .unwrap();
        assert_eq!(layers.number("workers", 1, 9).unwrap(), 3);
        assert_eq!(layers.source("name"), Some(&Source::File(path)));
    }
}
