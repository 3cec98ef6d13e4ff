"""``/v1/devices``: the fabric's switches, by name; filter by role, pod, plane."""

from typing import Annotated

from fastapi import Query

from api.routers.collection import collection_router
from controller.model import Role


async def filters(
    role: Annotated[Role | None, Query(description="tor, leaf, spine, superspine or router")] = None,
    pod: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    plane: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
) -> dict[str, str | None]:
    return {"role": role.value if role else None, "pod": None if pod is None else str(pod),
            "plane": None if plane is None else str(plane)}


router = collection_router("devices", filters, id_help="the device's name")
