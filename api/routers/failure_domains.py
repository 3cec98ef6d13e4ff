"""``/v1/failure-domains``: what fails together, by name; filter by kind or member device."""

from typing import Annotated

from fastapi import Query

from api.routers.collection import collection_router


async def filters(
    kind: Annotated[str | None, Query(description="power, srlg, rack, ...")] = None,
    device: Annotated[str | None, Query(description="domains that contain this device")] = None,
) -> dict[str, str | None]:
    return {"kind": kind, "device": device}


router = collection_router("failure-domains", filters, id_help="the failure domain's name")
