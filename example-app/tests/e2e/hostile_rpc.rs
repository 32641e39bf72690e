//! Signed RPC from a compromised silo, second pass: a region registering
//! ids of another region's stripe, a call replayed to a silo it was not
//! signed for, and an address that redirects. Each refusal writes nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use example_app::registry::{OutboxCategory, OutboxScope};
use example_app::rpc::{now, sign_call, Envelope, RpcClient};
use outbox_core::sink::webhook::WebhookKeys;
use outbox_core::{Drainer, HandlerError, MemoryStore, Message, Receivers, ShardKey};
use reqwest::Method;

use super::rpc_auth::{control_rows, mapping, settled, status_of};
use super::*;
use deployment::{delivery, keys, message_id, rpc_key};

/// An id of `region`'s stripe (`ids::next_id`), far above what the tests
/// allocate.
fn id_of(region: &str, sequence: i64) -> i64 {
    sequence * example_app::ids::REGION_STRIDE + example_app::ids::region_code(region).unwrap()
}

async fn create_user(app: &Deployment, name: &str) -> i64 {
    let (status, user, _) = app
        .send(
            Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": format!("{name}@example.com"), "name": name })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    user["id"].as_i64().unwrap()
}

/// Waits until Control's outbox is empty: no user is on its way to a region.
async fn control_settled(app: &Deployment) {
    app.eventually("Control's outbox empties", || async {
        app.get(app.control_url("/admin/outbox/shards")).await.1["pending"]["value"] == 0
    })
    .await;
}

/// A region signs, with its own valid key, mappings and memberships under
/// ids of another region's stripe: refused (403) and nothing written, so
/// the other region's own calls for those ids, made afterwards, pass.
async fn a_region_cannot_register_ids_of_another_regions_stripe(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let user = create_user(&app, "ann").await;
    let us_org = app.create_org("us", "us-own", "Us own").await;
    settled(&app).await;
    let before = control_rows(&app).await;

    let (us, de) = (keys(&rpc_key("us")), keys(&rpc_key("de")));
    let control = app.control_base();
    let call =
        |keys: &WebhookKeys, sender: &str, method: Method, path: String, body: Option<Value>| {
            app.rpc(
                keys,
                now(),
                &delivery(sender, &message_id()),
                method,
                &control,
                &path,
                body,
            )
        };
    let put_mapping = |keys: &WebhookKeys, sender: &str, id: i64, region: &str| {
        call(
            keys,
            sender,
            Method::PUT,
            format!("/rpc/organization-mappings/{id}"),
            Some(json!({ "slug": format!("squat-{id}"), "name": "Squat", "region": region })),
        )
    };
    let put_member = |keys: &WebhookKeys, sender: &str, region: &str, member: i64, org: i64| {
        call(
            keys,
            sender,
            Method::PUT,
            format!("/rpc/member-mappings/{region}/{member}"),
            Some(json!({ "organization_id": org, "user_id": user, "role": "owner" })),
        )
    };
    let (de_org, de_member) = (id_of("de", 9_100_001), id_of("de", 9_100_002));

    // `us`, naming itself as a region must, takes ids of `de`'s stripe: an
    // organization, a membership of its own organization, and a membership
    // of its own numbered into `de`'s organization.
    let squats = [
        put_mapping(&us, "us", de_org, "us"),
        put_member(&us, "us", "us", de_member, us_org),
        put_member(&us, "us", "us", id_of("us", 9_100_003), de_org),
    ];
    for (case, request) in squats.into_iter().enumerate() {
        assert_eq!(
            status_of(request).await,
            StatusCode::FORBIDDEN,
            "case {case}"
        );
    }
    let response = put_mapping(&us, "us", de_org, "us").send().await.unwrap();
    let refusal: Value = response.json().await.unwrap();
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains(r#"region "de"'s"#),
        "the refusal names whose id it is: {refusal}"
    );
    assert_eq!(control_rows(&app).await, before, "nothing was written");
    let (status, _) = app
        .get(app.control_url(&format!("/api/0/organization-mappings/{de_org}")))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // `de`'s own calls for those ids pass.
    assert_eq!(
        status_of(put_mapping(&de, "de", de_org, "de")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(mapping(&app, de_org).await["region"], "de");
    assert_eq!(
        status_of(put_member(&de, "de", "de", de_member, de_org)).await,
        StatusCode::NO_CONTENT
    );
    let after = control_rows(&app).await;
    assert_eq!(
        (after[0], after[1]),
        (before[0] + 1, before[1] + 1),
        "de's mapping and membership"
    );

    // Now `de`'s, the organization stays so: `us` can neither take it
    // over nor number a membership of its own into it.
    for request in [
        put_mapping(&us, "us", de_org, "us"),
        put_member(&us, "us", "us", id_of("us", 9_100_004), de_org),
    ] {
        assert_eq!(status_of(request).await, StatusCode::FORBIDDEN);
    }
    assert_eq!(mapping(&app, de_org).await["name"], "Squat");
    assert_eq!(mapping(&app, de_org).await["region"], "de");
    app.shutdown().await;
}

/// The rows of `table` in region `region`'s database.
async fn region_count(app: &Deployment, region: &str, table: &str) -> i64 {
    let db = &app.regions[region].db;
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            format!("SELECT count(*) AS n FROM {table}"),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

/// Control signs its calls to every region with one key: a call it sent
/// to `us`, replayed unchanged by `us` to `de` within the time window, is
/// refused by `de` (401) and changes nothing there, while `us`, whom it
/// names, applies it.
async fn a_call_signed_for_one_silo_is_refused_by_another(backend: DbBackend) {
    let app = Deployment::start(backend).await;
    let user = create_user(&app, "ann").await;
    // A member in both regions: both hold her replica.
    for region in ["us", "de"] {
        let org = app
            .create_org(region, &format!("ann-{region}"), "Ann's")
            .await;
        let (status, _, _) = app
            .send(
                Method::POST,
                app.region_url(region, &format!("/api/0/organizations/{org}/members")),
                Some(json!({ "user_id": user, "role": "owner" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    control_settled(&app).await;
    let replica = |region: &str| app.get(app.region_url(region, &format!("/api/0/users/{user}")));
    let de_before = replica("de").await;
    assert_eq!(de_before.0, StatusCode::OK);
    let de_inbox = region_count(&app, "de", "outbox_inbox").await;

    let control = keys(&rpc_key("control"));
    let path = format!("/rpc/users/{user}");
    let renamed = json!({ "email": "hijacked@example.com", "name": "Hijacked" });
    let mut for_us = None;
    for (method, body) in [(Method::PUT, Some(renamed)), (Method::DELETE, None)] {
        let signed = app
            .rpc(
                &control,
                now(),
                &delivery("control", &message_id()),
                method.clone(),
                &app.region_base("us"),
                &path,
                body,
            )
            .build()
            .unwrap();
        if method == Method::PUT {
            for_us = signed.try_clone();
        }
        let mut replayed = signed;
        *replayed.url_mut() = format!("{}{path}", app.region_base("de")).parse().unwrap();
        let response = app.http.execute(replayed).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{method}");
        let refusal: Value = response.json().await.unwrap();
        assert!(
            refusal["error"]
                .as_str()
                .unwrap()
                .contains(r#"signed for silo "us""#),
            "{refusal}"
        );
    }
    // An envelope naming no silo (from a silo older than the field).
    let unaddressed = Envelope {
        recipient: String::new(),
        method: "DELETE".into(),
        path: path.clone(),
        body: None,
    };
    let signed = sign_call(
        &control,
        now(),
        &delivery("control", &message_id()),
        &unaddressed,
    )
    .unwrap();
    let response = app
        .http
        .delete(format!("{}{path}", app.region_base("de")))
        .headers(signed.headers)
        .body(signed.body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let refusal: Value = response.json().await.unwrap();
    assert!(
        refusal["error"].as_str().unwrap().contains("upgraded"),
        "{refusal}"
    );

    // Nothing changed in `de`, nor was any message recorded as applied.
    assert_eq!(replica("de").await, de_before);
    assert_eq!(region_count(&app, "de", "outbox_inbox").await, de_inbox);
    // The call is otherwise sound: `us`, the silo it names, applies it.
    let response = app.http.execute(for_us.unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(replica("us").await.1["name"], "Hijacked");
    app.shutdown().await;
}

/// A server that counts the requests it gets and answers them with
/// `answer`; returns its address and the count.
async fn counting_server(
    answer: impl Fn(axum::http::Uri) -> axum::response::Response + Clone + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let router = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        counted.fetch_add(1, Ordering::SeqCst);
        let answer = answer.clone();
        async move { answer(uri) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, hits)
}

/// An RPC whose address answers 307 toward another server is not sent
/// there: the other server gets nothing, and the call fails with an error
/// that says redirects are not followed, permanent (a configuration to
/// fix, not a passing fault).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rpc_follows_no_redirect() {
    use axum::response::IntoResponse;
    let (elsewhere, elsewhere_hits) =
        counting_server(|_| StatusCode::NO_CONTENT.into_response()).await;
    let (redirecting, redirecting_hits) = counting_server(move |uri| {
        (
            StatusCode::TEMPORARY_REDIRECT,
            [(
                axum::http::header::LOCATION,
                format!("http://{elsewhere}{uri}"),
            )],
        )
            .into_response()
    })
    .await;
    let client = RpcClient::new(
        "us",
        format!("http://{redirecting}"),
        keys(&rpc_key("control")),
    )
    .from_silo("control");

    // An RPC is made from a receiver, whose message id it carries.
    let store = MemoryStore::new();
    let shard = ShardKey::region(OutboxScope::UserScope, 5);
    let row = store.write(&shard, OutboxCategory::UserUpdate, 5, None);
    let (sent, mut outcome) = tokio::sync::mpsc::unbounded_channel();
    let receivers = Receivers::new().on(
        OutboxCategory::UserUpdate,
        move |_: Message<OutboxCategory>| {
            let (client, sent) = (client.clone(), sent.clone());
            async move {
                let result = client
                    .put(
                        "/rpc/users/5",
                        &json!({ "email": "e@example.com", "name": "E" }),
                    )
                    .await;
                let _ = sent.send(result.map_err(|error| {
                    (error.to_string(), outbox_core::is_permanent(error.as_ref()))
                }));
                Ok::<_, HandlerError>(())
            }
        },
    );
    Drainer::new(store, receivers)
        .drain_shard(&shard, Some(row))
        .await
        .unwrap();
    let (error, permanent) = outcome.recv().await.unwrap().unwrap_err();
    assert_eq!(
        redirecting_hits.load(Ordering::SeqCst),
        1,
        "the call went out"
    );
    assert_eq!(
        elsewhere_hits.load(Ordering::SeqCst),
        0,
        "the redirect was not followed"
    );
    assert!(
        error.contains("307") && error.contains("follow no redirects"),
        "{error}"
    );
    assert!(
        error.contains(&elsewhere.to_string()),
        "it says where: {error}"
    );
    assert!(permanent, "{error}");
}

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_region_cannot_register_ids_of_another_regions_stripe() {
        super::a_region_cannot_register_ids_of_another_regions_stripe(DbBackend::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_call_signed_for_one_silo_is_refused_by_another() {
        super::a_call_signed_for_one_silo_is_refused_by_another(DbBackend::Sqlite).await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_region_cannot_register_ids_of_another_regions_stripe() {
        super::a_region_cannot_register_ids_of_another_regions_stripe(DbBackend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_call_signed_for_one_silo_is_refused_by_another() {
        super::a_call_signed_for_one_silo_is_refused_by_another(DbBackend::Postgres).await;
    }
}
