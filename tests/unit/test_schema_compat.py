"""Every contract stays compatible both ways with each of its committed versions."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.utils import generate_many

from refund_bench.codec import (
    Codec,
    FingerprintFraming,
    earlier_schemas,
    load_schema,
    schema_names,
)
from refund_bench.schema_compat import (
    UnreadableHistoryError,
    check_all,
    incompatibilities,
    missing_history,
)


def test_every_schema_reads_and_is_read_by_all_its_earlier_versions() -> None:
    assert check_all() == {}


@pytest.mark.parametrize("name", schema_names())
def test_adding_an_optional_field_is_compatible_and_a_required_one_is_not(name: str) -> None:
    old = load_schema(name)
    optional: dict[str, Any] = copy.deepcopy(old)
    optional["fields"].append({"name": "added_later", "type": ["null", "string"], "default": None})
    assert incompatibilities(old, optional) == []
    required: dict[str, Any] = copy.deepcopy(old)
    required["fields"].append({"name": "added_later", "type": "string"})
    assert incompatibilities(old, required) != []


def test_dropping_a_required_field_breaks_the_readers_that_need_it() -> None:
    """A new reader can skip an old field, so one direction alone would pass it; an old reader
    (the extractor, for an upstream publisher's new complaint schema) cannot fill it in."""
    old = load_schema("complaint.received")
    dropped: dict[str, Any] = copy.deepcopy(old)
    dropped["fields"] = [f for f in dropped["fields"] if f["name"] != "text"]
    assert incompatibilities(old, dropped) == []
    assert incompatibilities(dropped, old) != []


def test_the_history_holds_every_earlier_version_of_each_contract() -> None:
    """What ``python -m refund_bench.schema_compat --write-history`` would add: nothing."""
    assert missing_history() == {}


def test_without_a_registry_a_record_written_before_a_change_is_read() -> None:
    """A record of refund.priced's earlier version, framed by its fingerprint, decodes with the
    current contract (its new fields at their defaults) in a reader that never saw it written."""
    [old] = earlier_schemas("refund.priced")
    assert FingerprintFraming.fingerprint_of(old) != FingerprintFraming.fingerprint_of(
        load_schema("refund.priced")
    )
    value = next(generate_many(old, 1))
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(old), value)
    data = FingerprintFraming().header_for("refund.priced", old) + body.getvalue()
    reader = Codec(FingerprintFraming(), {"refund.priced": "refund.priced"})
    decoded = reader.decode("refund.priced", data)
    written = fastavro.schemaless_reader(io.BytesIO(body.getvalue()), fastavro.parse_schema(old))
    assert {key: decoded[key] for key in value} == written
    assert set(decoded) > set(value), "the current contract has fields the old one lacked"


def test_a_kept_earlier_version_is_checked_where_git_holds_none(tmp_path: Path) -> None:
    """A contract outside git's history (as in a shallow clone) is still checked against the
    versions kept beside it: dropping a field an earlier reader needs is found."""
    schemas, history = tmp_path / "schemas", tmp_path / "history"
    old = load_schema("complaint.received")
    dropped = copy.deepcopy(old)
    dropped["fields"] = [f for f in dropped["fields"] if f["name"] != "text"]
    (history / "complaint.received").mkdir(parents=True)
    (history / "complaint.received" / "old.avsc").write_text(json.dumps(old))
    schemas.mkdir()
    (schemas / "complaint.received.avsc").write_text(json.dumps(dropped))
    report = check_all(schemas, history)
    assert list(report) == ["complaint.received.avsc"]
    assert all("read by old.avsc" in problem for problem in report["complaint.received.avsc"])


def test_a_history_git_cannot_read_is_an_error_not_an_empty_history(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "no-repository"))
    with pytest.raises(UnreadableHistoryError, match="not a git repository"):
        check_all()
