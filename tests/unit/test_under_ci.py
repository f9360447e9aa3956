"""Under CI a test that needs a missing server fails instead of skipping, whichever of the usual
spellings the CI system exports ``CI`` with."""

from __future__ import annotations

import pytest

from tests.conftest import under_ci


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "1", "yes", "Yes", " true "])
def test_the_usual_spellings_mean_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert under_ci()


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
def test_other_values_mean_a_developer_machine(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not under_ci()


def test_no_ci_variable_means_a_developer_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert not under_ci()
