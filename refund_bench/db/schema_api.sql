-- Tables of the intake API and the review desk (services/api). Applied after schema.sql by
-- refund_bench.db.migrate; idempotent DDL only.

-- One row per Idempotency-Key of POST /complaints. The row (and so the dispute id) is committed
-- before complaint.received is published; `published` turns true in the transaction that holds
-- the row lock while publishing, so a retry after a crash publishes the same dispute again
-- (consumers are idempotent on dispute_id) and never a second dispute.
CREATE TABLE IF NOT EXISTS intake_requests (
    idempotency_key text PRIMARY KEY,
    body_sha256     text NOT NULL,
    dispute_id      text NOT NULL UNIQUE,
    order_id        text NOT NULL,
    customer_id     text NOT NULL,
    complaint_text  text NOT NULL,
    channel         text NOT NULL DEFAULT 'api',
    received_at     timestamptz NOT NULL,
    published       boolean NOT NULL DEFAULT false,
    published_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Reviewers' decisions: at most one per review item (UNIQUE), so a decision cannot be applied
-- twice and of two reviewers acting at once exactly one wins. Also the outbox of review.decided:
-- rows with published = false are (re-)published at startup and periodically.
CREATE TABLE IF NOT EXISTS review_decisions (
    review_id     text PRIMARY KEY,
    dispute_id    text NOT NULL,
    item_key      text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('GRIEVANCE', 'DISPUTE', 'PAYOUT', 'EXTRACTION')),
    grievance_id  text,
    decision      text NOT NULL CHECK (decision IN ('UPHOLD', 'REJECT', 'APPROVE', 'DECLINE',
                                                    'REPAY', 'PAID_ELSEWHERE',
                                                    'RESOLVED_ELSEWHERE')),
    reviewer      text NOT NULL,
    note          text NOT NULL DEFAULT '',
    decided_at    timestamptz NOT NULL,
    published     boolean NOT NULL DEFAULT false,
    published_at  timestamptz,
    UNIQUE (dispute_id, item_key)
);
CREATE INDEX IF NOT EXISTS review_decisions_unpublished
    ON review_decisions (decided_at) WHERE NOT published;

-- A table created before payout decisions (REPAY, PAID_ELSEWHERE on PAYOUT items) or before
-- EXTRACTION items could be closed (RESOLVED_ELSEWHERE) has narrower checks: widen them once
-- (the catalog says whether they are; nothing is rewritten after that).
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'review_decisions'::regclass
          AND conname = 'review_decisions_decision_check'
          AND pg_get_constraintdef(oid) LIKE '%RESOLVED_ELSEWHERE%'
    ) THEN
        ALTER TABLE review_decisions
            DROP CONSTRAINT IF EXISTS review_decisions_kind_check,
            DROP CONSTRAINT IF EXISTS review_decisions_decision_check,
            ADD CONSTRAINT review_decisions_kind_check
                CHECK (kind IN ('GRIEVANCE', 'DISPUTE', 'PAYOUT', 'EXTRACTION')),
            ADD CONSTRAINT review_decisions_decision_check
                CHECK (decision IN ('UPHOLD', 'REJECT', 'APPROVE', 'DECLINE', 'REPAY',
                                    'PAID_ELSEWHERE', 'RESOLVED_ELSEWHERE'));
    END IF;
END
$$;

-- Review-desk sign-in attempts per user name (its sha256: mistyped passwords often land in
-- the user-name field, so the name itself is not kept). Every attempt counts, before the
-- password is checked; a successful sign-in deletes the row. Shared by every API replica.
CREATE TABLE IF NOT EXISTS desk_login_attempts (
    username_sha256   text PRIMARY KEY,
    attempts          integer NOT NULL,
    window_started_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS desk_login_attempts_window ON desk_login_attempts (window_started_at);

-- Review-desk sessions ended by signing out. A session is a signed cookie, so signing out
-- must also be remembered here: a copy of the cookie is refused until it would have expired.
CREATE TABLE IF NOT EXISTS desk_revoked_sessions (
    session_id text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- Refunds Stripe took on and later reported failed (its webhook, POST /webhooks/stripe): one row
-- per payout round, written in the transaction that turns the round FAILED in payout_ledger.
-- Also the outbox of payout.failed for those rounds: rows with published = false are
-- (re-)published at startup and periodically.
CREATE TABLE IF NOT EXISTS refund_failures (
    dispute_id       text NOT NULL,
    round            integer NOT NULL,
    stripe_refund_id text NOT NULL UNIQUE,
    refund_status    text NOT NULL,
    failure_reason   text,
    stripe_event_id  text NOT NULL,
    amount_minor     bigint NOT NULL,
    currency         text NOT NULL,
    idempotency_key  text NOT NULL,
    error_code       text NOT NULL,
    error_message    text NOT NULL,
    reported_at      timestamptz NOT NULL,
    published        boolean NOT NULL DEFAULT false,
    published_at     timestamptz,
    PRIMARY KEY (dispute_id, round)
);
CREATE INDEX IF NOT EXISTS refund_failures_unpublished
    ON refund_failures (reported_at) WHERE NOT published;

-- The revision of a refund_failures row's payout.failed: the round's payout_ledger.revision
-- after the change it reports. Rows written before it (and by an API of an earlier release
-- during an upgrade) read 0, as their rounds' ledger rows do: a later change of the round
-- counts 1, and its event outranks theirs. Added once to a table created before it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'refund_failures'::regclass AND attname = 'revision'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE refund_failures ADD COLUMN revision integer NOT NULL DEFAULT 0;
    END IF;
END
$$;
-- A database that got the column with DEFAULT 1 gets 0; checked first, so that a start does not
-- take the table's exclusive lock for nothing.
DO $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = 'refund_failures'::regclass AND a.attname = 'revision'
          AND pg_get_expr(d.adbin, d.adrelid) <> '0'
    ) THEN
        ALTER TABLE refund_failures ALTER COLUMN revision SET DEFAULT 0;
    END IF;
END
$$;

-- The review item a refund_failures row's payout.failed opens when it is not the round's own
-- (payout:round<n>): payout:round<n>:again for a refund Stripe reported failed after it had
-- refunded it following a wait for the customer (the round's own item may have been decided
-- then). Added once to a table created before it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'refund_failures'::regclass AND attname = 'item_key'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE refund_failures ADD COLUMN item_key text;
    END IF;
END
$$;

-- Refunds of rounds FAILED while the refund might still go through (refund_requires_action,
-- STALE_PENDING, IdempotencyError, STRIPE_SAVED_SERVER_ERROR) that Stripe then reported
-- refunded (its webhook): one row per payout round, written in the transaction that turns the
-- round SUCCEEDED in payout_ledger; a round that turns back again updates its row. Also the
-- outbox of payout.completed for those rounds: rows with published = false are
-- (re-)published at startup and periodically.
CREATE TABLE IF NOT EXISTS refund_completions (
    dispute_id       text NOT NULL,
    round            integer NOT NULL,
    stripe_refund_id text NOT NULL UNIQUE,
    stripe_event_id  text NOT NULL,
    amount_minor     bigint NOT NULL,
    currency         text NOT NULL,
    idempotency_key  text NOT NULL,
    revision         integer NOT NULL,
    reported_at      timestamptz NOT NULL,
    published        boolean NOT NULL DEFAULT false,
    published_at     timestamptz,
    PRIMARY KEY (dispute_id, round)
);
CREATE INDEX IF NOT EXISTS refund_completions_unpublished
    ON refund_completions (reported_at) WHERE NOT published;
