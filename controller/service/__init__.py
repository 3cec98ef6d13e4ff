"""The controller's operations on the revisioned intent: what the API routers and the CLI call
(for now all in :mod:`controller.service.writes`, split by what it serves next)."""

from controller.service.writes import *  # noqa: F403
from controller.service.writes import NO_STATUS, __all__, _hash_secret  # noqa: F401
