"""Schemathesis over the whole OpenAPI document, in-process against the ASGI app.

Every operation gets generated requests (valid and invalid) with an admin
token, on a store holding the example fabric; the checks are: no 5xx, and no
response that contradicts the documented schema (status codes, bodies, problem
details). The number of examples per operation is bounded to keep it short.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from api.app import create_app
from controller import service
from controller.settings import Settings
from controller.store.db import Database
from tests.fuzzing import fuzz, operations

EXAMPLES = 12


# The schema is read at collection time from the app; its store (a file the
# fixture below migrates and seeds) is the one every part of the app holds: the
# routes, the commit engine and the lease, which each run of the app's lifespan
# starts again.
_DIR = tempfile.mkdtemp(prefix="loom-fuzz-")
DB = Database(f"sqlite:///{_DIR}/fuzz.db")
APP = create_app(Settings(db_url=DB.url), database=DB)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    # the event stream never ends by design (a generated call would hold until a timeout); it is read
    # through the API in test_failure_reaction.py and through HAProxy in test_ha.py
    schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path="/v1/events")


@pytest.fixture(scope="module")
def fuzz_store() -> Iterator[dict[str, Any]]:
    DB.migrate()
    ctx = service.WriteContext(actor=service.Actor("fuzz-setup", "admin"))
    with DB.session() as s:
        service.load_example(session=s, ctx=ctx)
        _, token = service.create_token("fuzzer", "admin", session=s, ctx=ctx)
    yield {"token": token}
    DB.dispose()
    shutil.rmtree(_DIR, ignore_errors=True)


OPERATIONS = operations(schema)


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_api_conforms_to_its_schema(operation: str, fuzz_store: dict[str, Any]) -> None:
    fuzz(OPERATIONS[operation], lambda case: case.call_and_validate(
        headers={"Authorization": f"Bearer {fuzz_store['token']}"},
        checks=[not_a_server_error, response_schema_conformance]), examples=EXAMPLES)
