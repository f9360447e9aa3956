"""End-to-end fixtures: the whole pipeline running against the real stack."""

from collections.abc import Iterator

import pytest

from tests.conftest import Stack
from tests.e2e.conftest_api import ApiServer, running_api
from tests.e2e.pipeline import Pipeline, pipeline


@pytest.fixture(scope="module")
def api_server(stack: Stack) -> Iterator[ApiServer]:
    """The API (intake, desk, status) on a free loopback port, one per test module."""
    with running_api(stack) as server:
        yield server


@pytest.fixture(autouse=True)
def no_service_crashed(pipeline: Pipeline) -> Iterator[None]:
    """Fails a test during which a service exited on its own and was restarted.

    A stage that crashes is restarted and handles its input again from the cache, so a story
    can still end right while a stage crash-loops: this makes such a test fail instead. (A
    test's own restarts, :meth:`Pipeline.restart`, are not counted.)
    """
    before = dict(pipeline.launcher.restarts)
    yield
    crashed = {
        name: count - before.get(name, 0)
        for name, count in pipeline.launcher.restarts.items()
        if count > before.get(name, 0)
    }
    assert not crashed, f"services exited on their own and were restarted: {crashed}"


__all__ = ["api_server", "no_service_crashed", "pipeline"]
