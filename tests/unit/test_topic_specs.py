"""Every topic takes the flow's partition count but the one no stage joins by key."""

from __future__ import annotations

from refund_bench import topics as t
from refund_bench.topics import all_topic_specs


def test_only_the_audit_record_no_stage_joins_has_a_count_of_its_own() -> None:
    own = {spec.name: spec.partitions for spec in all_topic_specs() if spec.partitions is not None}
    assert own == {t.COMPLAINT_EXTRACTED.name: 1}
