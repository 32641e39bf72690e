//! Writes that race each other across the silos (PostgreSQL: SQLite's
//! writers take turns).

use std::time::Duration;

use example_app::control::entities::users;
use outbox_testing::database::connect;
use reqwest::StatusCode;
use sea_orm::{
    ActiveModelTrait, ConnectionTrait, DbBackend, EntityTrait, IntoActiveModel, Set, Statement,
    TransactionTrait,
};
use serde_json::json;

use crate::deployment::{Deployment, SECRET};

/// A membership arrives in Control while the user is being saved there:
/// the save read the user's regions before the membership committed (so it
/// writes no row for the new region), and the membership's delivery must
/// not read the user before the save commits, or the region keeps the
/// user from before the save for good (found by the chaos suite). The
/// membership locks the user (`replicate_to_regions`): it waits for the
/// save, then delivers what was saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_that_arrives_during_a_save_replicates_what_was_saved() {
    let app = Deployment::start(DbBackend::Postgres).await;
    let (status, user, _) = app
        .send(
            reqwest::Method::POST,
            app.control_url("/api/0/users"),
            Some(json!({ "email": "bea@example.com", "name": "Before" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{user}");
    let user_id = user["id"].as_i64().unwrap();
    let org = app.create_org("de", "bea-de", "Bea").await;

    // The save, held open: not yet a member in `de`, so no row for it.
    let control = connect(&app.control_config.database_url, 2).await.unwrap();
    let save = control.begin().await.unwrap();
    let mut active = users::Entity::find_by_id(user_id)
        .one(&save)
        .await
        .unwrap()
        .unwrap()
        .into_active_model();
    active.name = Set("After".to_owned());
    active.update(&save).await.unwrap();

    // The membership: the region commits it and delivers it to Control.
    let member = tokio::spawn(
        app.http
            .post(app.region_url("de", &format!("/api/0/organizations/{org}/members")))
            .bearer_auth(SECRET)
            .json(&json!({ "user_id": user_id, "role": "member" }))
            .send(),
    );
    // Until Control has applied it, or waits for the save's lock.
    let waiting = async {
        loop {
            let row = control
                .query_one_raw(Statement::from_string(
                    DbBackend::Postgres,
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                ))
                .await
                .unwrap()
                .unwrap();
            if row.try_get::<i64>("", "n").unwrap() > 0 {
                return;
            }
            // Nothing to await: a lock wait shows only in pg_stat_activity.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let mut member = member;
    let finished = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            answer = &mut member => Some(answer),
            () = waiting => None,
        }
    })
    .await
    .expect("the membership neither finished nor waited for the save");
    save.commit().await.unwrap();
    let answer = match finished {
        Some(answer) => answer,
        None => member.await,
    };
    let answer = answer.unwrap().unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED);

    app.eventually("the user reaches de as saved", || async {
        let (status, replica) = app
            .get(app.region_url("de", &format!("/api/0/users/{user_id}")))
            .await;
        status == StatusCode::OK && replica["name"] == "After"
    })
    .await;
    control.close().await.unwrap();
    app.shutdown().await;
}
