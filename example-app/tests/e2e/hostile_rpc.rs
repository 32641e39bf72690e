//! Signed RPC from a compromised silo, second pass: a region registering
//! ids of another region's stripe. Each refusal writes nothing.

use example_app::rpc::now;
use outbox_core::sink::webhook::WebhookKeys;
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

mod sqlite {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_region_cannot_register_ids_of_another_regions_stripe() {
        super::a_region_cannot_register_ids_of_another_regions_stripe(DbBackend::Sqlite).await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_region_cannot_register_ids_of_another_regions_stripe() {
        super::a_region_cannot_register_ids_of_another_regions_stripe(DbBackend::Postgres).await;
    }
}
