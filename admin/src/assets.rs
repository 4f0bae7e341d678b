//! The console's static files (`static/`), compiled into the binary so one file is a whole
//! admin. URLs carry a content hash, so browsers may cache them forever and still see a new
//! release at once.

use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use actix_web::{HttpRequest, HttpResponse, web};
use rust_embed::Embed;

#[derive(Embed)]
#[folder = "../static/"]
struct Static;

/// `/static/NAME?v=HASH` for an embedded file (the bare path when it does not exist, so a
/// missing asset shows up as a 404 rather than a panic).
pub fn url(name: &str) -> String {
    match Static::get(name) {
        Some(file) => format!(
            "/static/{name}?v={}",
            &hex::encode(file.metadata.sha256_hash())[..12]
        ),
        None => format!("/static/{name}"),
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

async fn serve(req: HttpRequest, path: web::Path<String>) -> HttpResponse {
    let name = path.into_inner();
    let Some(file) = Static::get(&name) else {
        return HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body("no such file");
    };
    let etag = format!("\"{}\"", hex::encode(file.metadata.sha256_hash()));
    if req
        .headers()
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag)
    {
        return HttpResponse::NotModified().finish();
    }
    // Only a URL naming this exact content may be cached for good.
    let versioned = req.query_string().starts_with("v=");
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, content_type(&name)))
        .insert_header((ETAG, etag))
        .insert_header((
            CACHE_CONTROL,
            if versioned {
                "public, max-age=31536000, immutable"
            } else {
                "no-cache"
            },
        ))
        .body(file.data.into_owned())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/static/{name:.+}", web::get().to(serve));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_assets_get_hashed_urls() {
        assert!(url("app.css").starts_with("/static/app.css?v="));
        assert!(url("app.js").starts_with("/static/app.js?v="));
        assert_eq!(url("missing.css"), "/static/missing.css");
    }
}
