"""The extractor's and the judge's inputs, as the API and the extractor would publish them,
for tests."""

from __future__ import annotations

from datetime import UTC, datetime

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.domain import OrderRecord
from refund_bench.runtime.messages import Message
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER
from services.extractor.evidence import freeze


def grievance_message(
    dispute_id: str,
    category: str = "LATE_DELIVERY",
    *,
    order: OrderRecord = ARTICLE_ORDER,
    item_name: str | None = None,
    item_quantity: int | None = None,
) -> Message:
    """One grievance ``g1`` of ``category`` (about ``item_name``, if given) about ``order``, by
    default the article's (the only grievance of its dispute), with the order's frozen
    snapshot, as ``grievance.extracted`` delivers it."""
    snapshot = freeze(order)
    value = ev.GrievanceExtracted(
        dispute_id=dispute_id,
        order_id=order.order_id,
        grievance_id="g1",
        grievance_total=1,
        category=category,
        text="The order arrived well after the promised time.",
        span_start=0,
        span_end=10,
        item_name=item_name,
        item_quantity=item_quantity,
        snapshot_sha256=snapshot.sha256,
        snapshot_json=snapshot.json,
        extractor_model="standin-extractor",
        extractor_prompt_version="extractor/v1",
        extracted_at=datetime(2026, 12, 3, 19, 0, tzinfo=UTC),
    ).to_avro()
    return Message(t.GRIEVANCE_EXTRACTED.name, 0, 0, dispute_id, value, {}, 0)


def complaint_message(
    dispute_id: str,
    text: str = ARTICLE_COMPLAINT,
    order_id: str = ARTICLE_ORDER.order_id,
    channel: str = "api",
) -> Message:
    """A complaint about ``order_id`` by the article's customer (the article's, by default),
    as ``complaint.received`` delivers it."""
    value = ev.ComplaintReceived(
        dispute_id=dispute_id,
        order_id=order_id,
        customer_id=ARTICLE_ORDER.customer_id,
        text=text,
        received_at=datetime(2026, 12, 3, 19, 0, tzinfo=UTC),
        channel=channel,
    ).to_avro()
    return Message(t.COMPLAINT_RECEIVED.name, 0, 0, dispute_id, value, {}, 0)
