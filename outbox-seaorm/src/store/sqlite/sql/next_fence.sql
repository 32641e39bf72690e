-- Draws a fencing token (outbox_core::fence), in the claim's transaction:
-- the one-row counter only grows, and SQLite's single writer orders the
-- claims that draw it.
UPDATE outbox_fence SET value = value + 1 WHERE id = 1 RETURNING value
