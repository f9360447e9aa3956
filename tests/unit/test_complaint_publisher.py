"""A complaint the producer gives up on is reported by ``flush``, never taken as published."""

from __future__ import annotations

import pytest

from refund_bench.publish import ComplaintPublisher, ComplaintsNotPublishedError
from tests.ports import free_port


def test_flush_raises_when_the_producer_gave_complaints_up() -> None:
    """No broker listens: the producer drops the complaint when its message timeout ends, and
    ``flush`` (which then finds nothing queued) must still say it was not published."""
    publisher = ComplaintPublisher(
        f"127.0.0.1:{free_port()}",
        "",
        {"message.timeout.ms": "300", "log_level": "0"},
    )
    publisher.publish("d-1", "o-1", "c-1", "The biryani never came.")
    with pytest.raises(
        ComplaintsNotPublishedError, match=r"1 complaint\(s\) not published to complaint.received"
    ):
        publisher.flush(timeout_s=10.0)
    publisher.flush(timeout_s=1.0)  # reported once: nothing queued since
