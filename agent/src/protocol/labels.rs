//! Agent labels (`zone=a`, `gpu=true`): what an agent says about its host in its heartbeat, and
//! what a job may require of the agent that runs it. One set of rules for both ends, so that a
//! label the agent accepts in its config is one the admin stores and matches.

use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

/// At most this many labels on an agent or a job.
pub const MAX_LABELS: usize = 32;
/// Longest key and longest value, in bytes (as Kubernetes label names).
pub const MAX_PART: usize = 63;

/// Checks one label: a key of letters, digits and `.`, `_`, `-`, `/`, starting with a letter
/// or digit; a value of letters, digits and `.`, `_`, `-` (may be empty).
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    let key_ok = !key.is_empty()
        && key.len() <= MAX_PART
        && key.starts_with(|c: char| c.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if !key_ok {
        return Err(format!(
            "label key `{key}`: 1 to {MAX_PART} letters, digits, `.`, `_`, `-` or `/`, starting with a letter or digit"
        ));
    }
    let value_ok = value.len() <= MAX_PART
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !value_ok {
        return Err(format!(
            "label `{key}`: the value `{value}` may have up to {MAX_PART} letters, digits, `.`, `_` or `-`"
        ));
    }
    Ok(())
}

/// Checks a whole set.
pub fn check_labels(labels: &Labels) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!("{} labels; at most {MAX_LABELS}", labels.len()));
    }
    labels.iter().try_for_each(|(k, v)| check_label(k, v))
}

/// Parses `zone=a, gpu=true` (commas between labels, spaces around them ignored; empty text is
/// no labels).
pub fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = Labels::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}` is not key=value"))?;
        let (key, value) = (key.trim(), value.trim());
        check_label(key, value)?;
        if labels.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("label key `{key}` given twice"));
        }
    }
    check_labels(&labels)?;
    Ok(labels)
}

/// The text form `parse_labels` reads back: `gpu=true,zone=a`, keys in order.
pub fn format_labels(labels: &Labels) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether an agent carrying `have` may run a job that requires `want`: every wanted label,
/// with its value.
pub fn satisfies(have: &Labels, want: &Labels) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_back_in_one_canonical_form() {
        let labels = parse_labels(" zone=a ,gpu=true,, team/name=x-1 ").unwrap();
        assert_eq!(format_labels(&labels), "gpu=true,team/name=x-1,zone=a");
        assert_eq!(parse_labels(&format_labels(&labels)).unwrap(), labels);
        assert!(parse_labels("").unwrap().is_empty());
        assert_eq!(parse_labels("empty=").unwrap()["empty"], "");
    }

    #[test]
    fn bad_labels_are_named() {
        for (text, says) in [
            ("zone", "not key=value"),
            ("=a", "label key ``"),
            ("-zone=a", "starting with a letter"),
            ("zone=a b", "the value `a b`"),
            ("zone=a,zone=b", "given twice"),
            ("zone=<b>", "the value `<b>`"),
        ] {
            let err = parse_labels(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
        let many: String = (0..33).map(|i| format!("k{i}=v,")).collect();
        assert!(parse_labels(&many).unwrap_err().contains("at most 32"));
        assert!(parse_labels(&format!("{}=v", "k".repeat(64))).is_err());
    }

    #[test]
    fn a_job_runs_where_every_wanted_label_matches() {
        let have = parse_labels("zone=a,gpu=true").unwrap();
        assert!(satisfies(&have, &Labels::new()));
        assert!(satisfies(&have, &parse_labels("zone=a").unwrap()));
        assert!(!satisfies(&have, &parse_labels("zone=b").unwrap()));
        assert!(!satisfies(&have, &parse_labels("zone=a,disk=ssd").unwrap()));
    }
}
