//! A webhook receiver on loopback: records every request; `/flaky` answers 500 once, then 200.
//! For http jobs: `/created` answers 201, `/unavailable` 503, `/slow` after a minute, `/big`
//! with 200 kB.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub query: HashMap<String, String>,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Hit {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Clone, Default)]
pub struct Receiver {
    hits: Arc<Mutex<Vec<Hit>>>,
    flaky_failures: Arc<Mutex<u32>>,
    base: String,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let receiver = Receiver {
            base: format!("http://{}", listener.local_addr().unwrap()),
            ..Default::default()
        };
        *receiver.flaky_failures.lock().unwrap() = 1;
        let shared = receiver.clone();
        let server = actix_web::HttpServer::new(move || {
            let shared = shared.clone();
            actix_web::App::new().default_service(actix_web::web::to(
                move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                    let shared = shared.clone();
                    async move {
                        let query = url::form_urlencoded::parse(req.query_string().as_bytes())
                            .into_owned()
                            .collect();
                        let headers = req
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect();
                        shared.hits.lock().unwrap().push(Hit {
                            path: req.path().to_owned(),
                            query,
                            headers,
                            body: body.to_vec(),
                        });
                        match req.path() {
                            "/created" => {
                                return actix_web::HttpResponse::Created().body("created");
                            }
                            "/unavailable" => {
                                return actix_web::HttpResponse::ServiceUnavailable()
                                    .body("down for maintenance");
                            }
                            "/slow" => {
                                tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                            }
                            "/big" => {
                                return actix_web::HttpResponse::Ok().body("x".repeat(200_000));
                            }
                            _ => {}
                        }
                        if req.path() == "/flaky" {
                            let mut left = shared.flaky_failures.lock().unwrap();
                            if *left > 0 {
                                *left -= 1;
                                return actix_web::HttpResponse::InternalServerError()
                                    .body("boom: the receiver is down");
                            }
                        }
                        actix_web::HttpResponse::Ok()
                            .json(json!({"errcode": 0, "errmsg": "ok", "code": 0}))
                    }
                },
            ))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        tokio::spawn(server);
        receiver
    }

    pub fn hits(&self, path: &str) -> Vec<Hit> {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}
