"""``/v1/links``: the fabric's links, by their lower end (``leaf-0-0:eth1``); filter by device."""

from typing import Annotated

from fastapi import Query

from api.routers.collection import collection_router


async def filters(
    device: Annotated[str | None, Query(description="links with an end on this device")] = None,
) -> dict[str, str | None]:
    return {"device": device}


router = collection_router("links", filters, id_help="the link's lower end by name, DEVICE:PORT (Link.key)")
