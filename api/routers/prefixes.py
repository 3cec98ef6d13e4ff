"""``/v1/prefixes``: originated prefixes, by prefix (``10.0.0.0_24`` or ``10.0.0.0%2F24``); filter by origin."""

from typing import Annotated

from fastapi import Query

from api.routers.collection import collection_router


async def filters(
    origin: Annotated[str | None, Query(description="prefixes this device originates")] = None,
) -> dict[str, str | None]:
    return {"origin": origin}


router = collection_router("prefixes", filters, id_help="the prefix, with '/' written as '_' (10.0.0.0_24) or %2F")
