"""The API and the review desk while PostgreSQL is out of reach: every request is answered 503
with ``Retry-After`` (the desk's page, the API's problem), never a bare 500 after the pool's
30 s, and served again once the database is back."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from pydantic import SecretStr

from tests.conftest import Stack
from tests.e2e.conftest_api import running_api, sign_in
from tests.fakes.tcp_proxy import ThreadedTcpProxy
from tests.kafka_helpers import wait_for

pytestmark = pytest.mark.stack


def _through(database_url: str, port: int) -> str:
    """``database_url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(database_url)
    credentials = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{port}"))


def test_the_desk_and_the_api_answer_503_while_the_database_is_away_and_serve_again_after(
    stack: Stack,
) -> None:
    upstream = urlsplit(stack.database_url)
    with ThreadedTcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432) as proxy:
        proxied = SecretStr(_through(stack.database_url, proxy.port))
        with running_api(stack, database_url=proxied, db_pool_wait_s=0.5) as api:
            story = f"{api.url}/disputes/d-no-such-dispute"
            with api.client() as desk:
                sign_in(desk, "carol")
                assert desk.get("/review").status_code == 200
                assert httpx.get(story, headers=api.auth(), timeout=30).status_code == 404

                proxy.cut()
                # The first request finds the pooled connections broken, later ones find none.
                for _ in range(2):
                    page = desk.get("/review")
                    assert page.status_code == 503, page.text
                    assert page.headers["Retry-After"] == "5"
                    assert "cannot reach its database" in page.text
                    assert page.headers["Cache-Control"] == "no-store"
                    problem = httpx.get(story, headers=api.auth(), timeout=30)
                    assert problem.status_code == 503, problem.text
                    assert problem.headers["Retry-After"] == "5"
                    assert "database is out of reach" in problem.json()["detail"]

                proxy.restore()
                wait_for(
                    lambda: desk.get("/review").status_code == 200, 60, "the desk to serve again"
                )
                assert "carol" in desk.get("/review").text, "still signed in"
                assert httpx.get(story, headers=api.auth(), timeout=30).status_code == 404
