"""What every answer document shares: the change states and the closed base model (unknown fields refused)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationInfo, model_validator

__all__ = ["ChangeState", "Closed", "FINAL_STATES", "JsonObject", "REVIEWABLE_STATES", "read_newer"]

#: A JSON object, as a document is serialized (``model_dump(mode="json")``) for the wire or the store.
JsonObject = dict[str, JsonValue]


class ChangeState(StrEnum):
    """Where a change is in its life: ``draft -> reviewed -> committing -> committed | failed | rolled_back``."""

    DRAFT = "draft"
    REVIEWED = "reviewed"
    COMMITTING = "committing"
    COMMITTED = "committed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


#: The states a commit ends in.
FINAL_STATES = frozenset({ChangeState.COMMITTED, ChangeState.FAILED, ChangeState.ROLLED_BACK})
#: The states from which a change may be reviewed (again).
REVIEWABLE_STATES = frozenset({ChangeState.DRAFT, ChangeState.REVIEWED, ChangeState.FAILED, ChangeState.ROLLED_BACK})


#: The validation context under which a closed document drops the fields it does not know (:func:`read_newer`).
_NEWER = "newer_server"


class Closed(BaseModel):
    """A document that refuses unknown fields (the models whose document is open on purpose say so):
    the server never answers a field its schema does not have. A client reads a newer server's answer
    with :func:`read_newer`, which drops such fields at every level instead."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_newer_fields(cls, data: Any, info: ValidationInfo) -> Any:
        if not (info.context and info.context.get(_NEWER)) or not isinstance(data, dict):
            return data
        known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        return {k: v for k, v in data.items() if k in known}


M = TypeVar("M", bound=BaseModel)


def read_newer(model: type[M], doc: object) -> M:
    """``doc`` as ``model``, written by a server that may be newer than this code: fields it added are
    dropped at every level (a changed or removed field still fails, as it should)."""
    return model.model_validate(doc, context={_NEWER: True})
