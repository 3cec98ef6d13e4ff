"""Loom's public client: the REST API (``/v1``, DESIGN.md contract 4) from Python.

The ``loom`` CLI, the tests and users' automation use this one client::

    from controller.client import Client, load_intent
    with Client() as loom:                                   # $LOOM_SERVER and $LOOM_TOKEN, as for the CLI
        change = loom.propose(load_intent("dc1.yaml"))       # against the active revision, else the head
        review = loom.review(change.id)                      # the dry run: plan diff, config diff, safety
        print(review.verdict, loom.commit(change.id, wait=True).state, review.summary.max_utilization)

Calls answer typed models (:mod:`controller.model.documents`, :class:`~controller.model.Intent`,
:mod:`controller.client.answers`); ``client.raw`` answers the JSON documents as sent. A request
that is safe to repeat (a read, a write with an ``Idempotency-Key``, which every change, commit and
intent write gets unless given one, a dry run) is sent again after a connection failure or a 429,
502, 503 or 504, honouring ``Retry-After`` (:class:`RetryPolicy`). An error answer raises
:class:`ApiError` with its RFC 9457 problem document (located ``errors``); no answer at all,
:class:`ServerUnreachable`. This package imports the ground layer (:mod:`controller.model`) and
httpx only, never the API, the workflow or the store.
"""

from __future__ import annotations

from controller.client.answers import (
    DeviceDrift,
    DriftReport,
    Event,
    Health,
    Page,
    Repair,
    Revision,
    Status,
    WhoAmI,
)
from controller.client.client import DEFAULT_SERVER, Client, drain_patch
from controller.client.errors import (
    ApiError,
    ClientError,
    DrainUnchanged,
    FieldError,
    NoIntent,
    Problem,
    ServerUnreachable,
)
from controller.client.raw import Document, RawApi
from controller.client.transport import RetryPolicy, new_idempotency_key
from controller.model.intent import load_intent

__all__ = [
    "DEFAULT_SERVER",
    "ApiError",
    "Client",
    "ClientError",
    "DeviceDrift",
    "Document",
    "DrainUnchanged",
    "DriftReport",
    "Event",
    "FieldError",
    "Health",
    "NoIntent",
    "Page",
    "Problem",
    "RawApi",
    "Repair",
    "RetryPolicy",
    "Revision",
    "ServerUnreachable",
    "Status",
    "WhoAmI",
    "drain_patch",
    "load_intent",
    "new_idempotency_key",
]
