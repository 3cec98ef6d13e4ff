"""The rules of a bearer token's name, the one place both the API and the CLI check them.

A token's name is who the audit log says acted (``actor``), so it must read as
what it is: 1 to :data:`TOKEN_NAME_MAX` printable characters (no control or
format characters, no line breaks that could forge a line of a log or a
terminal), with no space at either end. Uniqueness among the live tokens is the
store's to hold (a unique index), since only it sees concurrent writers.
"""

from __future__ import annotations

__all__ = ["TOKEN_NAME_MAX", "token_name_problem"]

#: the longest token name (the store's column holds 128)
TOKEN_NAME_MAX = 128


def token_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a token, or ``None`` when it can.

    >>> token_name_problem("ci-deploy"), token_name_problem("ci\\x1b[2J")
    (None, 'must be printable: character U+001B at position 2 is not')
    """
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > TOKEN_NAME_MAX:
        return f"must be at most {TOKEN_NAME_MAX} characters (it has {len(name)})"
    for i, ch in enumerate(name):
        if not ch.isprintable():
            return f"must be printable: character U+{ord(ch):04X} at position {i} is not"
    if name != name.strip():
        return "must not begin or end with a space"
    return None
