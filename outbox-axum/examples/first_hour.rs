//! The first hour (the guide's chapter `outbox_axum::_guide::_04_first_hour`
//! walks through it): a product catalogue on axum + SeaORM + SQLite whose
//! products replicate to a search index, and whose price changes each send a
//! webhook.
//!
//! - `Product` derives `ReplicatedRegionModel`: every insert, update and
//!   delete writes its outbox row in the request's transaction, and the
//!   search index is updated from the row as it is after the commit
//!   (coalesced: only the newest state of a product is delivered);
//! - `PriceChanged` is declared `(no_coalesce)`: each price change is its own
//!   webhook, delivered in order, however many wait;
//! - the routes hold no outbox code beyond that one `write_region`, and the
//!   worker refuses to start on a database without the migrations.
//!
//! ```sh
//! cargo run -p outbox-axum --example first_hour     # serves 127.0.0.1:3000
//! curl -XPOST localhost:3000/products -H 'content-type: application/json' \
//!   -d '{"shop_id":1,"name":"Teapot","price_cents":1500}'
//! curl -XPUT localhost:3000/products/1/price -H 'content-type: application/json' \
//!   -d '{"price_cents":1299}'
//! curl 'localhost:3000/search?q=tea'
//! cargo test -p outbox-axum --example first_hour    # its tests, below
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use outbox_axum::{OutboxWorker, Tx};
use outbox_core::{HandlerError, Message, Receivers};
use outbox_seaorm::replication::{RegionReplication, ReplicationReceivers};
use outbox_seaorm::{write_region, ObjectId, OutboxMessage, ShardId};
use sea_orm::{ActiveModelTrait, DatabaseConnection, EntityTrait, Set};
use sea_orm_migration::prelude::*;
use serde::{Deserialize, Serialize};

// 1. The registry: scopes (how rows are sharded) and categories (what they mean).
outbox_core::registry! {
    /// Everything of one shop is delivered in order; shops do not wait on each other.
    CatalogScope = 0 (shard_field = "shop_id") {
        /// A product was created, changed or deleted (replication).
        ProductUpdate = 1,
        /// A price changed: one webhook per change, never coalesced.
        PriceChanged = 2 (no_coalesce),
    }
}

/// What the receivers update: a search index and the webhooks sent (a real
/// service would call its search engine and POST the webhooks).
#[derive(Debug, Default)]
pub struct Effects {
    /// Product id → name, as the search index sees it.
    pub index: Mutex<BTreeMap<i64, String>>,
    /// The price-change webhooks sent, in order.
    pub webhooks: Mutex<Vec<PriceWebhook>>,
}

/// The body of a price-change webhook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriceWebhook {
    /// The product.
    pub product_id: i64,
    /// The price before.
    pub old_cents: i64,
    /// The price after.
    pub new_cents: i64,
}

// 2. A replicated model: saving or deleting it writes its outbox row.
/// The product entity.
pub mod product {
    use super::*;
    use sea_orm::entity::prelude::*;

    /// A product of a shop.
    #[derive(
        Clone,
        Debug,
        PartialEq,
        DeriveEntityModel,
        Serialize,
        Deserialize,
        outbox_seaorm::replication::ReplicatedRegionModel,
    )]
    #[sea_orm(table_name = "product")]
    #[outbox(category = OutboxCategory::ProductUpdate, context = Effects, active_model_behavior)]
    pub struct Model {
        /// Id.
        #[sea_orm(primary_key)]
        pub id: i64,
        /// The shop: the shard (the scope's `shard_field`).
        pub shop_id: i64,
        /// Name.
        pub name: String,
        /// Price in cents.
        pub price_cents: i64,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    #[async_trait::async_trait]
    impl RegionReplication for Model {
        // Loaded by id after the commit: the index gets the newest state.
        async fn handle_async_replication(
            &self,
            effects: &Effects,
            _shop: i64,
        ) -> Result<(), HandlerError> {
            let mut index = effects.index.lock().unwrap_or_else(|e| e.into_inner());
            index.insert(self.id, self.name.clone());
            Ok(())
        }

        // Gone by delivery time (deleted, or rolled back after a save).
        async fn handle_async_deletion(
            effects: &Effects,
            id: i64,
            _shop: i64,
            _payload: Option<serde_json::Value>,
        ) -> Result<(), HandlerError> {
            effects
                .index
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            Ok(())
        }
    }
}

// 3. Migrations: the outbox's inside your own migrator.
/// The app's migrator: the outbox migrations, then its own.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut migrations = outbox_migrations::migrations();
        migrations.push(Box::new(CreateProduct));
        migrations
    }
}

struct CreateProduct;

impl MigrationName for CreateProduct {
    fn name(&self) -> &str {
        "m20260101_000001_create_product"
    }
}

// sea-orm-migration's trait elides SchemaManager's lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for CreateProduct {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let table = sea_orm::Schema::new(backend).create_table_from_entity(product::Entity);
        manager.create_table(table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(product::Entity).to_owned())
            .await
    }
}

// 4. Receivers: one per live category, checked when the worker starts.
fn receivers(db: &DatabaseConnection, effects: Arc<Effects>) -> Receivers<OutboxCategory> {
    let webhooks = effects.clone();
    Receivers::new()
        .replicate::<product::Model>(db.clone(), effects)
        .on(
            OutboxCategory::PriceChanged,
            move |message: Message<OutboxCategory>| {
                let webhooks = webhooks.clone();
                async move {
                    // A payload that does not parse is a permanent error: retrying cannot help.
                    let webhook: PriceWebhook =
                        message.payload_as().map_err(outbox_core::permanent)?;
                    webhooks
                        .webhooks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(webhook);
                    Ok::<_, HandlerError>(())
                }
            },
        )
}

// 5. Handlers: plain SeaORM on the request's transaction.
#[derive(Debug, Deserialize)]
struct NewProduct {
    shop_id: i64,
    name: String,
    price_cents: i64,
}

async fn create_product(
    tx: Tx,
    Json(new): Json<NewProduct>,
) -> Result<(StatusCode, Json<product::Model>), (StatusCode, String)> {
    let product = product::ActiveModel {
        shop_id: Set(new.shop_id),
        name: Set(new.name),
        price_cents: Set(new.price_cents),
        ..Default::default()
    }
    .insert(&tx) // writes the ProductUpdate outbox row too
    .await
    .map_err(internal)?;
    Ok((StatusCode::CREATED, Json(product)))
}

#[derive(Debug, Deserialize)]
struct NewPrice {
    price_cents: i64,
}

async fn change_price(
    tx: Tx,
    Path(id): Path<i64>,
    Json(price): Json<NewPrice>,
) -> Result<Json<product::Model>, (StatusCode, String)> {
    let Some(found) = product::Entity::find_by_id(id)
        .one(&tx)
        .await
        .map_err(internal)?
    else {
        return Err((StatusCode::NOT_FOUND, format!("no product {id}")));
    };
    let webhook = PriceWebhook {
        product_id: id,
        old_cents: found.price_cents,
        new_cents: price.price_cents,
    };
    let mut active: product::ActiveModel = found.clone().into();
    active.price_cents = Set(price.price_cents);
    let product = active.update(&tx).await.map_err(internal)?;
    // The webhook: same transaction, its own category, never coalesced.
    let message = OutboxMessage::new(
        OutboxCategory::PriceChanged,
        ShardId(product.shop_id),
        ObjectId(product.id),
    )
    .with_payload_of(&webhook)
    .map_err(internal)?;
    write_region(&tx, message).await.map_err(internal)?;
    Ok(Json(product))
}

#[derive(Debug, Deserialize)]
struct Search {
    q: String,
}

async fn search(
    State(effects): State<Arc<Effects>>,
    Query(search): Query<Search>,
) -> Json<Vec<i64>> {
    let index = effects.index.lock().unwrap_or_else(|e| e.into_inner());
    let hits = index
        .iter()
        .filter(|(_, name)| name.to_lowercase().contains(&search.q.to_lowercase()))
        .map(|(id, _)| *id)
        .collect();
    Json(hits)
}

fn internal(error: impl std::fmt::Display) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

/// The app's routes, with the outbox layer of `worker` around them.
fn app(worker: &outbox_axum::WorkerHandle<OutboxCategory>, effects: Arc<Effects>) -> Router {
    Router::new()
        .route("/products", post(create_product))
        .route("/products/{id}/price", put(change_price))
        .route("/search", get(search))
        .with_state(effects)
        .layer(worker.layer()) // a transaction per request, flushed after the commit
}

// 6. Start: connect, migrate, spawn the worker (it checks the schema), serve.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    // WAL (readers do not block the writer) and a busy timeout, on every connection.
    let db = outbox_seaorm::sqlite::connect("sqlite://first-hour.sqlite?mode=rwc").await?;
    Migrator::up(&db, None).await?;
    let effects = Arc::new(Effects::default());
    let worker = OutboxWorker::builder(db.clone(), receivers(&db, effects.clone()))
        .spawn()
        .await?;
    let app = app(&worker, effects);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    tracing::info!("listening on http://127.0.0.1:3000");
    worker.stop_on(outbox_axum::shutdown_signal()); // Ctrl-C or SIGTERM
    let stopping = worker.stopping();
    axum::serve(listener, app)
        .with_graceful_shutdown(stopping.cancelled_owned())
        .await?;
    worker.shutdown().await;
    Ok(())
}

// 7. Tests: a fresh database per test, migrated by the app's own migrator.
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use outbox_testing::database::TestDatabase;
    use tower::ServiceExt;

    async fn call(app: &Router, method: &str, uri: &str, body: serde_json::Value) -> StatusCode {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        if status.is_server_error() {
            use http_body_util::BodyExt;
            let body = response.into_body().collect().await.unwrap().to_bytes();
            panic!(
                "{method} {uri}: {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        status
    }

    // A fresh database per test, migrated by the app's own Migrator: one
    // test on PostgreSQL and one on SQLite (`(sqlite)` for SQLite only).
    #[outbox_testing::test(migrator = Migrator)]
    async fn every_price_change_sends_its_webhook_and_the_index_follows(db: TestDatabase) {
        let effects = Arc::new(Effects::default());
        let worker = OutboxWorker::builder(db.db.clone(), receivers(&db.db, effects.clone()))
            .spawn()
            .await
            .unwrap();
        let app = app(&worker, effects.clone());

        let new = serde_json::json!({ "shop_id": 1, "name": "Teapot", "price_cents": 1500 });
        assert_eq!(
            call(&app, "POST", "/products", new).await,
            StatusCode::CREATED
        );
        for cents in [1400, 1300, 1200] {
            let price = serde_json::json!({ "price_cents": cents });
            assert_eq!(
                call(&app, "PUT", "/products/1/price", price).await,
                StatusCode::OK
            );
        }

        // Flushed before each response: no waiting.
        let sent: Vec<i64> = effects
            .webhooks
            .lock()
            .unwrap()
            .iter()
            .map(|w| w.new_cents)
            .collect();
        assert_eq!(
            sent,
            vec![1400, 1300, 1200],
            "one webhook per change, in order"
        );
        assert_eq!(
            effects.index.lock().unwrap().get(&1).map(String::as_str),
            Some("Teapot")
        );
        worker.shutdown().await;
    }
}
