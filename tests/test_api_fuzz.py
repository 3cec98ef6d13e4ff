"""Schemathesis over the whole OpenAPI document, in-process against the ASGI app.

Every operation gets generated requests (valid and invalid) with an admin
token, on a store holding the example fabric; the checks are: no 5xx, and no
response that contradicts the documented schema (status codes, bodies, problem
details). The number of examples per operation is bounded to keep it short.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from api.app import create_app
from controller import service
from controller.settings import Settings
from controller.store.db import Database

EXAMPLES = 12


# The schema is read at collection time from an app whose store is attached by
# the fixture below (routes look the store up on ``app.state`` per request).
APP = create_app(Settings(db_url="sqlite:///:memory:"), database=Database("sqlite:///:memory:"))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    db = Database(f"sqlite:///{path}")
    db.migrate()
    ctx = service.WriteContext(actor=service.Actor("fuzz-setup", "admin"))
    with db.session() as s:
        service.load_example(session=s, ctx=ctx)
        _, token = service.create_token("fuzzer", "admin", session=s, ctx=ctx)
    placeholder = APP.state.database
    APP.state.database = db
    yield {"token": token}
    APP.state.database = placeholder
    db.dispose()


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_api_conforms_to_its_schema(case: Any, fuzz_store: dict[str, Any]) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_store['token']}"},
                           checks=[not_a_server_error, response_schema_conformance])
