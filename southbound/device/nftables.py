"""nftables commands run in the agent's own process through libnftables, as ``nft`` runs them.

The agent counts forwarded packets per prefix in nftables tables (:mod:`southbound.device.counters`) and reads
the counters at every telemetry sample, for each family: with the ``nft`` command that was a process each time
(about 3 ms of CPU; 14,000 of them in the lab phase of the test suite). ``nft`` is a thin front end of
libnftables, which Debian's ``nftables`` package installs beside it (``libnftables.so.1``): the same command
text given to :func:`run` gives the same output (``json``: as ``nft -j`` prints it) for about 0.6 ms.

Each call has a context of its own (``nft_ctx_new``), so threads do not share one; a lock keeps calls one at a
time all the same (the library's symbol tables are global). Where the library cannot be loaded, :func:`available`
is False and the caller runs the ``nft`` command instead.
"""

from __future__ import annotations

import ctypes
import functools
import threading

__all__ = ["NftError", "available", "run"]

_OUTPUT_JSON = 1 << 4  # NFT_CTX_OUTPUT_JSON
_LOCK = threading.Lock()


class NftError(OSError):
    """A command libnftables refused; its text is nft's own error message."""


@functools.cache
def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libnftables.so.1")  # by its soname: find_library would run ldconfig first
    except OSError:
        return None
    ptr = ctypes.c_void_p
    lib.nft_ctx_new.restype = ptr
    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
    lib.nft_ctx_free.argtypes = [ptr]
    lib.nft_ctx_buffer_output.argtypes = [ptr]
    lib.nft_ctx_buffer_error.argtypes = [ptr]
    lib.nft_ctx_output_set_flags.argtypes = [ptr, ctypes.c_uint]
    lib.nft_run_cmd_from_buffer.argtypes = [ptr, ctypes.c_char_p]
    lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
    lib.nft_ctx_get_output_buffer.argtypes = [ptr]
    lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
    lib.nft_ctx_get_error_buffer.argtypes = [ptr]
    return lib


def available() -> bool:
    """Whether libnftables loads in this process."""
    return _library() is not None


def run(commands: str, *, json: bool = False) -> str:
    """Run ``commands`` (one or more lines, as ``nft -f`` reads them) in this process's network namespace; its
    output (``json``: in nft's JSON form). :class:`NftError` with nft's message when a command fails."""
    lib = _library()
    if lib is None:
        raise NftError("libnftables is not available")
    with _LOCK:
        ctx = lib.nft_ctx_new(0)
        if not ctx:
            raise NftError("libnftables: no context")
        try:
            lib.nft_ctx_buffer_output(ctx)
            lib.nft_ctx_buffer_error(ctx)
            if json:
                lib.nft_ctx_output_set_flags(ctx, _OUTPUT_JSON)
            code = lib.nft_run_cmd_from_buffer(ctx, commands.encode())
            out = (lib.nft_ctx_get_output_buffer(ctx) or b"").decode(errors="replace")
            err = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode(errors="replace")
        finally:
            lib.nft_ctx_free(ctx)
    if code != 0:
        raise NftError(err.strip() or f"nft: {commands.strip()[:200]} failed")
    return out
