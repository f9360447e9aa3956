"""Pricing waits for all of a dispute's verdicts across a crash: the verdicts it had are
restored from its changelog, so the dispute is priced once, with every line."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.samples import ARTICLE_COMPLAINT
from refund_bench.stages import PRICING
from tests.e2e.pipeline import Pipeline
from tests.kafka_helpers import produce_values, read_committed

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def _copy_dispute(database_url: str, source: str, copy: str) -> None:
    """The dispute ``source`` again under the id ``copy`` (its complaint, order and snapshot)."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text,"
            " received_at, snapshot_sha256, channel)"
            " SELECT %s, order_id, customer_id, complaint_text, received_at, snapshot_sha256,"
            " channel"
            " FROM disputes WHERE dispute_id = %s",
            (copy, source),
        )


def test_verdicts_held_before_a_crash_are_restored_and_the_dispute_priced_once(
    pipeline: Pipeline,
) -> None:
    kafka = pipeline.stack.kafka
    codec = Codec(
        framing_from_registry_url(pipeline.stack.registry_url),
        {t.VERDICT_DECIDED.name: t.VERDICT_DECIDED.schema},
    )
    # The article's four verdicts, as the tally decided them for a dispute of its own.
    source = pipeline.submit("order-1840", "cust-77", ARTICLE_COMPLAINT)
    expected = pipeline.wait_final(source).priced[0]
    verdicts = read_committed(
        kafka,
        t.VERDICT_DECIDED.name,
        until=lambda rs: sum(r.key == source for r in rs) == 4,
        timeout_s=60,
        decode=lambda raw: codec.decode(t.VERDICT_DECIDED.name, raw),
    )
    dispute = f"d-{uuid.uuid4().hex[:16]}"
    _copy_dispute(pipeline.database_url, source, dispute)
    mine: list[dict[str, Any]] = sorted(
        ({**r.value, "dispute_id": dispute} for r in verdicts if r.key == source),
        key=lambda v: str(v["grievance_id"]),
    )

    # Two of the four reach pricing, and its state with them is committed ...
    produce_values(kafka, t.VERDICT_DECIDED.name, [(dispute, v) for v in mine[:2]], codec)
    assert PRICING.changelog is not None
    read_committed(
        kafka, PRICING.changelog, until=lambda rs: any(r.key == dispute for r in rs), timeout_s=60
    )
    # ... then pricing is killed, and started again before the other two arrive.
    pipeline.launcher.stop(["pricing"], kill=True)
    pipeline.launcher.start(["pricing"])
    pipeline.launcher.wait_ready()
    produce_values(kafka, t.VERDICT_DECIDED.name, [(dispute, v) for v in mine[2:]], codec)

    story = pipeline.wait_final(dispute, whole=False)  # its verdicts, written here, had no rulings
    [priced] = story.priced
    assert [line["grievance_id"] for line in priced["lines"]] == ["g1", "g2", "g3", "g4"]
    assert (priced["round"], priced["decision"]) == (1, "AUTO_APPROVED")
    assert priced["total_minor"] == expected["total_minor"] == 68900
