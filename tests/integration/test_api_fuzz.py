"""Schemathesis against the API's OpenAPI document: no 5xx, every answer in schema.

Property-based: for every operation, schema-valid and schema-breaking requests (bodies, path
parameters, headers) are generated and sent to the live server (uvicorn, real PostgreSQL and
Kafka) with a valid bearer token, bare or of one scope; each response is checked for server
errors, documented status codes, content types, response schemas and headers, and that auth
is not ignored.
Bounded at 50 examples per operation so the run stays well under a minute.

The document is built at import time by :func:`openapi_document` (no connections), because
schemathesis' lazy fixture loader does not work with pytest 9; a test checks that the live
server serves exactly this document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.specs.openapi.checks import positive_data_acceptance

from services.api.app import openapi_document
from services.api.settings import ApiSettings
from tests.conftest import Stack
from tests.e2e.conftest_api import API_TOKEN, READ_TOKEN, SUBMIT_TOKEN, ApiServer, running_api
from tests.stripe_events import WEBHOOK_SECRET

pytestmark = pytest.mark.stack
MAX_CHARS = 500
DOCUMENT = openapi_document(
    ApiSettings(session_secret=SecretStr("d" * 48), max_complaint_chars=MAX_CHARS)
)
schema = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture(scope="module")
def fuzz_api(stack: Stack) -> Iterator[ApiServer]:
    with running_api(
        stack,
        max_complaint_chars=MAX_CHARS,
        stripe_webhook_secret=SecretStr(WEBHOOK_SECRET),
        stripe_api_key=SecretStr("sk_test_123"),  # configured: an unsigned event is a 400
    ) as server:
        yield server


def test_the_server_serves_the_fuzzed_document(fuzz_api: ApiServer) -> None:
    served = httpx.get(f"{fuzz_api.url}/openapi.json").json()
    assert served == DOCUMENT


# The server runs in this process, on its own thread: when its connection pools open a
# connection they draw from the global `random` (psycopg_pool's expiry jitter), and if that
# happens while Hypothesis draws an example, Hypothesis reports "the `random` module used inside
# strategies". It is not: the examples stay derandomized. Only that message is silenced.
@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)
@pytest.mark.parametrize(
    "token",
    [API_TOKEN, SUBMIT_TOKEN, READ_TOKEN],
    ids=["bare token", "complaints: token", "disputes: token"],
)
@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_the_api_keeps_its_contract(case: Any, fuzz_api: ApiServer, token: str) -> None:
    # A schema-valid complaint usually names an order that does not exist (404) or a
    # customer that is not the order's (422): business rules a schema cannot state, so the
    # "valid data is accepted" check does not apply. Every other check runs. A scoped token
    # gets the documented 403 on the other scope's route, whatever the request holds.
    case.call_and_validate(
        base_url=fuzz_api.url,
        headers={"Authorization": f"Bearer {token}"},
        excluded_checks=[positive_data_acceptance],
    )
