//! `jobfleet export` and `jobfleet apply`: groups and jobs as a document kept in version control.

use std::io::Read;

use serde_json::Value;

use crate::api::Api;
use crate::failure::Failure;
use crate::table::{self, Column};
use crate::{ApplyArgs, Output};

/// The largest document read from a file or stdin; the admin bounds its body too.
const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

const CHANGES: &[Column] = &[
    Column {
        heading: "ACTION",
        cell: |c| table::text(&c["action"]),
    },
    Column {
        heading: "KIND",
        cell: |c| table::text(&c["object"]),
    },
    Column {
        heading: "GROUP",
        cell: |c| table::text(&c["group"]),
    },
    Column {
        heading: "JOB",
        cell: |c| table::text(&c["job"]),
    },
    Column {
        heading: "ID",
        cell: |c| table::text(&c["id"]),
    },
    Column {
        heading: "CHANGED",
        cell: |c| {
            c["fields"]
                .as_array()
                .map(|f| f.iter().map(table::text).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        },
    },
];

/// Prints the groups' document: YAML for people, JSON with `-o json`, as the admin wrote it.
pub async fn export(api: &Api, out: Output, groups: &[String]) -> Result<(), Failure> {
    let format = match out {
        Output::Json => "json",
        Output::Table => "yaml",
    };
    let mut query = vec![("format", format.to_owned())];
    if !groups.is_empty() {
        query.push(("groups", groups.join(",")));
    }
    let document = api.get_text("/export", &query).await?;
    print!("{document}");
    if !document.ends_with('\n') {
        println!();
    }
    Ok(())
}

/// Reads a document (YAML or JSON) from `path` (`-`: stdin) and applies it.
pub async fn apply(api: &Api, out: Output, args: &ApplyArgs) -> Result<(), Failure> {
    let (path, dry_run) = (args.file.as_str(), args.dry_run);
    let text = read_document(path)?;
    // YAML 1.2 reads JSON too; the admin answers for the document's shape.
    let document: Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| Failure::Usage(format!("{path}: not readable as YAML or JSON: {e}")))?;
    let query = [
        ("dry_run", dry_run.to_string()),
        ("prune", args.prune.to_string()),
    ];
    let report = api
        .call(reqwest::Method::POST, "/apply", &query, Some(document))
        .await?;
    out.object(&report, || {
        let changes = report["changes"].as_array().map_or(&[][..], Vec::as_slice);
        let shown: Vec<Value> = changes
            .iter()
            .filter(|c| c["action"] != "unchanged")
            .cloned()
            .collect();
        let mut text = if shown.is_empty() {
            String::new()
        } else {
            table::render(CHANGES, &shown)
        };
        text.push_str(&format!(
            "{} created, {} updated, {} unchanged, {} deleted{}\n",
            table::text(&report["created"]),
            table::text(&report["updated"]),
            table::text(&report["unchanged"]),
            table::text(&report["deleted"]),
            if dry_run {
                " (dry run: nothing was written)"
            } else {
                ""
            }
        ));
        text
    });
    Ok(())
}

fn read_document(path: &str) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin()
            .take(MAX_DOCUMENT_BYTES + 1)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_DOCUMENT_BYTES + 1).read_to_string(&mut text))
    };
    read.map_err(|e| Failure::Usage(format!("{path}: {e}")))?;
    if text.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(Failure::Usage(format!(
            "{path}: larger than {} MiB",
            MAX_DOCUMENT_BYTES / 1024 / 1024
        )));
    }
    if text.trim().is_empty() {
        return Err(Failure::Usage(format!("{path}: empty")));
    }
    Ok(text)
}
