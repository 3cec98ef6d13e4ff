"""``/v1/policies``: drains (id ``drain:<target>``) and the singleton policies
(id = their kind: utilization_limit, failure_tolerance, wcmp, paths); filter by kind."""

from typing import Annotated, Literal

from fastapi import Query

from api.routers.collection import collection_router

Kind = Literal["drain", "utilization_limit", "failure_tolerance", "wcmp", "paths", "auto_te", "failure_reaction",
               "insight"]


async def filters(kind: Annotated[Kind | None, Query()] = None) -> dict[str, str | None]:
    return {"kind": kind}


router = collection_router("policies", filters,
                           id_help="drain:TARGET for a drain, else the policy's kind (e.g. wcmp)")
