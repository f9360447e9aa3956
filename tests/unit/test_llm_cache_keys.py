"""LLM cache keys: every part percent-encoded, whichever path the encoding takes."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.cache import judge_cache_key

_PARTS = st.text() | st.from_regex(r"[A-Za-z0-9_.~-]*", fullmatch=True)


@given(
    dispute=_PARTS,
    grievance=_PARTS,
    seat=st.integers(0, 14),
    model=_PARTS,
    sha=_PARTS,
    version=_PARTS,
    inputs=_PARTS,
)
def test_a_key_is_its_parts_percent_encoded(
    dispute: str, grievance: str, seat: int, model: str, sha: str, version: str, inputs: str
) -> None:
    parts = (dispute, grievance, seat, model, sha, version, inputs)
    expected = ":".join(["judge", *(quote(str(part), safe="") for part in parts)])
    assert judge_cache_key(dispute, grievance, seat, model, sha, version, inputs) == expected


def test_a_colon_inside_an_id_cannot_collide_with_the_separator() -> None:
    assert (
        judge_cache_key("a:b", "c", 0, "m/1", "h", "judge/v1", "i")
        == "judge:a%3Ab:c:0:m%2F1:h:judge%2Fv1:i"
    )
    assert judge_cache_key("a:b", "c", 0, "m", "h", "judge/v1", "i") != judge_cache_key(
        "a", "b:c", 0, "m", "h", "judge/v1", "i"
    )
