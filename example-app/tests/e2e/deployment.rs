//! The deployment the end-to-end tests drive: Control and two regions
//! in-process on ephemeral ports, each on a database of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use example_app::limits::Limits;
use example_app::rpc::{sign_call, Envelope, MESSAGE_ID_HEADER, SENDER_HEADER};
use example_app::silo::{self, Role, RunningSilo, SiloConfig};
use outbox_core::sink::webhook::{WebhookKeys, WebhookSecret};
use outbox_testing::database::{admin_url, connect};
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DbBackend};
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// The admin token of every silo.
pub(crate) const SECRET: &str = "test-secret-0123456789abcdef0123456";
/// The admin API's read-only token.
pub(crate) const VIEWER_TOKEN: &str = "test-viewer-0123456789abcdef0123456";

/// The key of the public API's tokens in the tests (`whsec_` and 36 bytes).
pub(crate) const API_TOKEN_KEY: &str = "whsec_YXBpLXRva2Vucy1rZXktMDEyMzQ1Njc4OWFiY2RlZjAxMjM=";

/// Silo `silo`'s RPC key in the tests: `whsec_` and 40 bytes in base64.
pub(crate) fn rpc_key(silo: &str) -> String {
    let bytes = format!("{silo:-<8}-rpc-key-0123456789abcdef0123");
    WebhookSecret::from_bytes(bytes.into_bytes())
        .unwrap()
        .expose()
}

/// Every silo's RPC key, by name.
pub(crate) fn rpc_keys() -> BTreeMap<String, String> {
    ["control", "us", "de"]
        .into_iter()
        .map(|silo| (silo.to_owned(), rpc_key(silo)))
        .collect()
}

/// The keys of `text` (one key, or `new,old`).
pub(crate) fn keys(text: &str) -> WebhookKeys {
    example_app::rpc::keys::parse_keys("test", text).unwrap()
}

/// The delivery headers of a call by `sender` as message `id`.
pub(crate) fn delivery(sender: &str, id: &str) -> Vec<(&'static str, String)> {
    vec![
        (MESSAGE_ID_HEADER, id.to_owned()),
        (SENDER_HEADER, sender.to_owned()),
    ]
}

/// A new message id.
pub(crate) fn message_id() -> String {
    outbox_core::uuid::Uuid::now_v7().to_string()
}

pub(crate) struct Deployment {
    pub(crate) control: Option<RunningSilo>,
    pub(crate) control_addr: std::net::SocketAddr,
    pub(crate) control_config: SiloConfig,
    pub(crate) regions: BTreeMap<String, RunningSilo>,
    pub(crate) http: reqwest::Client,
    /// The silos' databases, removed by `shutdown` (a test that fails before
    /// it keeps them for a look).
    pub(crate) databases: Vec<String>,
}

async fn database_url(backend: DbBackend, name: &str) -> String {
    let unique = format!("ex_{name}_{:08x}", rand::random::<u32>());
    match backend {
        DbBackend::Postgres => {
            let admin = admin_url().unwrap();
            let db = connect(&admin, 1).await.unwrap();
            db.execute_unprepared(&format!("CREATE DATABASE \"{unique}\""))
                .await
                .unwrap();
            db.close().await.unwrap();
            let base = admin.rsplit_once('/').unwrap().0;
            format!("{base}/{unique}")
        }
        _ => {
            let dir = std::env::temp_dir().join("outbox-example-tests");
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}/{unique}.sqlite?mode=rwc", dir.display())
        }
    }
}

/// Drops a database that `database_url` made, or removes its SQLite files.
async fn remove_database(url: &str) {
    match url.strip_prefix("sqlite://") {
        Some(path) => {
            let path = path.split('?').next().unwrap_or(path);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
        None => {
            let (_, name) = url.rsplit_once('/').unwrap();
            let admin = connect(&admin_url().unwrap(), 1).await.unwrap();
            admin
                .execute_unprepared(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
                .await
                .unwrap();
            admin.close().await.unwrap();
        }
    }
}

impl Deployment {
    pub(crate) async fn start(backend: DbBackend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    /// Starts the silos with their configuration changed by `tune`.
    pub(crate) async fn start_with(backend: DbBackend, tune: impl Fn(&mut SiloConfig)) -> Self {
        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
        let control_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let us_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let de_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let control_addr = control_listener.local_addr().unwrap();
        let region_urls = BTreeMap::from([
            (
                "us".to_owned(),
                format!("http://{}", us_listener.local_addr().unwrap()),
            ),
            (
                "de".to_owned(),
                format!("http://{}", de_listener.local_addr().unwrap()),
            ),
        ]);
        let config = |role: Role, database_url: String| SiloConfig {
            role,
            database_url,
            listen_url: None,
            rpc_keys: rpc_keys(),
            api_token_key: API_TOKEN_KEY.to_owned(),
            control_url: format!("http://{control_addr}"),
            region_urls: region_urls.clone(),
            poll_interval: Duration::from_millis(50),
            body_timeout: Duration::from_secs(2),
            body_limit: silo::DEFAULT_BODY_LIMIT,
            admin_token: Some(SECRET.to_owned()),
            viewer_token: Some(VIEWER_TOKEN.to_owned()),
            public_metrics: false,
            // Every request of the tests comes from 127.0.0.1: no rate
            // limit, but for the test of it.
            limits: Limits {
                write_rate: None,
                ..Limits::default()
            },
        };
        let config = |role: Role, database_url: String| {
            let mut config = config(role, database_url);
            tune(&mut config);
            config
        };
        let mut databases = vec![database_url(backend, "control").await];
        let control_config = config(Role::Control, databases[0].clone());
        let control = silo::start(control_config.clone(), control_listener)
            .await
            .unwrap();
        let mut regions = BTreeMap::new();
        for (name, listener) in [("us", us_listener), ("de", de_listener)] {
            databases.push(database_url(backend, name).await);
            let region_config =
                config(Role::Region(name.into()), databases.last().unwrap().clone());
            regions.insert(
                name.to_owned(),
                silo::start(region_config, listener).await.unwrap(),
            );
        }
        Self {
            control: Some(control),
            control_addr,
            control_config,
            regions,
            // A connection per request: a request refused before its body is
            // read may leave its connection closed by the server.
            http: fresh_client(),
            databases,
        }
    }

    pub(crate) fn control_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.control_addr)
    }

    pub(crate) fn region_url(&self, region: &str, path: &str) -> String {
        format!("http://{}{path}", self.regions[region].addr)
    }

    pub(crate) async fn stop_control(&mut self) {
        if let Some(control) = self.control.take() {
            control.shutdown().await.unwrap();
        }
    }

    pub(crate) async fn start_control(&mut self) {
        let listener = TcpListener::bind(self.control_addr).await.unwrap();
        self.control = Some(
            silo::start(self.control_config.clone(), listener)
                .await
                .unwrap(),
        );
    }

    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<Value>,
    ) -> (StatusCode, Value, reqwest::header::HeaderMap) {
        let mut request = self.http.request(method, url).bearer_auth(SECRET);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, value, headers)
    }

    /// An RPC to `base` (a silo's URL) + `path`, signed with `keys` at
    /// `timestamp` as the delivery `delivery`, for the silo at `base`;
    /// `body` is the envelope's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rpc(
        &self,
        keys: &WebhookKeys,
        timestamp: i64,
        delivery: &[(&'static str, String)],
        method: reqwest::Method,
        base: &str,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::RequestBuilder {
        let recipient = if base == self.control_base() {
            "control"
        } else {
            let region = self
                .regions
                .keys()
                .find(|name| base == self.region_base(name));
            region.map_or("unknown", String::as_str)
        };
        let envelope = Envelope {
            recipient: recipient.to_owned(),
            method: method.to_string(),
            path: path.to_owned(),
            body,
        };
        let signed = sign_call(keys, timestamp, delivery, &envelope).unwrap();
        self.http
            .request(method, format!("{base}{path}"))
            .headers(signed.headers)
            .body(signed.body)
    }

    pub(crate) fn control_base(&self) -> String {
        format!("http://{}", self.control_addr)
    }

    pub(crate) fn region_base(&self, region: &str) -> String {
        format!("http://{}", self.regions[region].addr)
    }

    pub(crate) async fn get(&self, url: String) -> (StatusCode, Value) {
        let (status, value, _) = self.send(reqwest::Method::GET, url, None).await;
        (status, value)
    }

    pub(crate) async fn create_org(&self, region: &str, slug: &str, name: &str) -> i64 {
        let (status, body, _) = self
            .send(
                reqwest::Method::POST,
                self.region_url(region, "/api/0/organizations"),
                Some(json!({ "slug": slug, "name": name })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["region"], region);
        body["id"].as_i64().unwrap()
    }

    /// Polls `probe` until it holds, for at most 30 s.
    pub(crate) async fn eventually<F, Fut>(&self, what: &str, mut probe: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        for _ in 0..600 {
            if probe().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{what} did not happen within 30 s");
    }

    pub(crate) async fn shutdown(mut self) {
        self.stop_control().await;
        for (_, region) in std::mem::take(&mut self.regions) {
            region.shutdown().await.unwrap();
        }
        for url in &self.databases {
            remove_database(url).await;
        }
    }
}

/// A client that opens a connection per request.
pub(crate) fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}
