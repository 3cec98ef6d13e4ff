"""The controller's operations on the revisioned intent: what the API routers and the CLI call.

One module per thing it serves, and every name its callers use is here:

- :mod:`~controller.service.context`: who calls (:class:`Actor`, roles) and what a write carries and
  answers (:class:`WriteContext`, :class:`WriteResult`, the pages);
- :mod:`~controller.service.reads`: the head, revisions, the document, pages of objects, diffs;
- :mod:`~controller.service.writes`: whole-document edits and object CRUD, each one transaction that
  checks ``If-Match``, validates the whole result and stores a revision only when it changed;
- :mod:`~controller.service.idempotency`: ``Idempotency-Key``, its lookup, mismatch rule and storage,
  for the intent writes and the change routes alike;
- :mod:`~controller.service.tokens`: bearer tokens, issued, revoked and checked;
- :mod:`~controller.service.audit`: rejected writes, refused requests and the audit log's reads.
"""

from controller.service.audit import Refusal, audit_refusals, audit_rejected, list_audit
from controller.service.context import (
    NO_STATUS,
    ROLES,
    Actor,
    Listing,
    Page,
    WriteContext,
    WriteResult,
    role_allows,
)
from controller.service.idempotency import IDEMPOTENCY_KEEP_S, IdempotentWrite, keep_answer, stored_answer
from controller.service.reads import (
    cached_head,
    diff_revisions,
    element_of,
    find_object,
    get_intent,
    get_object,
    get_revision,
    head,
    head_snapshot,
    list_elements,
    list_objects,
    list_revisions,
    page_of,
    public,
    read_head,
    read_intent,
    revision_snapshot,
)
from controller.service.tokens import (
    TOKEN_PREFIX,
    authenticate,
    authenticate_until,
    bootstrap_admin,
    create_token,
    get_token,
    list_tokens,
    revoke_token,
    update_token,
)
from controller.service.writes import (
    EXAMPLE_INTENT,
    NoIntent,
    apply_draft,
    apply_edit,
    create_object,
    delete_object,
    load_example,
    replace_intent,
    update_object,
)

__all__ = [
    "EXAMPLE_INTENT",
    "IDEMPOTENCY_KEEP_S",
    "NO_STATUS",
    "ROLES",
    "TOKEN_PREFIX",
    "Actor",
    "IdempotentWrite",
    "Listing",
    "NoIntent",
    "Page",
    "Refusal",
    "WriteContext",
    "WriteResult",
    "apply_draft",
    "apply_edit",
    "audit_refusals",
    "audit_rejected",
    "authenticate",
    "authenticate_until",
    "bootstrap_admin",
    "cached_head",
    "create_object",
    "create_token",
    "delete_object",
    "diff_revisions",
    "element_of",
    "find_object",
    "get_intent",
    "get_object",
    "get_revision",
    "get_token",
    "head",
    "head_snapshot",
    "keep_answer",
    "list_audit",
    "list_elements",
    "list_objects",
    "list_revisions",
    "list_tokens",
    "load_example",
    "page_of",
    "public",
    "read_head",
    "read_intent",
    "replace_intent",
    "revision_snapshot",
    "revoke_token",
    "role_allows",
    "stored_answer",
    "update_object",
    "update_token",
]
