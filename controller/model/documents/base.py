"""What every answer document shares: the change states and the closed base model (unknown fields refused)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, JsonValue

__all__ = ["ChangeState", "Closed", "FINAL_STATES", "JsonObject", "REVIEWABLE_STATES"]

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


class Closed(BaseModel):
    """A document that refuses unknown fields (the models whose document is open on purpose say so)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
