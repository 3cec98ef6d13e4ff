"""``/v1/demands``: traffic demands, by ``<from>,<prefix>`` (``tor-0-1,10.0.0.0_24``); filter by from and to."""

from typing import Annotated

from fastapi import Query

from api.routers.collection import collection_router
from controller.model import canonical_prefix


async def filters(
    from_: Annotated[str | None, Query(alias="from", description="ingress device")] = None,
    to: Annotated[str | None, Query(description="destination prefix (10.0.0.0/24)")] = None,
) -> dict[str, str | None]:
    if to is not None:
        try:
            to = canonical_prefix(to)
        except ValueError:
            pass  # matches nothing
    return {"from": from_, "to": to}


router = collection_router("demands", filters, id_help="FROM,PREFIX with '/' written as '_' or %2F")
