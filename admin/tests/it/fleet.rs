//! Fleet scale (issue 19): two thousand agents registered over the real registry endpoint, the
//! agents list paged, sorted and filtered, the fleet summary, the console pages staying small,
//! and the one agent that stops heartbeating found among them.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::console::Console;
use crate::support::{ADMIN_PASSWORD, TestApp, api_test, simulated_address, simulated_heartbeats};

const AGENTS: usize = 2_000;

fn address(i: usize) -> String {
    simulated_address(i)
}

/// Heartbeats of agents `which`; even ones in `fleet-a`, odd in `fleet-b`.
async fn beat_all(app: &TestApp, which: impl Iterator<Item = usize>) {
    simulated_heartbeats(
        app,
        which,
        |i| if i % 2 == 0 { "fleet-a" } else { "fleet-b" },
    )
    .await;
}

fn addresses(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["address"].as_str().unwrap().to_owned())
        .collect()
}

async fn agents_page(app: &TestApp, token: &str, query: &str) -> Value {
    let r = app.get(&format!("/api/v1/agents?{query}"), token).await;
    assert_eq!(r.status, StatusCode::OK, "{query}: {}", r.body);
    r.body
}

async fn total(app: &TestApp, query: &str) -> i64 {
    agents_page(app, &app.admin, query).await["total"]
        .as_i64()
        .unwrap()
}

async fn the_fleet_is_paged_filtered_and_the_silent_agent_is_found(app: &TestApp) {
    let group_a = app.group("fleet-a").await;
    let group_b = app.group("fleet-b").await;
    beat_all(app, 0..AGENTS).await;
    // Twenty seconds later everyone beats again but agents 7 and 8; fifteen more and those two
    // have been silent for 35 s: dead. Agent 10 is drained.
    app.clock.advance(20_000);
    beat_all(app, (0..AGENTS).filter(|i| ![7, 8].contains(i))).await;
    let page = agents_page(app, &app.admin, &format!("q={}", address(10))).await;
    let drained_id = page["items"][0]["id"].as_i64().unwrap();
    let r = app
        .post(
            &format!("/api/v1/agents/{drained_id}/drain"),
            &app.admin,
            Value::Null,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    app.clock.advance(15_000);

    // The first page is small, and pages cover everyone once.
    let first = agents_page(app, &app.admin, "").await;
    assert_eq!(
        (
            first["total"].as_i64(),
            first["limit"].as_i64(),
            first["offset"].as_i64()
        ),
        (Some(AGENTS as i64), Some(50), Some(0))
    );
    assert_eq!(first["items"].as_array().unwrap().len(), 50);
    let mut seen = HashSet::new();
    for offset in (0..AGENTS).step_by(500) {
        let page = agents_page(
            app,
            &app.admin,
            &format!("limit=500&offset={offset}&sort=last_seen"),
        )
        .await;
        seen.extend(addresses(&page));
    }
    assert_eq!(seen.len(), AGENTS);

    // The silent ones, exactly, among two thousand.
    let dead = agents_page(app, &app.admin, "status=dead").await;
    assert_eq!(
        addresses(&dead).into_iter().collect::<HashSet<_>>(),
        HashSet::from([address(7), address(8)])
    );
    assert!(
        dead["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["live"] == false && a["status"] == "dead")
    );
    let drained = agents_page(app, &app.admin, "status=drained").await;
    assert_eq!(addresses(&drained), [address(10)]);
    assert_eq!(total(app, "status=live").await, AGENTS as i64 - 3);
    // Group a holds the even ones: 8 is dead and 10 drained.
    assert_eq!(
        total(app, &format!("status=live&group_id={group_a}")).await,
        AGENTS as i64 / 2 - 2
    );
    let zone_1 = (0..AGENTS).filter(|i| i % 3 == 1).count();
    assert_eq!(total(app, "label=zone%3Dz1").await, zone_1 as i64);
    assert_eq!(total(app, "label=zone").await, AGENTS as i64);
    assert_eq!(total(app, "label=rack").await, 0);
    assert_eq!(total(app, "version=2.3").await, AGENTS as i64 / 4);
    assert_eq!(
        total(app, "mode=push&approval=approved").await,
        AGENTS as i64
    );
    assert_eq!(total(app, "mode=connect").await, 0);
    assert_eq!(total(app, "q=node-111").await, 10);
    let newest_hosts = agents_page(app, &app.admin, "sort=hostname&order=desc&limit=3").await;
    let hosts: Vec<&str> = newest_hosts["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["hostname"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["node-1999", "node-1998", "node-1997"]);
    let oldest = agents_page(app, &app.admin, "sort=last_seen&limit=2").await;
    assert_eq!(
        addresses(&oldest).into_iter().collect::<HashSet<_>>(),
        HashSet::from([address(7), address(8)])
    );

    // Bad parameters are refused, naming the parameter.
    for (query, field) in [
        ("status=alive", "status"),
        ("approval=maybe", "approval"),
        ("mode=pull", "mode"),
        ("label=bad%20key", "label"),
        ("sort=cpu", "sort"),
        ("order=sideways", "order"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("offset=-1", "offset"),
    ] {
        let r = app
            .get(&format!("/api/v1/agents?{query}"), &app.admin)
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            r.body
        );
        assert_eq!(r.field(), Some(field), "{query}: {}", r.body);
    }
    for (query, said) in [
        ("limit=many", "invalid digit"),
        ("group_id=a", "invalid digit"),
        ("colour=red", "colour"),
    ] {
        let r = app
            .get(&format!("/api/v1/agents?{query}"), &app.admin)
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            r.body
        );
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(said), "{query}: {}", r.body);
    }

    // The fleet at a glance.
    let fleet = app.get("/api/v1/fleet", &app.admin).await.body;
    assert_eq!(
        (
            fleet["total"].as_i64(),
            fleet["live"].as_i64(),
            fleet["drained"].as_i64(),
            fleet["dead"].as_i64(),
            fleet["pending"].as_i64(),
        ),
        (
            Some(AGENTS as i64),
            Some(AGENTS as i64 - 3),
            Some(1),
            Some(2),
            Some(0)
        ),
        "{fleet}"
    );
    let group = |name: &str| -> Value {
        fleet["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["app_name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(group("fleet-a")["group_id"], group_a);
    assert_eq!(
        (
            group("fleet-a")["live"].as_i64(),
            group("fleet-a")["dead"].as_i64()
        ),
        (Some(AGENTS as i64 / 2 - 2), Some(1))
    );
    assert_eq!(group("fleet-b")["dead"], 1);
    let versions: Vec<(&str, i64)> = fleet["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["value"].as_str().unwrap(), v["total"].as_i64().unwrap()))
        .collect();
    assert_eq!(versions.len(), 4, "{versions:?}");
    assert!(versions.iter().all(|(_, n)| *n == AGENTS as i64 / 4));
    assert_eq!(fleet["modes"][0]["value"], "push");
    assert_eq!(fleet["limits_modes"][0]["value"], "rlimit");
    assert_eq!(fleet["died_last_hour"], 2);
    let died: HashSet<&str> = fleet["died"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        died,
        HashSet::from([address(7).as_str(), address(8).as_str()])
    );

    // A viewer of group a sees group a's agents only, in the list and the counts.
    let (_, viewer) = app.user("fleet-viewer", "viewer", &[group_a]).await;
    let theirs = agents_page(app, &viewer, "limit=500").await;
    assert_eq!(theirs["total"], AGENTS / 2);
    let fleet = app.get("/api/v1/fleet", &viewer).await.body;
    assert_eq!(
        (fleet["total"].as_i64(), fleet["dead"].as_i64()),
        (Some(AGENTS as i64 / 2), Some(1))
    );
    assert_eq!(fleet["groups"].as_array().unwrap().len(), 1);
    let hidden = agents_page(app, &viewer, "status=dead").await;
    assert_eq!(addresses(&hidden), [address(8)]);
    // Naming another group's id finds nothing, exactly like an id that does not exist.
    for group in [group_b, 999_999] {
        let other = agents_page(app, &viewer, &format!("group_id={group}")).await;
        assert_eq!(
            (
                other["total"].as_i64(),
                other["items"].as_array().map(Vec::len)
            ),
            (Some(0), Some(0))
        );
    }

    // The console: a page of fifty agents, however many there are; filters in the URL.
    let mut console = Console::new(app);
    console.login("admin", ADMIN_PASSWORD).await;
    let page = console.get("/console/agents").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.body.matches("class=\"agent-row\"").count(), 50);
    assert!(page.body.len() < 150_000, "{} bytes", page.body.len());
    assert!(page.body.contains(&format!("1–50 / {AGENTS}")), "pager");
    let page = console
        .get("/console/agents?status=dead&q=&label=")
        .await
        .body;
    assert_eq!(page.matches("class=\"agent-row\"").count(), 2);
    assert!(page.contains(&address(7)) && page.contains(&address(8)));
    let page = console.get("/console/agents?status=alive").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("id=\"filter-error\""),
        "a bad filter is said on the page"
    );
    let page = console.get("/console/fleet").await.body;
    for shown in [
        format!("id=\"fleet-live\">{}<", AGENTS - 3),
        "id=\"fleet-dead\">2<".to_owned(),
        "id=\"fleet-died-count\">2<".to_owned(),
        address(7),
    ] {
        assert!(page.contains(&shown), "the fleet page shows {shown}");
    }
    let dashboard = console.get("/console").await.body;
    assert!(
        dashboard.contains("id=\"fleet-dead\">2<"),
        "the dashboard shows the fleet"
    );
}
api_test!(the_fleet_is_paged_filtered_and_the_silent_agent_is_found);
