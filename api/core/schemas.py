"""Request and response schemas of the REST API, one family per resource.

For each intent collection: ``XCreate`` (the object as the intent document
spells it; unknown fields are errors), ``XUpdate`` (every field optional, for
PATCH; ``null`` clears an optional field) and ``XPublic`` (the object with its
``id``, the identity used in URLs and revision diffs). Around them: list pages,
revisions and their diff, tokens, audit entries and RFC 9457 problem details.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from controller.model import (
    Demand,
    Device,
    DrainPolicy,
    FailureDomain,
    FailureTolerancePolicy,
    Job,
    Link,
    PathsPolicy,
    Prefix,
    UtilizationLimitPolicy,
    WcmpPolicy,
)
from controller.model.documents import FailureDocument
from controller.model.domain import TargetRef, Utilization
from controller.model.tokens import TOKEN_NAME_MAX, token_name_problem

__all__ = [
    "AuditPublic", "CollectionSchemas", "DiffEntry", "Health", "Page", "Problem", "ProblemError",
    "RevisionDiff", "RevisionPublic", "SCHEMAS", "TokenCreate", "TokenCreated", "TokenPublic", "TokenUpdate",
]


T = TypeVar("T")


class _Out(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


# -- problem details (RFC 9457) --------------------------------------------------
class ProblemError(_Out):
    loc: str = Field(description="where, e.g. links[7].b (in the resulting intent) or body.name (in the request)")
    msg: str


class Problem(_Out):
    """``application/problem+json``: what went wrong, and where."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    request_id: str | None = None
    errors: list[ProblemError] = Field(default_factory=list)
    revision: int | None = Field(default=None, description="the head revision, on a 409 for a stale If-Match")
    failing: list[FailureDocument] | None = Field(
        default=None, description="on a refused unsafe commit: every failed invariant")
    failing_scenarios: list[str] | None = Field(
        default=None, description="on a refused unsafe commit: the failing scenarios")


# -- intent collections -------------------------------------------------------
def _update(base: type[BaseModel], name: str, skip: tuple[str, ...] = ()) -> type[BaseModel]:
    """Every field of ``base`` optional (constraints kept); ``None`` clears it."""
    fields: dict[str, Any] = {}
    for fname, info in base.model_fields.items():
        if fname in skip:
            continue
        annotation: Any = info.annotation
        if info.metadata:
            annotation = Annotated[(annotation, *info.metadata)]
        fields[fname] = (annotation | None, Field(None, alias=info.alias, description=info.description))
    model: type[BaseModel] = create_model(
        name, __config__=ConfigDict(extra="forbid", populate_by_name=True), **fields)
    return model


class DeviceCreate(Device):
    """A device as the intent document spells it."""


class LinkCreate(Link):
    """A link as the intent document spells it."""


class FailureDomainCreate(FailureDomain):
    """A failure domain as the intent document spells it."""


class PrefixCreate(Prefix):
    """An originated prefix as the intent document spells it."""


class DemandCreate(Demand):
    """A demand as the intent document spells it (``from`` is the ingress device)."""


class JobCreate(Job):
    """An ML job as the intent document spells it (``tors`` in ring or stage order)."""


PolicyCreate = Annotated[
    DrainPolicy | UtilizationLimitPolicy | FailureTolerancePolicy | WcmpPolicy | PathsPolicy,
    Field(discriminator="kind"),
]

_ID = Field(description="identity of the object in URLs and revision diffs")


class DevicePublic(Device):
    id: str = _ID


class LinkPublic(Link):
    id: str = _ID


class FailureDomainPublic(FailureDomain):
    id: str = _ID


class PrefixPublic(Prefix):
    id: str = _ID


class DemandPublic(Demand):
    id: str = _ID


class JobPublic(Job):
    id: str = _ID


class DrainPolicyPublic(DrainPolicy):
    id: str = _ID


class UtilizationLimitPolicyPublic(UtilizationLimitPolicy):
    id: str = _ID


class FailureTolerancePolicyPublic(FailureTolerancePolicy):
    id: str = _ID


class WcmpPolicyPublic(WcmpPolicy):
    id: str = _ID


class PathsPolicyPublic(PathsPolicy):
    id: str = _ID


PolicyPublic = Annotated[
    DrainPolicyPublic | UtilizationLimitPolicyPublic | FailureTolerancePolicyPublic | WcmpPolicyPublic
    | PathsPolicyPublic,
    Field(discriminator="kind"),
]

DeviceUpdate = _update(Device, "DeviceUpdate")
LinkUpdate = _update(Link, "LinkUpdate")
FailureDomainUpdate = _update(FailureDomain, "FailureDomainUpdate")
PrefixUpdate = _update(Prefix, "PrefixUpdate")
DemandUpdate = _update(Demand, "DemandUpdate")
JobUpdate = _update(Job, "JobUpdate")


class PolicyUpdate(BaseModel):
    """Fields to change on a policy (those of its kind; the kind itself stays)."""

    model_config = ConfigDict(extra="forbid")

    target: TargetRef | None = None
    max: Utilization | None = None
    scope: Literal["domains", "all_single", "k2"] | None = None
    max_utilization: Utilization | None = None
    enabled: bool | None = None
    realization: Literal["link-bandwidth", "fib"] | None = None
    mode: Literal["shortest", "loop_free"] | None = None


class CollectionSchemas:
    """The schema family of one collection."""

    def __init__(self, create: Any, update: Any, public: Any):
        self.create, self.update, self.public = create, update, public


SCHEMAS: dict[str, CollectionSchemas] = {
    "devices": CollectionSchemas(DeviceCreate, DeviceUpdate, DevicePublic),
    "links": CollectionSchemas(LinkCreate, LinkUpdate, LinkPublic),
    "failure-domains": CollectionSchemas(FailureDomainCreate, FailureDomainUpdate, FailureDomainPublic),
    "prefixes": CollectionSchemas(PrefixCreate, PrefixUpdate, PrefixPublic),
    "policies": CollectionSchemas(PolicyCreate, PolicyUpdate, PolicyPublic),
    "demands": CollectionSchemas(DemandCreate, DemandUpdate, DemandPublic),
    "jobs": CollectionSchemas(JobCreate, JobUpdate, JobPublic),
}


# -- pages, revisions, diffs ---------------------------------------------------------
class Page(_Out, Generic[T]):
    """One page of a list: ``next`` is the URL of the following page, if any."""

    items: list[T]
    total: int
    limit: int
    offset: int
    next: str | None = None


class RevisionPublic(_Out):
    id: int
    parent: int | None
    hash: str = Field(description="SHA-256 of the canonical intent document")
    created_at: datetime
    author: str
    message: str
    request_id: str | None
    proposal: bool = Field(False, description="a change's proposed intent, not on the head's line: it joins the "
                                              "head when its change commits")


class DiffEntry(_Out):
    kind: str = Field(description="device, link, failure_domain, prefix, policy or demand")
    name: str = Field(description="the object's identity (its id)")
    fields: dict[str, list[Any]] | None = Field(None, description="changed fields: [old, new]")


class RevisionDiff(_Out):
    from_: int = Field(alias="from")
    to: int
    fields: dict[str, list[Any]] = Field(description="top-level fields (name, routing, defaults): [old, new]")
    added: list[DiffEntry]
    removed: list[DiffEntry]
    changed: list[DiffEntry]


# -- tokens and audit ---------------------------------------------------------------
def _token_name(value: str) -> str:
    problem = token_name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


TokenName = Annotated[str, Field(min_length=1, max_length=TOKEN_NAME_MAX,
                                 description="printable, no space at either end; unique among unrevoked tokens"),
                      AfterValidator(_token_name)]


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TokenName
    role: Literal["viewer", "operator", "admin"]
    expires_in_seconds: int | None = Field(None, ge=60, le=10 * 365 * 86400,
                                           description="lifetime; none = no expiry")


class TokenUpdate(BaseModel):
    """A token's new name or role (fields left out stay); the last active admin token keeps its role."""

    model_config = ConfigDict(extra="forbid")

    name: TokenName | None = None
    role: Literal["viewer", "operator", "admin"] | None = None


class TokenPublic(_Out):
    id: str
    name: str
    role: Literal["viewer", "operator", "admin"]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool


class TokenCreated(TokenPublic):
    token: str = Field(description="the bearer secret: shown once, stored only as a hash")


class AuditPublic(_Out):
    id: int
    at: datetime
    actor: str
    token_id: str | None
    request_id: str | None
    method: str
    path: str
    action: str
    outcome: Literal["accepted", "unchanged", "rejected", "flagged", "skipped", "failed"] = Field(
        description="accepted, unchanged (a no-op write), rejected; flagged (a drain check found a drained target "
                    "carrying traffic); skipped and failed (automatic re-tuning's decisions)")
    status: int
    revision: int | None
    detail: str
    client: str | None = Field(None, description="the caller's address (requests over HTTP)")


class Health(_Out):
    status: str
    schema_revision: str | None = None
    role: Literal["leader", "follower"] | None = Field(
        None, description="this replica's role (readiness does not depend on it: every replica serves)")
