//! Id lists stored as comma-separated text (`job.children`, `job.alert_channels`).

/// Splits a stored comma-separated id list; a part that is not an id is skipped.
pub fn parse_id_list(text: &str) -> Vec<i64> {
    text.split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

pub fn join_id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_skips_junk() {
        assert_eq!(parse_id_list(&join_id_list(&[3, 1, 2])), vec![3, 1, 2]);
        assert_eq!(parse_id_list(" 4, x,,5 "), vec![4, 5]);
        assert!(parse_id_list("").is_empty());
    }
}
