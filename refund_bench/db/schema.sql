-- Refund Bench database. Applied by `python -m refund_bench.provision`; every statement is
-- idempotent so applying it twice is a no-op. Money columns are integer minor units (bigint).

-- The order store: raw evidence the extractor freezes.
CREATE TABLE IF NOT EXISTS orders (
    order_id                     text PRIMARY KEY,
    customer_id                  text NOT NULL,
    currency                     text NOT NULL DEFAULT 'INR',
    placed_at                    timestamptz NOT NULL,
    delivered_at                 timestamptz,
    delivery_sla_minutes         integer,
    delivery_fee_minor           bigint NOT NULL DEFAULT 0 CHECK (delivery_fee_minor >= 0),
    charged_total_minor          bigint NOT NULL CHECK (charged_total_minor >= 0),
    pickup_weight_expected_g     integer,
    pickup_weight_actual_g       integer,
    partner_rating_at_handover   integer,
    packaging_condition_recorded boolean NOT NULL DEFAULT false,
    packaging_notes              text,
    partner_conduct_reports      jsonb NOT NULL DEFAULT '[]'::jsonb,
    payment_reference            text NOT NULL DEFAULT ''
);

CREATE TABLE IF NOT EXISTS order_line_items (
    order_id          text NOT NULL REFERENCES orders (order_id),
    line_no           integer NOT NULL,
    name              text NOT NULL,
    quantity          integer NOT NULL CHECK (quantity >= 1),
    unit_price_minor  bigint NOT NULL CHECK (unit_price_minor >= 0),
    unit_weight_g     integer,
    PRIMARY KEY (order_id, line_no)
);

-- Frozen evidence, content-addressed: the same snapshot is stored once.
CREATE TABLE IF NOT EXISTS evidence_snapshots (
    sha256      text PRIMARY KEY,
    snapshot    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per dispute, written by the extractor before any judging. The first snapshot frozen
-- for a dispute is the one every judge and every replay sees.
CREATE TABLE IF NOT EXISTS disputes (
    dispute_id       text PRIMARY KEY,
    order_id         text NOT NULL,
    customer_id      text NOT NULL,
    complaint_text   text NOT NULL,
    received_at      timestamptz NOT NULL,
    snapshot_sha256  text NOT NULL REFERENCES evidence_snapshots (sha256),
    created_at       timestamptz NOT NULL DEFAULT now(),
    channel          text
);

-- Where the complaint came from, as its complaint.received event said (api, app, email, ...);
-- null for a dispute stored before disputes kept it. Added once.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'disputes'::regclass AND attname = 'channel' AND NOT attisdropped
    ) THEN
        ALTER TABLE disputes ADD COLUMN channel text;
    END IF;
END
$$;

-- Audit projection of the event flow (written by the recorder, idempotently by natural ids).
CREATE TABLE IF NOT EXISTS grievances (
    dispute_id     text NOT NULL,
    grievance_id   text NOT NULL,
    category       text NOT NULL,
    text           text NOT NULL,
    span_start     integer NOT NULL,
    span_end       integer NOT NULL,
    item_name      text,
    item_quantity  integer,
    grievance_total integer NOT NULL,
    snapshot_sha256 text NOT NULL,
    prompt_version text NOT NULL,
    model          text NOT NULL,
    extracted_at   timestamptz NOT NULL,
    PRIMARY KEY (dispute_id, grievance_id)
);

-- What the extractor made of each complaint (complaint.extracted): its outcome, and the model's
-- answers as they came with the problems code found in them (jsonb: a list of
-- {attempt, raw_answer, problems, model, prompt_version, served_model, system_fingerprint}).
CREATE TABLE IF NOT EXISTS extractions (
    dispute_id       text PRIMARY KEY,
    order_id         text NOT NULL,
    snapshot_sha256  text NOT NULL,
    complaint_sha256 text NOT NULL,
    outcome          text NOT NULL,
    grievance_total  integer NOT NULL,
    reason           text,
    answers          jsonb NOT NULL,
    extracted_at     timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS rulings (
    dispute_id     text NOT NULL,
    grievance_id   text NOT NULL,
    judge_seat     integer NOT NULL,
    ruling         text NOT NULL,
    model_ruling   text NOT NULL,
    confidence     double precision NOT NULL,
    evidence_cited jsonb NOT NULL,
    reasoning      text NOT NULL,
    model          text NOT NULL,
    prompt_version text NOT NULL,
    snapshot_sha256 text NOT NULL,
    raw_response   text NOT NULL,
    cast_at        timestamptz NOT NULL,
    seed           bigint,  -- the draw's (null: refused, or cast before rulings carried it)
    PRIMARY KEY (dispute_id, grievance_id, judge_seat)
);

-- A table created before rulings carried their seed gets the column once (the catalog says
-- whether it has it; no lock is taken after that).
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'rulings'::regclass AND attname = 'seed' AND NOT attisdropped
    ) THEN
        ALTER TABLE rulings ADD COLUMN seed bigint;
    END IF;
END
$$;

-- Whether the ruling cites evidence with no record (an UPHELD so marked counts in the split, not
-- towards an UPHELD majority); false for rulings cast before the mark existed. Added once.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'rulings'::regclass AND attname = 'cites_missing_evidence'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE rulings ADD COLUMN cites_missing_evidence boolean NOT NULL DEFAULT false;
    END IF;
END
$$;

-- What drew the ruling: the temperature, and the model and system fingerprint the endpoint's
-- response named (null: refused, not named, or cast before rulings carried them). Added once.
DO $$
BEGIN
    IF (
        SELECT count(*) FROM pg_attribute
        WHERE attrelid = 'rulings'::regclass AND NOT attisdropped
          AND attname IN ('temperature', 'served_model', 'system_fingerprint')
    ) < 3 THEN
        ALTER TABLE rulings
            ADD COLUMN IF NOT EXISTS temperature double precision,
            ADD COLUMN IF NOT EXISTS served_model text,
            ADD COLUMN IF NOT EXISTS system_fingerprint text;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS verdicts (
    dispute_id     text NOT NULL,
    grievance_id   text NOT NULL,
    category       text NOT NULL,
    outcome        text NOT NULL,
    votes_upheld   integer NOT NULL,
    votes_rejected integer NOT NULL,
    votes_escalate integer NOT NULL,
    split          text NOT NULL,
    unanimous      boolean NOT NULL,
    decided_at     timestamptz NOT NULL,
    PRIMARY KEY (dispute_id, grievance_id)
);

CREATE TABLE IF NOT EXISTS priced_refunds (
    dispute_id        text NOT NULL,
    round             integer NOT NULL,
    pricing_version   text NOT NULL,
    currency          text NOT NULL,
    order_total_minor bigint NOT NULL,
    lines             jsonb NOT NULL,
    total_minor       bigint NOT NULL,
    already_paid_minor bigint NOT NULL,
    payable_minor     bigint NOT NULL,
    cap_minor         bigint NOT NULL,
    decision          text NOT NULL,
    held_grievances   jsonb NOT NULL,
    reason            text NOT NULL,
    priced_at         timestamptz NOT NULL,
    PRIMARY KEY (dispute_id, round)
);

-- Customer replies, written by the settler before it publishes them.
CREATE TABLE IF NOT EXISTS replies (
    dispute_id     text NOT NULL,
    round          integer NOT NULL,
    text           text NOT NULL,
    amount_minor   bigint NOT NULL,
    currency       text NOT NULL,
    source         text NOT NULL,
    guard_failures jsonb NOT NULL,
    model          text NOT NULL,
    prompt_version text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dispute_id, round)
);

-- What pricing approved for the round when its reply was written (the reply may state less: a
-- round the ledger held is told nothing was refunded). An event for the round that approves
-- another amount was priced again, and pays nothing (the settler dead-letters it). Added
-- once, filled in then for the replies already written from their rounds as the recorder
-- keeps them (NULL where it has none: such a round is not checked).
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'replies'::regclass AND attname = 'approved_minor' AND NOT attisdropped
    ) THEN
        ALTER TABLE replies ADD COLUMN approved_minor bigint;
        UPDATE replies AS r
        SET approved_minor = CASE
            WHEN p.decision IN ('AUTO_APPROVED', 'REVIEW_APPROVED') THEN p.payable_minor ELSE 0
        END
        FROM priced_refunds AS p
        WHERE p.dispute_id = r.dispute_id AND p.round = r.round;
    END IF;
END
$$;

-- The model's answer when the template replaced it (the guard failed it, or it could not be
-- read), kept for audit: bounded, with a note of what was cut. NULL when the model's reply was
-- sent, when no answer came, and for replies written before the column existed. Added once.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'replies'::regclass AND attname = 'model_answer' AND NOT attisdropped
    ) THEN
        ALTER TABLE replies ADD COLUMN model_answer text;
    END IF;
END
$$;

-- What the endpoint's response named for the model's answer of the round, sent or replaced by
-- the template: the model that served it (a dated snapshot where `model` names an alias) and
-- its system fingerprint. NULL when no answer came, the response named none, the process that
-- wrote the reply did not draw the answer (another process's, found in the cache), or the reply
-- was written before the columns existed. Added once.
DO $$
BEGIN
    IF (
        SELECT count(*) FROM pg_attribute
        WHERE attrelid = 'replies'::regclass AND NOT attisdropped
          AND attname IN ('served_model', 'system_fingerprint')
    ) < 2 THEN
        ALTER TABLE replies
            ADD COLUMN IF NOT EXISTS served_model text,
            ADD COLUMN IF NOT EXISTS system_fingerprint text;
    END IF;
END
$$;

-- The payout ledger: one row per (dispute, settlement round), written before Stripe is called.
CREATE TABLE IF NOT EXISTS payout_ledger (
    dispute_id       text NOT NULL,
    round            integer NOT NULL,
    amount_minor     bigint NOT NULL CHECK (amount_minor > 0),
    currency         text NOT NULL,
    payment_reference text NOT NULL,
    idempotency_key  text NOT NULL UNIQUE,
    status           text NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'FAILED')),
    stripe_refund_id text,
    error_code       text,
    error_message    text,
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dispute_id, round)
);

CREATE INDEX IF NOT EXISTS payout_ledger_payment ON payout_ledger (payment_reference);

-- A FAILED round a payment operator settled by hand (a PAID_ELSEWHERE decision on its review
-- item, set by the review desk in the decision's transaction): money went back after all. Added
-- once to a ledger created before it (the catalog says whether it has it; no lock after that).
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'payout_ledger'::regclass AND attname = 'paid_elsewhere'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE payout_ledger ADD COLUMN paid_elsewhere boolean NOT NULL DEFAULT false;
    END IF;
END
$$;

-- When the payout began the round's first provider call (NULL: none yet, or begun by a payout
-- of an earlier release, which did not record it). Stripe's idempotency window counts from the
-- first use of the round's key, so a round is stale by this time, not by when the settler
-- reserved it. Added once to a ledger created before it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'payout_ledger'::regclass AND attname = 'first_call_at'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE payout_ledger ADD COLUMN first_call_at timestamptz;
    END IF;
END
$$;

-- How many times Stripe's webhook (the API) has changed the round's outcome since the payout
-- settled it: FAILED after a refund Stripe took on failed, SUCCEEDED after a refund that waited
-- for the customer went through, FAILED again after it failed after all. Each change is
-- published (payout.failed, payout.completed) with the new count as its revision, so the
-- recorder keeps the latest outcome whatever order it reads the two topics in. Added once to a
-- ledger created before it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'payout_ledger'::regclass AND attname = 'revision'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE payout_ledger ADD COLUMN revision integer NOT NULL DEFAULT 0;
    END IF;
END
$$;

-- Whether a round FAILED with this error code may still have moved money: a call that reached
-- Stripe and was never settled (STALE_PENDING), a refund that waits for the customer
-- (refund_requires_action), a key Stripe had already taken with other parameters
-- (IdempotencyError), a refund that failed part-way at Stripe (STRIPE_SAVED_SERVER_ERROR). Kept
-- equal to refund_bench.db.payout_rounds.MAY_HAVE_REFUNDED.
CREATE OR REPLACE FUNCTION payout_failure_may_have_refunded(p_error_code text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT COALESCE(p_error_code IN ('STALE_PENDING', 'refund_requires_action',
                                     'IdempotencyError', 'STRIPE_SAVED_SERVER_ERROR'), false)
$$;

-- Opens a round of a payout: the row as recorded if the round exists (opened = false, age_s the
-- seconds since its first provider call, or since it was opened when none is recorded); else a
-- new row, opened = true. The new row is PENDING, unless another dispute of the same
-- payment (the same order) already has a round that may have refunded it (any round but a
-- FAILED one that moved no money: see payout_failure_may_have_refunded and paid_elsewhere): then
-- it is FAILED with ORDER_ALREADY_REFUNDED, naming that round, and nothing is paid automatically
-- (a second complaint about one order is a payment operator's call). Rounds of one payment are
-- opened one at a time (an advisory lock on the payment reference).
--
-- p_provider_call: the caller is about to call the provider, so the call is counted (attempts).
-- The settler opens (reserves) a round without a call before its reply promises the money, so
-- that the reply and the payout decide alike; the payout's first call then finds the reserved
-- row PENDING with no attempt and takes it as opened (opened = true, its call counted).
CREATE OR REPLACE FUNCTION payout_claim_round(
    p_dispute_id text, p_round integer, p_amount_minor bigint, p_currency text,
    p_payment_reference text, p_idempotency_key text, p_provider_call boolean
) RETURNS TABLE (
    dispute_id text, round integer, amount_minor bigint, currency text, idempotency_key text,
    status text, stripe_refund_id text, error_code text, error_message text, opened boolean,
    age_s double precision
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    earlier record;
    blocked boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('payout:' || p_payment_reference, 0));
    IF p_provider_call THEN
        -- A round reserved by the settler: its first provider call is this one. A request for
        -- another amount, currency or payment is not counted: it is answered with the row as
        -- recorded, and the payout reports the conflict without a call.
        RETURN QUERY
            UPDATE payout_ledger AS l SET attempts = 1, first_call_at = now(), updated_at = now()
            WHERE l.dispute_id = p_dispute_id AND l.round = p_round AND l.status = 'PENDING'
              AND l.attempts = 0 AND l.amount_minor = p_amount_minor
              AND l.currency = p_currency AND l.payment_reference = p_payment_reference
            RETURNING l.dispute_id, l.round, l.amount_minor, l.currency, l.idempotency_key,
                      l.status, l.stripe_refund_id, l.error_code, l.error_message, true,
                      0.0::double precision;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
        SELECT l.dispute_id, l.round, l.amount_minor, l.currency, l.idempotency_key, l.status,
               l.stripe_refund_id, l.error_code, l.error_message, false,
               EXTRACT(EPOCH FROM now() - COALESCE(l.first_call_at, l.created_at))::double precision
        FROM payout_ledger l WHERE l.dispute_id = p_dispute_id AND l.round = p_round;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT l.dispute_id, l.round, l.status, l.error_code, l.paid_elsewhere, l.stripe_refund_id
    INTO earlier
    FROM payout_ledger l
    WHERE l.payment_reference = p_payment_reference AND l.dispute_id <> p_dispute_id
      AND (l.status <> 'FAILED' OR l.paid_elsewhere
           OR payout_failure_may_have_refunded(l.error_code))
    ORDER BY l.created_at LIMIT 1;
    blocked := FOUND;
    RETURN QUERY
        INSERT INTO payout_ledger AS l (dispute_id, round, amount_minor, currency,
                                        payment_reference, idempotency_key, status, attempts,
                                        first_call_at, error_code, error_message)
        VALUES (p_dispute_id, p_round, p_amount_minor, p_currency, p_payment_reference,
                p_idempotency_key,
                CASE WHEN NOT blocked THEN 'PENDING' ELSE 'FAILED' END,
                CASE WHEN p_provider_call AND NOT blocked THEN 1 ELSE 0 END,
                CASE WHEN p_provider_call AND NOT blocked THEN now() END,
                CASE WHEN NOT blocked THEN NULL ELSE 'ORDER_ALREADY_REFUNDED' END,
                CASE WHEN NOT blocked THEN NULL ELSE format(
                    'the order''s payment already has a refund of dispute %s (round %s, %s%s);'
                    ' a second dispute of one order is not paid automatically: a payment'
                    ' operator decides', earlier.dispute_id, earlier.round,
                    earlier.status || CASE WHEN earlier.status <> 'FAILED' THEN ''
                        WHEN earlier.paid_elsewhere THEN ' and paid elsewhere'
                        ELSE ' ' || earlier.error_code || ' and may have been paid' END,
                    COALESCE(', refund ' || earlier.stripe_refund_id, '')) END)
        RETURNING l.dispute_id, l.round, l.amount_minor, l.currency, l.idempotency_key,
                  l.status, l.stripe_refund_id, l.error_code, l.error_message, true,
                  0.0::double precision;
END
$$;

-- payout_claim_round with a provider call, under the name payouts of earlier releases call
-- (kept for a rolling upgrade; the payout now calls payout_claim_round itself).
CREATE OR REPLACE FUNCTION payout_open_round(
    p_dispute_id text, p_round integer, p_amount_minor bigint, p_currency text,
    p_payment_reference text, p_idempotency_key text
) RETURNS TABLE (
    dispute_id text, round integer, amount_minor bigint, currency text, idempotency_key text,
    status text, stripe_refund_id text, error_code text, error_message text, opened boolean,
    age_s double precision
) LANGUAGE sql AS $$
    SELECT * FROM payout_claim_round(p_dispute_id, p_round, p_amount_minor, p_currency,
                                     p_payment_reference, p_idempotency_key, true)
$$;

-- What needs a human: escalated grievances, disputes held by the cap, failed payouts,
-- complaints whose extraction could not be validated.
CREATE TABLE IF NOT EXISTS review_items (
    dispute_id    text NOT NULL,
    item_key      text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('GRIEVANCE', 'DISPUTE', 'PAYOUT', 'EXTRACTION')),
    grievance_id  text,
    reason        text NOT NULL,
    status        text NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'DECIDED')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    decided_at    timestamptz,
    PRIMARY KEY (dispute_id, item_key)
);
CREATE INDEX IF NOT EXISTS review_items_open ON review_items (created_at) WHERE status = 'OPEN';

CREATE TABLE IF NOT EXISTS payout_events (
    dispute_id       text NOT NULL,
    round            integer NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('COMPLETED', 'FAILED')),
    amount_minor     bigint NOT NULL,
    stripe_refund_id text,
    error_code       text,
    reason           text,
    at               timestamptz NOT NULL,
    PRIMARY KEY (dispute_id, round)
);

-- Every outcome a round's payout reported, one row per event (payout_events keeps the one that
-- stands): a refund Stripe took on, then reported waiting for the customer, then refunded,
-- shows all three. LEDGER_CONFLICT refusals are not a round's outcome and are not kept here.
CREATE TABLE IF NOT EXISTS payout_event_history (
    dispute_id       text NOT NULL,
    round            integer NOT NULL,
    revision         integer NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('COMPLETED', 'FAILED')),
    amount_minor     bigint NOT NULL,
    stripe_refund_id text,
    error_code       text,
    reason           text,
    at               timestamptz NOT NULL,
    PRIMARY KEY (dispute_id, round, revision, outcome)
);

-- The revision of the payout event the round's row holds (payout.completed and payout.failed
-- carry it; 0 in events published before it): an event replaces the row only with a higher
-- revision, or a failure a completion of the same revision. Added once to a table created
-- before it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = 'payout_events'::regclass AND attname = 'revision'
          AND NOT attisdropped
    ) THEN
        ALTER TABLE payout_events ADD COLUMN revision integer NOT NULL DEFAULT 0;
    END IF;
END
$$;
