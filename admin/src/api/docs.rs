//! The OpenAPI 3 document of the whole API (`/api/v1/openapi.json`) and the vendored Swagger
//! UI page that renders it (`/api/docs`).

use std::sync::LazyLock;

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

use super::{admin, alerts, jobs, jobs_as_code, meta, reports, workflows};
use crate::error::{ApiError, Error};

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// Every `/api/v1` operation may answer 429 (`http::api_limit`): one shared response,
/// referred to from each operation rather than written into every handler's annotation.
struct RateLimited;

impl utoipa::Modify for RateLimited {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{
            ContentBuilder, HeaderBuilder, ObjectBuilder, Ref, ResponseBuilder, Type,
        };
        let header = |kind: Type, description: &str| {
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(kind)))
                .description(Some(description))
                .build()
        };
        let response = ResponseBuilder::new()
            .description("The caller's request limit is used up (error code `rate_limited`); also sent on answers that pass: `RateLimit-Policy` and `RateLimit`.")
            .header("Retry-After", header(Type::Integer, "Whole seconds (at least 1) until one more request fits."))
            .header("RateLimit-Policy", header(Type::String, "The limits that apply, e.g. `\"general\";q=600;w=60, \"trigger\";q=120;w=60` (q requests per w seconds)."))
            .header("RateLimit", header(Type::String, "What is left of each, e.g. `\"general\";r=12;t=58, \"trigger\";r=0;t=60` (r requests remaining, t seconds until the whole quota is back)."))
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .responses
            .insert("RateLimited".into(), response.into());
        for (_, item) in openapi
            .paths
            .paths
            .iter_mut()
            .filter(|(path, _)| path.starts_with("/api/v1/"))
        {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                operation
                    .responses
                    .responses
                    .entry("429".into())
                    .or_insert_with(|| Ref::from_response_name("RateLimited").into());
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "jobfleet open API", description = "Jobs, runs, workflows, groups, agents, users, tokens, alerts and the audit log. Authenticate with POST /api/v1/auth/token, then send Authorization: Bearer TOKEN. Errors are {\"error\": {\"code\", \"message\", \"field\"?}}. Requests are limited per API token, user or (without a valid credential) client address, with a smaller limit for submits and triggers: past it the answer is 429 with Retry-After; every answer carries the RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers)."),
    paths(
        meta::healthz, meta::readyz, meta::metrics, meta::issue_token, meta::me, meta::change_password,
        jobs::create, jobs::update, jobs::get, jobs::list, jobs::delete, jobs::enable, jobs::disable,
        jobs::script_versions, jobs::script_version, jobs::rollback_script, jobs::cron_preview,
        jobs::list_runs, jobs::get_run, jobs::trigger, jobs::run_log, jobs::kill_run, jobs::retry_run,
        jobs_as_code::export, jobs_as_code::apply, jobs::bulk,
        admin::list_groups, admin::create_group, admin::get_group, admin::update_group, admin::delete_group,
        admin::list_agents,
        admin::fleet,
        admin::approve_agent,
        admin::drain_agent,
        admin::undrain_agent,
        admin::revoke_agent,
        admin::forget_agent,
        admin::list_users, admin::create_user, admin::get_user, admin::update_user, admin::reset_password,
        admin::list_tokens, admin::create_token, admin::revoke_token,
        admin::list_audit,
        alerts::list_channels, alerts::create_channel, alerts::get_channel, alerts::update_channel,
        alerts::delete_channel, alerts::test_channel, alerts::list_events,
        workflows::create, workflows::update, workflows::delete, workflows::get, workflows::list,
        workflows::trigger, workflows::list_runs, workflows::get_run, workflows::operate,
        workflows::mark, workflows::export, workflows::import,
        reports::get,
    ),
    modifiers(&BearerAuth, &RateLimited),
    tags(
        (name = "auth"), (name = "jobs"), (name = "runs"), (name = "groups"), (name = "agents"),
        (name = "users"), (name = "tokens"), (name = "audit"), (name = "alerts"), (name = "meta"),
        (name = "workflows"),
        (name = "reports"),
    )
)]
pub struct ApiDoc;

/// The document as JSON, built at its first request and kept. Built per request it cost 3 MB
/// of allocations each time; handed to the Swagger UI service it was kept as a tree of 3.2 MB
/// in every HTTP worker, an idle admin's largest heap (BENCHMARKS.md, "Idle admin and agent").
static DOCUMENT: LazyLock<Result<Vec<u8>, String>> =
    LazyLock::new(|| serde_json::to_vec(&ApiDoc::openapi()).map_err(|e| e.to_string()));

async fn openapi_json() -> Result<HttpResponse, ApiError> {
    match &*DOCUMENT {
        Ok(json) => Ok(HttpResponse::Ok()
            .content_type(ContentType::json())
            .body(json.as_slice())),
        Err(e) => Err(ApiError(Error::Internal(anyhow::anyhow!(
            "the OpenAPI document does not serialise: {e}"
        )))),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(DOCUMENT_PATH, web::get().to(openapi_json))
        // Where earlier versions had the UI fetch it from; kept for bookmarks and scripts.
        .route("/api/docs/openapi.json", web::get().to(openapi_json))
        .service(
            utoipa_swagger_ui::SwaggerUi::new("/api/docs/{_:.*}")
                .config(utoipa_swagger_ui::Config::new([DOCUMENT_PATH])),
        );
}

const DOCUMENT_PATH: &str = "/api/v1/openapi.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_every_route() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for path in [
            "/api/v1/jobs",
            "/api/v1/jobs/{id}",
            "/api/v1/cron/preview",
            "/api/v1/audit",
            "/api/v1/tokens/{id}",
            "/api/v1/alert-channels/{id}/test",
            "/api/v1/alert-events",
            "/api/v1/reports",
            "/readyz",
        ] {
            assert!(
                paths.contains_key(path),
                "{path} missing from the OpenAPI document"
            );
        }
        assert_eq!(
            doc["openapi"].as_str().map(|v| v.starts_with("3.")),
            Some(true)
        );
        let schemas = &doc["components"]["schemas"];
        assert!(schemas["JobInput"].is_object());
        // DESIGN's http handler: flat fields beside `type`.
        for field in crate::domain::job::HTTP_FIELDS {
            assert!(
                schemas["HandlerInput"]["properties"][field].is_object(),
                "HandlerInput.{field} missing"
            );
        }
        assert_eq!(
            paths["/api/v1/jobs/{id}/trigger"]["post"]["responses"]["429"]["$ref"],
            "#/components/responses/RateLimited"
        );
        assert!(paths["/readyz"]["get"]["responses"]["429"].is_null());
        let limited = &doc["components"]["responses"]["RateLimited"];
        assert!(
            limited["headers"]["Retry-After"].is_object()
                && limited["headers"]["RateLimit"].is_object()
        );
        let text = doc.to_string();
        for reference in text.split("\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap_or_default();
            assert!(
                schemas[name].is_object(),
                "{name} is referred to but not defined"
            );
        }
    }
}
