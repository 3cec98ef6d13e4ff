"""numba's ``njit`` with its on-disk cache wherever the process may write one.

``cache=True`` keeps compiled kernels in the package's ``__pycache__`` (once per machine).
A process that may not write there (Loom run as an unprivileged user from a root-owned
checkout, with no writable home for numba's user-wide cache) would otherwise fail at import
with "no locator available"; it compiles the kernel in memory instead, once per process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import njit

__all__ = ["compiled"]


def compiled(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@compiled(nogil=True)``: ``njit(cache=True, ...)``, or without the cache where none can be kept."""

    def wrap(fn: Callable[..., Any]) -> Any:
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return njit(**options)(fn)

    return wrap
