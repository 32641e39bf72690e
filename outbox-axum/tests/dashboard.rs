//! The admin dashboard: its login, forms and authorisation over HTTP, and
//! the page in a real headless browser (Debian's `chromium` driven through
//! `chromedriver` by fantoccini): a failing shard shows with its error, a
//! dead letter is replayed with a click and is gone, a screenshot is saved
//! under `target/tmp/`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::BodyExt;
use outbox_axum::admin::{Admin, BearerToken};
use outbox_core::history::Sample;
use outbox_core::store::StoreAdmin;
use outbox_core::{Drainer, ManualClock, OutboxKind};
use outbox_seaorm::backfill::Backfill;
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, SeaOrmStore, ShardId};
use outbox_testing::database::{DbBackend, TestDatabase};
use serde_json::json;
use tower::ServiceExt;

outbox_core::registry! {
    OrganizationScope = 0 (shard_field = "organization_id") {
        OrganizationUpdate = 1,
    }
    WebhookScope = 1 {
        WebhookDelivery = 2,
    }
}

type Recorder = outbox_testing::Recorder<OutboxCategory>;

const TOKEN: &str = "the dashboard test's operator token";
/// A viewer's: the page without its forms.
const VIEWER_TOKEN: &str = "the dashboard test's viewer token";

struct Setup {
    db: TestDatabase,
    recorder: Recorder,
    drainer: Drainer<OutboxCategory>,
    /// What the dashboard's sessions expire by.
    clock: ManualClock,
    /// The admin router nested at `/admin/outbox`.
    app: Router,
}

/// A database with a failing organization shard (1) and a dead-lettered
/// webhook (object 7), after one drain round.
async fn setup(backend: DbBackend, label: &str) -> Setup {
    let db = TestDatabase::of(backend, label).await.unwrap();
    for message in [
        OutboxMessage::new(OutboxCategory::OrganizationUpdate, ShardId(1), ObjectId(1))
            .with_payload(json!({ "name": "acme" })),
        OutboxMessage::new(OutboxCategory::WebhookDelivery, ShardId(7), ObjectId(7))
            .with_payload(json!({ "url": "https://hooks.example/7" })),
    ] {
        write_region(&db.db, message).await.unwrap();
    }
    let recorder = Recorder::new();
    let drainer = Drainer::builder(
        SeaOrmStore::new(db.db.clone()).unwrap(),
        recorder.receivers(),
    )
    .dead_letter(OutboxScope::WebhookScope, 1)
    .build();
    recorder.fail_when(|_| true);
    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    // The wrong credentials these tests send stay within the allowance
    // (throttling has its own test in admin.rs).
    let admin = Admin::new(drainer.clone())
        .backfill(Backfill::new(), db.db.clone())
        .login_throttle(100, std::time::Duration::from_secs(60));
    let clock = ManualClock::starting_now();
    let app = Router::new()
        .nest(
            "/admin/outbox",
            admin.router(
                BearerToken::new(TOKEN)
                    .unwrap()
                    .viewer("on-call", VIEWER_TOKEN)
                    .unwrap()
                    .clock(clock.clone()),
            ),
        )
        .layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 1))));
    Setup {
        db,
        recorder,
        drainer,
        clock,
        app,
    }
}

/// Logs in with `token`: the `name=value` of the session cookie.
async fn logged_in(app: &Router, token: &str) -> String {
    let login = send(
        app,
        Method::POST,
        "/admin/outbox/login",
        &[],
        Some(&format!("token={token}")),
    )
    .await;
    assert_eq!(login.status, StatusCode::SEE_OTHER, "{}", login.body);
    let cookie = login.cookie.unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

struct Answer {
    status: StatusCode,
    location: Option<String>,
    cookie: Option<String>,
    body: String,
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    form: Option<&str>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = match form {
        Some(form) => request
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form.to_owned())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let header_text = |name| {
        response
            .headers()
            .get(name)
            .map(|value: &header::HeaderValue| value.to_str().unwrap().to_owned())
    };
    let (location, cookie) = (
        header_text(header::LOCATION),
        header_text(header::SET_COOKIE),
    );
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        location,
        cookie,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// Nothing was paused, replayed or discarded.
async fn nothing_changed(db: &TestDatabase) {
    let store = db.store();
    assert!(store.controls().await.unwrap().is_empty());
    assert_eq!(
        store
            .dead_letters(OutboxKind::Region, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.pending_count(OutboxKind::Region).await.unwrap(), 1);
}

/// Without the token: the page sends the browser to the login form, every
/// form and the JSON routes answer 401, and nothing changes. A wrong token
/// at the login form is refused; the right one sets an `HttpOnly`,
/// `SameSite=Strict` cookie scoped to the mount path.
async fn the_dashboard_needs_the_token(backend: DbBackend) {
    let Setup { db, app, clock, .. } = setup(backend, "dashboard_token").await;
    let page = send(&app, Method::GET, "/admin/outbox/dashboard", &[], None).await;
    assert_eq!(
        (page.status, page.location.as_deref()),
        (StatusCode::SEE_OTHER, Some("login"))
    );
    let dead_id = db
        .store()
        .dead_letters(OutboxKind::Region, 1)
        .await
        .unwrap()[0]
        .row
        .id;
    let replay = format!("kind=region&ids={dead_id}");
    for (uri, form) in [
        (
            "/admin/outbox/actions/pause",
            "kind=region&scope=0&identifier=1",
        ),
        ("/admin/outbox/actions/cull", "kind=region&scope=1"),
        ("/admin/outbox/actions/replay", replay.as_str()),
        ("/admin/outbox/actions/discard", replay.as_str()),
        (
            "/admin/outbox/actions/retry",
            "kind=region&scope=0&identifier=1",
        ),
    ] {
        let token_as_cookie = format!("outbox_admin_session={TOKEN}");
        for cookie in [
            None,
            Some("outbox_admin_session=wrong"),
            Some(token_as_cookie.as_str()),
        ] {
            let headers: Vec<(&str, &str)> = cookie.iter().map(|c| ("cookie", *c)).collect();
            let answer = send(&app, Method::POST, uri, &headers, Some(form)).await;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{uri} {cookie:?}");
        }
    }
    let backfills = send(&app, Method::GET, "/admin/outbox/backfills", &[], None).await;
    assert_eq!(backfills.status, StatusCode::UNAUTHORIZED);

    let wrong = send(
        &app,
        Method::POST,
        "/admin/outbox/login",
        &[],
        Some("token=nope"),
    )
    .await;
    assert_eq!(
        (wrong.status, wrong.cookie),
        (StatusCode::UNAUTHORIZED, None)
    );
    nothing_changed(&db).await;

    let login = send(
        &app,
        Method::POST,
        "/admin/outbox/login",
        &[],
        Some(&format!("token={TOKEN}")),
    )
    .await;
    assert_eq!(
        (login.status, login.location.as_deref()),
        (StatusCode::SEE_OTHER, Some("dashboard"))
    );
    let set_cookie = login.cookie.unwrap();
    assert!(
        set_cookie.starts_with("outbox_admin_session="),
        "{set_cookie}"
    );
    assert!(
        set_cookie.ends_with("; Path=/admin/outbox; HttpOnly; SameSite=Strict; Max-Age=43200"),
        "{set_cookie}"
    );
    assert!(!set_cookie.contains(TOKEN), "the cookie holds the token");
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let page = send(
        &app,
        Method::GET,
        "/admin/outbox/dashboard",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("Failing shards (1)"), "{}", page.body);
    let bearer = format!("Bearer {TOKEN}");
    let backfills = send(
        &app,
        Method::GET,
        "/admin/outbox/backfills",
        &[("authorization", &bearer)],
        None,
    )
    .await;
    assert_eq!(
        (backfills.status, backfills.body.as_str()),
        (StatusCode::OK, "[]")
    );

    // Twelve hours later the session has expired: back to the login form.
    clock.advance(std::time::Duration::from_secs(12 * 3600));
    let page = send(
        &app,
        Method::GET,
        "/admin/outbox/dashboard",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(
        (page.status, page.location.as_deref()),
        (StatusCode::SEE_OTHER, Some("login"))
    );

    // A logout ends the session: its cookie is refused, a copy of it too.
    let cookie = logged_in(&app, TOKEN).await;
    let logout = send(
        &app,
        Method::POST,
        "/admin/outbox/logout",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(logout.status, StatusCode::SEE_OTHER);
    assert!(logout.cookie.unwrap().contains("Max-Age=0"));
    let page = send(
        &app,
        Method::GET,
        "/admin/outbox/dashboard",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "a logged-out session");
    nothing_changed(&db).await;
}

/// A form from another origin is refused (403) even with the cookie, and
/// bad form input comes back to the page as an error, changing nothing.
async fn forms_from_elsewhere_or_with_bad_input_change_nothing(backend: DbBackend) {
    let Setup { db, app, .. } = setup(backend, "dashboard_forms").await;
    let cookie = logged_in(&app, TOKEN).await;
    for (name, value) in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("origin", "http://evil.example"),
    ] {
        let answer = send(
            &app,
            Method::POST,
            "/admin/outbox/actions/pause",
            &[
                ("cookie", &cookie),
                (name, value),
                ("host", "admin.example"),
            ],
            Some("kind=region&scope=0"),
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{name}: {value}");
    }
    for (action, form, error) in [
        (
            "pause",
            "kind=moon&scope=0",
            "`kind` is `region` or `control`",
        ),
        ("pause", "kind=region", "`scope` is required"),
        ("pause", "kind=region&scope=x", "`scope` is not a number"),
        (
            "pause",
            "kind=region&scope=0&region=us",
            "the region outbox has none",
        ),
        (
            "pause",
            "kind=control&scope=0",
            "the control outbox needs `region`",
        ),
        (
            "resume",
            "kind=region&scope=0&identifier=1",
            "no pause or cull is set",
        ),
        (
            "retry",
            "kind=region&scope=0&identifier=99",
            "is not failing",
        ),
        ("retry", "kind=region&scope=0", "`identifier` is required"),
        (
            "replay",
            "kind=region&ids=12345",
            "none of these ids is a dead letter",
        ),
        (
            "replay",
            "kind=region&ids=abc",
            "a dead letter's id is a number",
        ),
        ("discard", "kind=region", "give 1 to"),
        ("explode", "kind=region&scope=0", "no action"),
    ] {
        let answer = send(
            &app,
            Method::POST,
            &format!("/admin/outbox/actions/{action}"),
            &[("cookie", &cookie), ("sec-fetch-site", "same-origin")],
            Some(form),
        )
        .await;
        // A page saying what was wrong (escaped), with the error's status
        // and a way back; nothing of it travels in a URL.
        assert!(
            answer.status.is_client_error(),
            "{action} {form}: {}",
            answer.status
        );
        assert_eq!(answer.location, None, "{action} {form}");
        let shown = answer.body.replace("&quot;", "\"").replace("&#39;", "'");
        assert!(shown.contains(error), "{action} {form}: {}", answer.body);
        assert!(answer.body.contains("role=\"alert\""), "{}", answer.body);
        assert!(
            answer.body.contains("href=\"../dashboard?kind="),
            "{}",
            answer.body
        );
    }
    let bad_query = send(
        &app,
        Method::GET,
        "/admin/outbox/dashboard?kind=moon",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(bad_query.status, StatusCode::BAD_REQUEST);
    // A link made elsewhere cannot put words on the page.
    for query in [
        "done=Your+session+expired%2C+call+0800+123",
        "kind=region&error=Your+session+expired",
        "done=replayed&count=1&note=hi",
    ] {
        let page = send(
            &app,
            Method::GET,
            &format!("/admin/outbox/dashboard?{query}"),
            &[("cookie", &cookie)],
            None,
        )
        .await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(page.body.contains("role=\"alert\""), "{}", page.body);
        assert!(
            !page.body.contains("expired") && !page.body.contains("0800"),
            "{}",
            page.body
        );
    }
    nothing_changed(&db).await;
}

/// A logout is not a way in: forged sessions (any MAC, an expiry far away,
/// a real session's nonce) end nothing, count against the client like any
/// wrong credential, and a flood of them from many addresses leaves the
/// real session working.
async fn forged_sessions_at_logout_change_nothing(backend: DbBackend) {
    let Setup { db, app, .. } = setup(backend, "dashboard_forged_logout").await;
    let cookie = logged_in(&app, TOKEN).await;
    let real = cookie.strip_prefix("outbox_admin_session=").unwrap();
    let (signed, _) = real.rsplit_once('.').unwrap();
    let nonce = signed.split('.').nth(1).unwrap().to_owned();
    let logout = |client: SocketAddr, cookies: String| {
        let request = Request::post("/admin/outbox/logout")
            .header("cookie", cookies)
            .extension(axum::extract::ConnectInfo(client))
            .body(Body::empty())
            .unwrap();
        let app = app.clone();
        async move { app.oneshot(request).await.unwrap().status() }
    };
    for round in 0..200u32 {
        let client = SocketAddr::from(([10, 9, (round / 250) as u8, (round % 250) as u8], 1));
        let cookies: Vec<String> = (0..20)
            .map(|i| {
                let nonce = if i == 0 {
                    nonce.clone()
                } else {
                    format!("{:032x}", u128::from(round) << 8 | i)
                };
                format!("outbox_admin_session=9223372036854775807.{nonce}.operator.YWRtaW4.x")
            })
            .collect();
        assert_eq!(
            logout(client, cookies.join("; ")).await,
            StatusCode::SEE_OTHER
        );
    }
    let page = send(
        &app,
        Method::GET,
        "/admin/outbox/dashboard",
        &[("cookie", &cookie)],
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::OK, "the real session still holds");

    // From one address, forged logouts use up its allowance (100 here).
    let guesser = SocketAddr::from(([10, 8, 0, 1], 1));
    let forged = format!("outbox_admin_session=9223372036854775807.{nonce}.operator.YWRtaW4.x");
    for _ in 0..100 {
        assert_eq!(logout(guesser, forged.clone()).await, StatusCode::SEE_OTHER);
    }
    assert_eq!(logout(guesser, forged).await, StatusCode::TOO_MANY_REQUESTS);
    nothing_changed(&db).await;
}

/// `chromedriver` on a free loopback port, stopped (with its browsers) on
/// drop.
struct ChromeDriver {
    child: Child,
    url: String,
    profile: PathBuf,
}

impl ChromeDriver {
    fn start() -> Self {
        let binary = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect(
                "chromedriver is missing: install Debian's chromium and chromium-driver \
                 (scripts/test.sh does)",
            );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // A process group of its own, which the browsers it starts join:
        // dropped (a test that failed before closing its browser), the
        // whole group is killed.
        let mut child = Command::new(binary)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // It says when it listens.
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("started successfully") => break,
                Some(Ok(_)) => {}
                other => panic!("chromedriver did not start: {other:?}"),
            }
        }
        // Keep draining its output so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let profile =
            std::env::temp_dir().join(format!("outbox-chromium-{}-{port}", std::process::id()));
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            profile,
        }
    }

    async fn browser(&self) -> Client {
        let chromium = ["/usr/bin/chromium", "/usr/lib/chromium/chromium"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect("chromium is missing: install Debian's chromium (scripts/test.sh does)");
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                    "--disable-breakpad", "--disable-crash-reporter",
                    format!("--user-data-dir={}", self.profile.display()),
                ],
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .unwrap()
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let killed = Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .is_ok_and(|status| status.success());
        if !killed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Waits for the page that says `text` (the page after a form: the page
/// before it may still show another notice while the browser navigates).
async fn notice(browser: &Client, text: &str) {
    let xpath = format!("//p[@class='notice' and normalize-space()='{text}']");
    browser
        .wait()
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|error| panic!("no notice {text:?}: {error}"));
}

/// Types `token` into the login form and waits for the dashboard.
async fn log_in(browser: &Client, token: &str) {
    browser
        .wait()
        .for_element(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    browser
        .find(Locator::Css("form.login button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .for_element(Locator::Id("failing"))
        .await
        .unwrap();
}

async fn text_of(browser: &Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// In a real browser: log in, see the failing shard with its last error
/// first, pause it with a click, replay the dead letter with a click and
/// see it gone; the replayed message is then delivered.
async fn a_browser_sees_the_failure_and_replays_the_dead_letter(backend: DbBackend) {
    let Setup {
        db,
        recorder,
        drainer,
        clock,
        app,
    } = setup(backend, "dashboard_browser").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/admin/outbox", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let failing = db
        .store()
        .failing_shards(OutboxKind::Region, 10)
        .await
        .unwrap();
    let organization = failing
        .iter()
        .find(|f| f.shard.scope() == 0)
        .expect("the organization shard fails");
    let error = organization.state.last_error.clone().unwrap();
    let org_head = db.store().shard_head(&organization.shard, 1).await.unwrap()[0].id;
    let dead_id = db
        .store()
        .dead_letters(OutboxKind::Region, 1)
        .await
        .unwrap()[0]
        .row
        .id;

    // Three sampling times of two workers: three points per chart.
    let now = chrono::Utc::now();
    let samples: Vec<Sample> = [(40, "a", 30), (40, "b", 32), (20, "a", 12), (2, "a", 3)]
        .into_iter()
        .map(|(minutes_ago, owner, depth)| Sample {
            at: chrono::DateTime::from_timestamp(
                (now - chrono::Duration::minutes(minutes_ago)).timestamp() / 15 * 15,
                0,
            )
            .unwrap(),
            kind: OutboxKind::Region,
            scope: None,
            owner: owner.to_owned(),
            depth,
            oldest_age: Some(std::time::Duration::from_secs(depth)),
            delivered: depth / 3,
            failed: 1,
            dead_lettered: 0,
            dead_letters: 1,
        })
        .collect();
    db.store()
        .record_history(&samples, now - chrono::Duration::days(1))
        .await
        .unwrap();

    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    browser.goto(&format!("{base}/dashboard")).await.unwrap();
    assert_eq!(
        browser.current_url().await.unwrap().path(),
        "/admin/outbox/login"
    );
    log_in(&browser, TOKEN).await;

    // The history charts: one point per sampling time, drawn.
    for chart in [
        "chart-depth",
        "chart-age",
        "chart-delivered",
        "chart-failed",
    ] {
        let svg = browser.find(Locator::Id(chart)).await.unwrap();
        assert_eq!(
            svg.attr("data-points").await.unwrap().as_deref(),
            Some("3"),
            "{chart}"
        );
        let points = browser
            .find(Locator::Css(&format!("#{chart} polyline")))
            .await
            .unwrap()
            .attr("points")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(points.split(' ').count(), 3, "{chart}: {points}");
    }
    let depth = text_of(&browser, "#history figure").await;
    assert!(
        depth.contains("Pending rows: 3") && depth.contains("peak 32"),
        "{depth}"
    );

    // The failing shard, with its last error.
    let row = text_of(&browser, "#failing-0-1").await;
    assert!(row.contains("OrganizationScope (0) 1"), "{row}");
    assert!(row.contains(&error), "{row} lacks {error}");
    assert!(row.contains("backing off"), "{row}");
    let head = text_of(&browser, "#failing-0-1 td.head").await;
    assert!(
        head.contains(&format!("#{org_head} OrganizationUpdate (1) object 1")),
        "{head}"
    );
    let dead = text_of(&browser, &format!("#dead-letter-{dead_id}")).await;
    assert!(dead.contains("WebhookDelivery (2)"), "{dead}");
    assert!(dead.contains("WebhookScope (1)"), "{dead}");
    // Each scope's backlog, by name and number (the failing organization's
    // row is still pending).
    for (row, scope, pending) in [
        (1, "OrganizationScope (0)", "1"),
        (2, "WebhookScope (1)", "0"),
    ] {
        let cell =
            |column: usize| format!("#scopes tbody tr:nth-child({row}) td:nth-child({column})");
        assert_eq!(text_of(&browser, &cell(1)).await, scope);
        assert_eq!(text_of(&browser, &cell(2)).await, pending);
    }
    std::fs::write(
        screenshot_path(&format!("dashboard-{backend:?}.png")),
        browser.screenshot().await.unwrap(),
    )
    .unwrap();

    // Pause the failing shard with a click: a control every process obeys.
    browser
        .find(Locator::Css("#failing-0-1 button.pause"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    notice(
        &browser,
        "Paused region-outbox shard OrganizationScope (0) 1.",
    )
    .await;
    let controls = db.store().controls().await.unwrap();
    assert_eq!(controls.len(), 1, "{controls:?}");
    assert!(text_of(&browser, "#controls").await.contains("paused"));

    // The receiver is fixed; replay the dead letter with a click.
    recorder.stop_failing();
    browser
        .find(Locator::Id(&format!("replay-{dead_id}")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    notice(&browser, "Replayed 1 dead letter(s).").await;
    assert!(
        browser
            .find(Locator::Id(&format!("dead-letter-{dead_id}")))
            .await
            .is_err(),
        "the replayed dead letter is still listed"
    );
    assert!(text_of(&browser, "#dead-letters")
        .await
        .contains("No dead letters"));
    std::fs::write(
        screenshot_path(&format!("dashboard-{backend:?}-replayed.png")),
        browser.screenshot().await.unwrap(),
    )
    .unwrap();
    // Both actions are in the audit log, newest first, by the operator.
    let audit = text_of(&browser, "#audit tbody").await;
    let rows: Vec<&str> = audit.lines().collect();
    assert_eq!(rows.len(), 2, "{audit}");
    assert!(
        rows[0].contains("admin (operator)") && rows[0].contains("replay"),
        "{audit}"
    );
    assert!(
        rows[1].contains("pause")
            && rows[1].contains("region-outbox shard OrganizationScope (0) 1"),
        "{audit}"
    );

    // The paused shard's head message set aside with a click (confirmed):
    // it is a dead letter now, and in the audit log.
    browser
        .find(Locator::Css("#failing-0-1 button.set-aside"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.accept_alert().await.unwrap();
    notice(&browser, "Set aside 1 row(s) as dead letters.").await;
    let dead = text_of(&browser, &format!("#dead-letter-{org_head}")).await;
    assert!(dead.contains("set aside by admin"), "{dead}");
    let audit = text_of(&browser, "#audit tbody").await;
    assert!(
        audit.lines().next().unwrap().contains("set_aside"),
        "{audit}"
    );

    // A viewer sees the page, read-only: no forms but logging out.
    let forms = browser
        .find_all(Locator::Css("main form, section form"))
        .await
        .unwrap();
    assert!(forms.len() > 3, "an operator's page has forms");
    browser
        .find(Locator::Css("header form.inline button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    log_in(&browser, VIEWER_TOKEN).await;
    assert!(text_of(&browser, "#principal")
        .await
        .contains("on-call (viewer)"));
    assert!(text_of(&browser, "#read-only").await.contains("Read-only"));
    assert!(text_of(&browser, "#dead-letters")
        .await
        .contains("OrganizationUpdate"));
    let forms = browser
        .find_all(Locator::Css("main form, section form"))
        .await
        .unwrap();
    assert!(
        forms.is_empty(),
        "a viewer's page has {} forms",
        forms.len()
    );
    assert!(text_of(&browser, "#audit").await.contains("replay"));
    std::fs::write(
        screenshot_path(&format!("dashboard-{backend:?}-viewer.png")),
        browser.screenshot().await.unwrap(),
    )
    .unwrap();

    // Another site frames the dashboard (to lay its own page over the
    // buttons): the browser does not render it in the frame.
    let framing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let framing_url = format!("http://{}/", framing.local_addr().unwrap());
    let page = format!(
        "<!doctype html><title>elsewhere</title><iframe id=framed src=\"{base}/dashboard\"></iframe>"
    );
    let elsewhere = tokio::spawn(async move {
        axum::serve(
            framing,
            Router::new().route(
                "/",
                axum::routing::get(move || async move { axum::response::Html(page) }),
            ),
        )
        .await
    });
    browser.goto(&framing_url).await.unwrap();
    browser
        .wait()
        .for_element(Locator::Id("framed"))
        .await
        .unwrap();
    browser.enter_frame(0).await.unwrap();
    assert!(
        browser.find(Locator::Id("failing")).await.is_err(),
        "the dashboard rendered inside another site's frame"
    );
    browser.enter_parent_frame().await.unwrap();
    elsewhere.abort();

    // Twelve hours on, the session has expired: the browser is sent to
    // the login form.
    clock.advance(std::time::Duration::from_secs(12 * 3600));
    browser.goto(&format!("{base}/dashboard")).await.unwrap();
    assert_eq!(
        browser.current_url().await.unwrap().path(),
        "/admin/outbox/login"
    );
    browser.close().await.unwrap();
    drop(driver);

    let report = drainer.drain_due(OutboxKind::Region).await.unwrap();
    assert_eq!(report.deliveries, 1, "{report:?}");
    let delivered: Vec<i64> = recorder.deliveries().iter().map(|d| d.object).collect();
    assert_eq!(
        delivered,
        vec![7],
        "the replayed webhook, not the paused shard"
    );
    let dead: Vec<i64> = db
        .store()
        .dead_letters(OutboxKind::Region, 10)
        .await
        .unwrap()
        .iter()
        .map(|dead| dead.row.id)
        .collect();
    assert_eq!(dead, [org_head], "the head set aside, nothing else");
    server.abort();
}

outbox_testing::on_both_backends!(
    the_dashboard_needs_the_token,
    forms_from_elsewhere_or_with_bad_input_change_nothing,
    forged_sessions_at_logout_change_nothing,
    a_browser_sees_the_failure_and_replays_the_dead_letter,
);
