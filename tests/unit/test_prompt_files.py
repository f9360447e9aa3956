"""Released prompt files never change: a version string names one text for good."""

from __future__ import annotations

import hashlib
import logging
from importlib import resources

import pytest

from refund_bench.llm.roles import (
    EXTRACTOR_PROMPT_VERSION,
    JUDGE_PROMPT_VERSION,
    SETTLER_PROMPT_VERSION,
    load_prompt,
)

RELEASED = {
    "extractor/v1": "c0bdf625e66a7dc6c92285b4a4621ecdd7cb975f34dd6ce56c37e0b3d209a4b2",
    "extractor/v2": "f2f1d8f8260a0531298453018491fb3398e0f6b94d867b8bc6633798c88ce15b",
    "judge/v1": "7f0337eaeff9da397c47a5437b1eb88847eee4d4bfe8f7da11b31f033769fead",
    "judge/v2": "c7fcbe650e0d4a33fb41c69950e033785d6beb703cdbe4258fcb4a28ab995841",
    "judge/v3": "41f6b278164987a582cad03807eaadca4b0170ae92cd2bb2e43910d4555ac29f",
    "settler/v1": "840cb7c800729d170736ea415267c008ab561dbf906f9b2e637194d2d5e6b17c",
    "settler/v2": "66e7a0f8362b123f5ce0b395c93d07026cf1ea9998398bb17defd97814c70889",
    "settler/v3": "f9e86a541501b652b82a6b297a4840aaf54bb78fe52b96af09ac9d0919f31015",
    "settler/v4": "a7ece865508acdab486d8ae79f35a7f6990a50e0903c5e00bc3cf9060aac94c2",
}
"""The sha256 of every released prompt file. Rulings, extractions and replies name only the
version and caches are keyed by it: a file edited in place would make records drawn under two
texts read as one. A new text is a new file and a new entry here."""


def _shipped() -> dict[str, bytes]:
    root = resources.files("refund_bench.llm").joinpath("prompts")
    return {
        f"{role.name}/{file.name.removesuffix('.md')}": file.read_bytes()
        for role in root.iterdir()
        if role.is_dir()
        for file in role.iterdir()
        if file.name.endswith(".md")
    }


def test_every_shipped_prompt_is_released_with_its_text() -> None:
    shipped = {version: hashlib.sha256(text).hexdigest() for version, text in _shipped().items()}
    assert shipped == RELEASED


def test_the_default_versions_are_released() -> None:
    assert {EXTRACTOR_PROMPT_VERSION, JUDGE_PROMPT_VERSION, SETTLER_PROMPT_VERSION} <= set(RELEASED)


@pytest.mark.parametrize("version", sorted(RELEASED))
def test_loading_a_prompt_logs_its_version_and_digest(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="refund_bench.llm.roles"):
        prompt = load_prompt(version)
    assert prompt.sha256 == RELEASED[version]
    assert f"prompt {version}: sha256 {RELEASED[version]}" in caplog.messages
