"""What a stage keeps of a model's or an endpoint's text: bounded, and storable in PostgreSQL and
UTF-8."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refund_bench.storable import storable

_CHARACTERS = st.one_of(st.characters(), st.sampled_from(["\x00", "\ud83d", "\ude42"]))
"""Any character, and those a ruling cannot keep as they are: NUL and halves of a surrogate
pair (which ``st.characters`` leaves out)."""


@given(st.text(alphabet=_CHARACTERS, max_size=300), st.integers(1, 200))
def test_what_a_ruling_keeps_is_bounded_and_storable(text: str, limit: int) -> None:
    kept = storable(text, limit)
    assert "\x00" not in kept
    kept.encode("utf-8")  # no half of a surrogate pair
    if len(text) <= limit:
        assert len(kept) == len(text)
    else:
        assert kept.startswith(storable(text[:limit], limit))
        assert kept.endswith(f"[... {len(text) - limit} more characters not kept]")


def test_clean_text_within_the_limit_is_kept_as_it_is() -> None:
    assert storable("Delivered 85 minutes after the order.", 100) == (
        "Delivered 85 minutes after the order."
    )
    assert storable("a\x00b\ud83dc", 100) == "a\ufffdb\ufffdc"
