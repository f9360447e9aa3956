"""The schema files applied to a database an earlier version created: what they widen, they
widen once, and the rows already there stay."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from refund_bench.db.migrate import SCHEMA_DIR, MigrationBlockedError, migrate
from refund_bench.retry import RetryPolicy
from tests.kafka_helpers import wait_for

pytestmark = pytest.mark.stack

REVIEW_DECISIONS_BEFORE_PAYOUT_DECISIONS = """
CREATE TABLE review_decisions (
    review_id     text PRIMARY KEY,
    dispute_id    text NOT NULL,
    item_key      text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('GRIEVANCE', 'DISPUTE')),
    grievance_id  text,
    decision      text NOT NULL CHECK (decision IN ('UPHOLD', 'REJECT', 'APPROVE', 'DECLINE')),
    reviewer      text NOT NULL,
    note          text NOT NULL DEFAULT '',
    decided_at    timestamptz NOT NULL,
    published     boolean NOT NULL DEFAULT false,
    published_at  timestamptz,
    UNIQUE (dispute_id, item_key)
)
"""

REVIEW_DECISIONS_BEFORE_EXTRACTION_DECISIONS = REVIEW_DECISIONS_BEFORE_PAYOUT_DECISIONS.replace(
    "'DISPUTE')", "'DISPUTE', 'PAYOUT')"
).replace("'DECLINE')", "'DECLINE', 'REPAY', 'PAID_ELSEWHERE')")

INSERT = (
    "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, decision, reviewer,"
    " decided_at) VALUES (%s, 'd-1', %s, %s, %s, 'alice', now())"
)


@pytest.fixture
def earlier_database(database: str) -> Iterator[str]:
    """A schema of its own in the stack's database, as an earlier version left it; its
    conninfo puts it first on the search path."""
    schema = f"upgrade_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    conninfo = make_conninfo(database, options=f"-csearch_path={schema}")
    try:
        yield conninfo
    finally:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _checks(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, tuple[int, str]]:
    rows = conn.execute(
        "SELECT conname, oid::int, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'review_decisions'::regclass AND contype = 'c'"
    ).fetchall()
    return {str(name): (int(str(oid)), str(text)) for name, oid, text in rows}


EXTRACTION_DECISION = ("extraction", "EXTRACTION", "RESOLVED_ELSEWHERE")


@pytest.mark.parametrize(
    ("earlier", "old", "new"),
    [
        (
            REVIEW_DECISIONS_BEFORE_PAYOUT_DECISIONS,
            ("grievance:g3", "GRIEVANCE", "UPHOLD"),
            [
                ("payout:round1", "PAYOUT", "REPAY"),
                ("payout:round2", "PAYOUT", "PAID_ELSEWHERE"),
                EXTRACTION_DECISION,
            ],
        ),
        (
            REVIEW_DECISIONS_BEFORE_EXTRACTION_DECISIONS,
            ("payout:round1", "PAYOUT", "PAID_ELSEWHERE"),
            [EXTRACTION_DECISION],
        ),
    ],
    ids=["before payout decisions", "before extraction decisions"],
)
def test_review_decisions_made_before_newer_decisions_take_them_after_the_upgrade(
    earlier_database: str,
    earlier: str,
    old: tuple[str, str, str],
    new: list[tuple[str, str, str]],
) -> None:
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(earlier)
        conn.execute(INSERT, ("r-0", *old))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(INSERT, ("r-1", *new[0]))

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        widened = _checks(conn)
        for index, decided in enumerate(new, start=1):
            conn.execute(INSERT, (f"r-{index}", *decided))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(INSERT, ("r-bad", "payout:round3", "PAYOUT", "PAY_EVERYTHING"))
        kept = conn.execute("SELECT review_id FROM review_decisions ORDER BY review_id").fetchall()
    assert [row[0] for row in kept] == [f"r-{index}" for index in range(len(new) + 1)]
    assert "RESOLVED_ELSEWHERE" in widened["review_decisions_decision_check"][1]
    assert "EXTRACTION" in widened["review_decisions_kind_check"][1]

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        assert _checks(conn) == widened, "the second start changes no constraint"


RULINGS_BEFORE_SEEDS = """
CREATE TABLE rulings (
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
    PRIMARY KEY (dispute_id, grievance_id, judge_seat)
)
"""


def test_rulings_cast_before_seeds_keep_their_rows_and_gain_the_columns_once(
    earlier_database: str,
) -> None:
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(RULINGS_BEFORE_SEEDS)
        conn.execute(
            "INSERT INTO rulings VALUES ('d-1', 'g1', 0, 'UPHELD', 'UPHELD', 0.9, '[]', 'r',"
            " 'm', 'judge/v2', 'sha', '{}', now())"
        )

    added = ("seed", "temperature", "served_model", "system_fingerprint")
    columns = (
        "SELECT attname, attnum FROM pg_attribute WHERE attrelid = 'rulings'::regclass"
        " AND attname = ANY(%s) AND NOT attisdropped ORDER BY attname"
    )
    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        assert conn.execute(f"SELECT dispute_id, {', '.join(added)} FROM rulings").fetchall() == [
            ("d-1", None, None, None, None)
        ]
        attnums = conn.execute(columns, (list(added),)).fetchall()
    assert sorted(name for name, _ in attnums) == sorted(added)

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        again = conn.execute(columns, (list(added),)).fetchall()
    assert again == attnums, "the second start adds nothing"


def test_rulings_with_some_of_what_drew_them_gain_the_rest(earlier_database: str) -> None:
    """A table that holds one of the three columns (added by hand, or a start cut short) gains
    the other two, not none."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(RULINGS_BEFORE_SEEDS)
        conn.execute("ALTER TABLE rulings ADD COLUMN served_model text")

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        names = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'rulings'::regclass"
            " AND attname = ANY(%s) AND NOT attisdropped ORDER BY attname",
            (["temperature", "served_model", "system_fingerprint"],),
        ).fetchall()
    assert names == [("served_model",), ("system_fingerprint",), ("temperature",)]


PAYOUT_LEDGER_BEFORE_PAID_ELSEWHERE = """
CREATE TABLE payout_ledger (
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
)
"""


def _paid_elsewhere_column(conn: psycopg.Connection[tuple[object, ...]]) -> object:
    return conn.execute(
        "SELECT attnum FROM pg_attribute WHERE attrelid = 'payout_ledger'::regclass"
        " AND attname = 'paid_elsewhere' AND NOT attisdropped"
    ).fetchone()


def test_ledger_rows_written_before_paid_elsewhere_keep_their_rows_and_gain_it_once(
    earlier_database: str,
) -> None:
    """An older ledger gains the column (false for its rows, which then hold nothing more than
    before) on the first start, and nothing on the next."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(PAYOUT_LEDGER_BEFORE_PAID_ELSEWHERE)
        conn.execute(
            "INSERT INTO payout_ledger (dispute_id, round, amount_minor, currency,"
            " payment_reference, idempotency_key, status, error_code)"
            " VALUES ('d-1', 1, 4900, 'INR', 'pi_1', 'k-1', 'FAILED', 'card_declined')"
        )

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        rows = conn.execute("SELECT dispute_id, paid_elsewhere FROM payout_ledger").fetchall()
        assert rows == [("d-1", False)]
        attnum = _paid_elsewhere_column(conn)
        # The declined round moved no money: the order's next dispute is opened PENDING.
        opened = conn.execute(
            "SELECT status FROM payout_claim_round('d-2', 1, 4900, 'INR', 'pi_1', 'k-2', false)"
        ).fetchone()
    assert attnum is not None
    assert opened == ("PENDING",)

    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        assert _paid_elsewhere_column(conn) == attnum, "the second start adds nothing"


def test_a_failure_an_earlier_api_queued_ranks_below_the_next_change_of_its_round(
    earlier_database: str,
) -> None:
    """A ``refund_failures`` row written without a revision (before the column, or by an API of
    the earlier release during the upgrade) reads its round's ledger revision, which no change
    had counted: the webhook's next change of the round counts 1 and outranks it, so a refund
    Stripe completes after that failure is the round's outcome, not the failure."""
    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO payout_ledger (dispute_id, round, amount_minor, currency,"
            " payment_reference, idempotency_key, status, error_code)"
            " VALUES ('d-1', 1, 4900, 'INR', 'pi_1', 'k-1', 'FAILED', 'refund_requires_action')"
        )
        conn.execute(
            "INSERT INTO refund_failures (dispute_id, round, stripe_refund_id, refund_status,"
            " stripe_event_id, amount_minor, currency, idempotency_key, error_code,"
            " error_message, reported_at)"
            " VALUES ('d-1', 1, 're_1', 'requires_action', 'evt_1', 4900, 'INR', 'k-1',"
            " 'refund_requires_action', 'waits for the customer', now())"
        )
        queued = conn.execute("SELECT revision FROM refund_failures").fetchone()
        changed = conn.execute(
            "UPDATE payout_ledger SET revision = revision + 1 RETURNING revision"
        ).fetchone()
    assert queued == (0,)
    assert changed == (1,)


def test_a_revision_default_of_one_becomes_zero_on_the_next_start(earlier_database: str) -> None:
    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute("ALTER TABLE refund_failures ALTER COLUMN revision SET DEFAULT 1")
    migrate(earlier_database)
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        default = conn.execute(
            "SELECT column_default FROM information_schema.columns"
            " WHERE table_name = 'refund_failures' AND column_name = 'revision'"
            " AND table_schema = current_schema()"
        ).fetchone()
    assert default == ("0",)


REPLIES_BEFORE_APPROVED_MINOR = """
CREATE TABLE replies (
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
)
"""


def _priced_refunds_table() -> str:
    """The ``priced_refunds`` table as schema.sql creates it (unchanged since replies had no
    ``approved_minor``)."""
    schema = (SCHEMA_DIR / "schema.sql").read_text(encoding="utf-8")
    start = schema.index("CREATE TABLE IF NOT EXISTS priced_refunds")
    return schema[start : schema.index(");", start) + 2]


def test_replies_written_before_their_approval_was_kept_gain_it_from_their_rounds(
    earlier_database: str,
) -> None:
    """Each reply already written gets the amount its round approved, so that a round priced
    again is refused for it too; a reply whose round the recorder does not hold keeps NULL."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(REPLIES_BEFORE_APPROVED_MINOR)
        conn.execute(_priced_refunds_table())
        for dispute, decision, payable in (
            ("d-paid", "AUTO_APPROVED", 68900),
            ("d-held", "HELD_FOR_REVIEW", 0),
            ("d-declined", "DECLINED", 0),
        ):
            conn.execute(
                "INSERT INTO priced_refunds VALUES (%s, 1, 'v', 'INR', 134000, '[]', 68900, 0,"
                " %s, 100000, %s, '[]', '', now())",
                (dispute, payable, decision),
            )
        for dispute in ("d-paid", "d-held", "d-declined", "d-unrecorded"):
            conn.execute(
                "INSERT INTO replies (dispute_id, round, text, amount_minor, currency, source,"
                " guard_failures, model, prompt_version) VALUES (%s, 1, 't', 0, 'INR', 'MODEL',"
                " '[]', 'm', 'settler/v1')",
                (dispute,),
            )

    migrate(earlier_database)
    migrate(earlier_database)  # a second start changes nothing
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT dispute_id, approved_minor FROM replies ORDER BY dispute_id"
        ).fetchall()
    assert rows == [("d-declined", 0), ("d-held", 0), ("d-paid", 68900), ("d-unrecorded", None)]


def test_replies_written_before_they_named_what_served_them_gain_the_columns_once(
    earlier_database: str,
) -> None:
    """A reply of an earlier version keeps its row, and names nothing served (NULL)."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(REPLIES_BEFORE_APPROVED_MINOR)
        conn.execute(
            "INSERT INTO replies (dispute_id, round, text, amount_minor, currency, source,"
            " guard_failures, model, prompt_version) VALUES ('d-old', 1, 't', 68900, 'INR',"
            " 'MODEL', '[]', 'm', 'settler/v1')"
        )

    columns = _columns_after_two_starts(earlier_database, "replies")
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT dispute_id, text, model, served_model, system_fingerprint FROM replies"
        ).fetchall()
    assert columns[-2:] == ["served_model", "system_fingerprint"]
    assert rows == [("d-old", "t", "m", None, None)]


DISPUTES_BEFORE_CHANNEL = """
CREATE TABLE evidence_snapshots (
    sha256      text PRIMARY KEY,
    snapshot    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE disputes (
    dispute_id       text PRIMARY KEY,
    order_id         text NOT NULL,
    customer_id      text NOT NULL,
    complaint_text   text NOT NULL,
    received_at      timestamptz NOT NULL,
    snapshot_sha256  text NOT NULL REFERENCES evidence_snapshots (sha256),
    created_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO evidence_snapshots (sha256, snapshot) VALUES ('s1', '{}');
INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text, received_at,
                      snapshot_sha256) VALUES ('d-old', 'o-1', 'c-1', 'late', now(), 's1');
"""


def test_disputes_stored_before_they_kept_their_channel_gain_the_column_once(
    earlier_database: str,
) -> None:
    """A dispute of an earlier version keeps its row, with no channel (NULL)."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(DISPUTES_BEFORE_CHANNEL)
    columns = _columns_after_two_starts(earlier_database, "disputes")
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        rows = conn.execute("SELECT dispute_id, complaint_text, channel FROM disputes").fetchall()
    assert columns[-1] == "channel"
    assert rows == [("d-old", "late", None)]


def _columns_after_two_starts(conninfo: str, table: str) -> list[str]:
    """``table``'s columns, in order, after the schema is applied; a second start changes
    nothing."""
    query = sql.SQL(
        "SELECT attname, attnum FROM pg_attribute WHERE attrelid = {}::regclass"
        " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    ).format(sql.Literal(table))
    migrate(conninfo)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        columns = conn.execute(query).fetchall()
    migrate(conninfo)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert conn.execute(query).fetchall() == columns, "a second start changed the table"
    return [str(name) for name, _ in columns]


def _channel_column(conninfo: str) -> object:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return conn.execute(
            "SELECT attnum FROM pg_attribute WHERE attrelid = 'disputes'::regclass"
            " AND attname = 'channel' AND NOT attisdropped"
        ).fetchone()


def _holding_disputes(conninfo: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection in a transaction that read ``disputes``, as a long report would: it holds
    the table's weakest lock, which an ``ALTER TABLE`` must wait for, until it ends."""
    conn = psycopg.connect(conninfo)
    conn.execute("SELECT count(*) FROM disputes")
    return conn


def test_a_migration_behind_a_long_transaction_gives_up_and_changes_nothing(
    earlier_database: str,
) -> None:
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(DISPUTES_BEFORE_CHANNEL)
    waits: list[float] = []
    with (
        _holding_disputes(earlier_database),
        pytest.raises(MigrationBlockedError, match="3 attempts each waited 200 ms"),
    ):
        migrate(
            earlier_database,
            lock_timeout_ms=200,
            retry=RetryPolicy(attempts=3, jitter_seconds=0),
            sleep=waits.append,
        )
    assert waits == [1.0, 2.0], "it waits between attempts, with the shared backoff"
    assert _channel_column(earlier_database) is None, "no attempt changed anything"


def test_a_migration_behind_a_long_transaction_applies_once_it_ends(
    earlier_database: str,
) -> None:
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(DISPUTES_BEFORE_CHANNEL)
    with _holding_disputes(earlier_database) as holder:
        migrate(
            earlier_database,
            lock_timeout_ms=200,
            retry=RetryPolicy(attempts=3),
            sleep=lambda _: holder.commit(),  # the long transaction ends during the first wait
        )
    assert _channel_column(earlier_database) is not None


def test_queries_queued_behind_a_waiting_migration_wait_no_longer_than_its_lock_timeout(
    earlier_database: str,
) -> None:
    """The reason for the timeout: while an ``ALTER TABLE`` waits for its lock, every later
    query on the table queues behind it. Without a limit the table stops as long as the long
    transaction lasts; with one, the migration steps aside and the queue moves."""
    with psycopg.connect(earlier_database, autocommit=True) as conn:
        conn.execute(DISPUTES_BEFORE_CHANNEL)
    failures: list[BaseException] = []

    def run_migration() -> None:
        try:
            migrate(earlier_database, lock_timeout_ms=1_500, retry=RetryPolicy(attempts=1))
        except BaseException as exc:  # reported to the test's thread
            failures.append(exc)

    with (
        _holding_disputes(earlier_database),
        psycopg.connect(earlier_database, autocommit=True) as other,
    ):
        migration = threading.Thread(target=run_migration)
        migration.start()

        def migration_waits() -> bool:
            waiting = other.execute(
                "SELECT count(*) FROM pg_locks WHERE relation = 'disputes'::regclass"
                " AND mode = 'AccessExclusiveLock' AND NOT granted"
            ).fetchone()
            return waiting == (1,) or not migration.is_alive()

        wait_for(migration_waits, 10.0, "the migration to wait for its lock")
        other.execute("SET statement_timeout = '10s'")
        # Queued behind the migration's lock request, this read runs once the migration gives
        # up (or fails with the statement timeout, 10 s, if it never does).
        assert other.execute("SELECT count(*) FROM disputes").fetchone() == (1,)
        migration.join(10.0)
    assert [type(exc) for exc in failures] == [MigrationBlockedError]
    assert _channel_column(earlier_database) is None
