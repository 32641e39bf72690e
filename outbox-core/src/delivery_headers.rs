//! The HTTP headers that carry a delivery to another service: its message
//! id, the claim's fencing token with its shard and category, and the name
//! of the sending service.
//!
//! The receiving side's `outbox_axum::apply_once` reads them to apply each
//! message once and in fence order; `outbox_axum::apply_once::delivery_headers`
//! (a receiver's RPC calls) and the webhook sink (`sink::webhook`, feature
//! `webhook`) write them. The names live here, in the crate both sides
//! depend on, so that they cannot drift apart.
//!
//! ```
//! # outbox_core::registry! { OrgScope = 0 { OrgUpdate = 1 } }
//! use outbox_core::delivery_headers::{for_delivery, FENCE_HEADER, MESSAGE_ID_HEADER};
//! use outbox_core::message::current_delivery;
//! use outbox_core::{Drainer, MemoryStore, Message, Receivers, ShardKey};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = MemoryStore::new();
//! let shard = ShardKey::region(OutboxScope::OrgScope, 7);
//! let id = store.write(&shard, OutboxCategory::OrgUpdate, 70, None);
//! let receivers = Receivers::new().on(OutboxCategory::OrgUpdate, |message: Message<OutboxCategory>| async move {
//!     let delivery = current_delivery().ok_or("not in a receiver")?;
//!     let headers = for_delivery(&delivery, "control");
//!     assert!(headers.contains(&(MESSAGE_ID_HEADER, message.message_id.to_string())));
//!     assert!(headers.contains(&(FENCE_HEADER, message.fence.to_string())));
//!     Ok::<_, outbox_core::HandlerError>(())
//! });
//! Drainer::new(store, receivers).drain_shard(&shard, Some(id)).await.unwrap();
//! # }
//! ```

use crate::message::CurrentDelivery;

/// Header: the id of the delivered message ([`Message::message_id`](crate::Message::message_id)).
pub const MESSAGE_ID_HEADER: &str = "outbox-message-id";
/// Header: the claim's fencing token (see [`crate::fence`]).
pub const FENCE_HEADER: &str = "outbox-fence";
/// Header: the message's shard, as [`ShardKey`](crate::ShardKey)'s `Display`
/// writes it.
pub const SHARD_HEADER: &str = "outbox-shard";
/// Header: the message's category name.
pub const CATEGORY_HEADER: &str = "outbox-category";
/// Header: the sending service: tokens grow per outbox database, so the
/// receiving side compares them per sender.
pub const SENDER_HEADER: &str = "outbox-sender";

/// Every delivery header, in the order [`for_delivery`] writes them.
pub const ALL: [&str; 5] = [
    MESSAGE_ID_HEADER,
    FENCE_HEADER,
    SHARD_HEADER,
    CATEGORY_HEADER,
    SENDER_HEADER,
];

/// The headers of `delivery`, as name and value: its message id, and, when
/// `sender` (the name of the sending service, the same for all its
/// processes) is not empty, its fencing token, shard, category and
/// `sender`. A value that cannot be an HTTP header value (a region name
/// with a control character) is left out.
pub fn for_delivery(delivery: &CurrentDelivery, sender: &str) -> Vec<(&'static str, String)> {
    let mut headers = vec![(MESSAGE_ID_HEADER, delivery.message_id.to_string())];
    if !sender.is_empty() {
        headers.push((FENCE_HEADER, delivery.fence.to_string()));
        headers.push((SHARD_HEADER, delivery.shard.to_string()));
        headers.push((CATEGORY_HEADER, delivery.category.to_owned()));
        headers.push((SENDER_HEADER, sender.to_owned()));
    }
    headers.retain(|(_, value)| is_header_value(value));
    headers
}

/// Whether `value` can be an HTTP header value as it is (as `http`'s
/// `HeaderValue` checks it): no line breaks or other control characters.
fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| byte == b'\t' || (byte >= b' ' && byte != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ShardKey;
    use crate::FencingToken;
    use uuid::Uuid;

    crate::registry! {
        ShopScope = 0 {
            PriceChanged = 1,
        }
    }

    fn delivery(region: &str) -> CurrentDelivery {
        CurrentDelivery {
            message_id: Uuid::nil(),
            shard: ShardKey::control(region, OutboxScope::ShopScope, 42),
            fence: FencingToken::new(9),
            category: crate::Category::name(OutboxCategory::PriceChanged),
        }
    }

    #[test]
    fn a_sender_gets_the_fence_headers_and_no_sender_the_id_only() {
        assert_eq!(
            for_delivery(&delivery("us"), "control"),
            vec![
                (MESSAGE_ID_HEADER, Uuid::nil().to_string()),
                (FENCE_HEADER, "9".to_owned()),
                (SHARD_HEADER, "control[us]:0/42".to_owned()),
                (CATEGORY_HEADER, "PriceChanged".to_owned()),
                (SENDER_HEADER, "control".to_owned()),
            ]
        );
        assert_eq!(
            for_delivery(&delivery("us"), ""),
            vec![(MESSAGE_ID_HEADER, Uuid::nil().to_string())]
        );
    }

    #[test]
    fn a_value_that_cannot_be_a_header_is_left_out() {
        let headers = for_delivery(&delivery("u\ns"), "control");
        assert!(headers.iter().all(|(name, _)| *name != SHARD_HEADER));
        assert_eq!(headers.len(), 4);
    }
}
