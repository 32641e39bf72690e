//! `example-app upgrade` on databases whose rows predate their outboxes.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use example_app::migrations::{ControlMigrator, RegionMigrator};
use example_app::silo::{open_database, Role, SiloConfig};
use sea_orm::ConnectionTrait;
use sea_orm_migration::MigratorTrait;
use tokio::net::TcpListener;

fn sqlite_url(name: &str) -> String {
    let dir = std::env::temp_dir().join("outbox-example-upgrade");
    std::fs::create_dir_all(&dir).unwrap();
    format!(
        "sqlite://{}/{name}_{:08x}.sqlite?mode=rwc",
        dir.display(),
        rand::random::<u32>()
    )
}

async fn listeners() -> Vec<TcpListener> {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    listeners
}

fn configs(
    urls: &BTreeMap<&str, String>,
    listeners: Vec<TcpListener>,
) -> Vec<(SiloConfig, TcpListener)> {
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let region_urls = BTreeMap::from([
        ("us".to_owned(), format!("http://{}", addrs[1])),
        ("de".to_owned(), format!("http://{}", addrs[2])),
    ]);
    let roles = [
        Role::Control,
        Role::Region("us".into()),
        Role::Region("de".into()),
    ];
    // One key per silo, the same for every silo's configuration.
    let rpc_keys: std::collections::BTreeMap<String, String> = ["control", "us", "de"]
        .into_iter()
        .map(|silo| (silo.to_owned(), example_app::rpc::keys::generate()))
        .collect();
    roles
        .into_iter()
        .zip(listeners)
        .map(|(role, listener)| {
            let key = match &role {
                Role::Control => "control",
                Role::Region(name) if name == "us" => "us",
                Role::Region(_) => "de",
            };
            let config = SiloConfig {
                role,
                database_url: urls[key].clone(),
                listen_url: None,
                rpc_keys: rpc_keys.clone(),
                api_token_key: example_app::rpc::keys::generate(),
                control_url: format!("http://{}", addrs[0]),
                region_urls: region_urls.clone(),
                poll_interval: Duration::from_millis(50),
                body_timeout: Duration::from_secs(10),
                body_limit: example_app::silo::DEFAULT_BODY_LIMIT,
                admin_token: None,
                viewer_token: None,
                public_metrics: false,
                limits: example_app::limits::Limits::default(),
            };
            (config, listener)
        })
        .collect()
}

async fn count(url: &str, sql: &str) -> i64 {
    let db = open_database(url).await.unwrap();
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            sql,
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get_by_index(0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrade_replicates_pre_existing_rows_and_a_second_run_is_a_no_op() {
    let urls = BTreeMap::from([
        ("control", sqlite_url("control")),
        ("us", sqlite_url("us")),
        ("de", sqlite_url("de")),
    ]);
    // Databases from before the outbox: rows, no outbox rows.
    let control = open_database(&urls["control"]).await.unwrap();
    ControlMigrator::up(&control, None).await.unwrap();
    control
        .execute_unprepared(
            "INSERT INTO users (email, name) VALUES ('ann@x', 'Ann'), ('bob@x', 'Bob')",
        )
        .await
        .unwrap();
    for region in ["us", "de"] {
        let db = open_database(&urls[region]).await.unwrap();
        RegionMigrator::up(&db, None).await.unwrap();
        // Ids of the region's stripe (`ids::next_id`): Control registers
        // no other for it.
        let code = example_app::ids::region_code(region).unwrap();
        let id = |i: i64| i * example_app::ids::REGION_STRIDE + code;
        for i in 1..=5 {
            db.execute_unprepared(&format!(
                "INSERT INTO organization (id, slug, name) VALUES ({}, '{region}-{i}', 'Org {i}')",
                id(i)
            ))
            .await
            .unwrap();
        }
        db.execute_unprepared(&format!(
            "INSERT INTO organization_member (id, organization_id, user_id, role) \
             VALUES ({}, {}, 1, 'owner')",
            id(1),
            id(1)
        ))
        .await
        .unwrap();
    }

    let mut progress = Vec::new();
    let report = example_app::upgrade::run(configs(&urls, listeners().await), &mut progress)
        .await
        .unwrap();
    let progress = String::from_utf8(progress).unwrap();
    assert_eq!(report.total_backfilled(), 2 + 2 * (5 + 1), "{report:?}");
    // Who delivered (the upgrade's rounds or the silos' workers) is a race;
    // that everything was delivered is checked below.
    assert!(progress.contains("backfill us/organization:"), "{progress}");
    // Each table ends with all the rows the status counted up front.
    assert!(
        progress.contains("backfill us/organization: 5 of 5 rows, done"),
        "{progress}"
    );
    assert!(progress.contains("rows delivered, done"), "{progress}");
    assert!(progress.contains("upgrade done"), "{progress}");

    // Control is fully replicated, and Ann (a member in both regions) reached both.
    assert_eq!(
        count(
            &urls["control"],
            "SELECT count(*) FROM organization_mapping"
        )
        .await,
        10
    );
    assert_eq!(
        count(&urls["control"], "SELECT count(*) FROM member_mapping").await,
        2
    );
    for region in ["us", "de"] {
        assert_eq!(
            count(
                &urls[region],
                "SELECT count(*) FROM user_replica WHERE id = 1"
            )
            .await,
            1,
            "{region}"
        );
        assert_eq!(
            count(&urls[region], "SELECT count(*) FROM region_outbox").await,
            0
        );
    }

    let mut progress = Vec::new();
    let again = example_app::upgrade::run(configs(&urls, listeners().await), &mut progress)
        .await
        .unwrap();
    assert_eq!(
        (again.total_backfilled(), again.delivered),
        (0, 0),
        "a second run is a no-op"
    );
    for url in urls.values() {
        let path = url.trim_start_matches("sqlite://");
        let path = path.split('?').next().unwrap_or(path);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
}
