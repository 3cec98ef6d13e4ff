"""RFC 6902 JSON Patch over plain JSON documents (the edits of a change).

:func:`apply_patch` applies ``add``, ``remove``, ``replace``, ``move``, ``copy``
and ``test`` to a deep copy of the document, with RFC 6901 pointers (``~0``,
``~1``, ``-`` for the end of an array). A bad operation raises
:class:`controller.model.errors.InvalidIntent` located at ``patch[i]``, so the API
answers 422 naming the operation, and nothing is stored.
"""

from __future__ import annotations

import copy
from typing import Any

from controller.model.errors import IntentError, InvalidIntent

__all__ = ["apply_patch"]


class _PatchError(Exception):
    pass


def _tokens(pointer: Any) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise _PatchError(f"{pointer!r} is not a JSON pointer")
    if pointer == "":
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise _PatchError(f"{token!r} is not an array index")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise _PatchError(f"index {i} is out of range")
    return i


def _parent(doc: Any, tokens: list[str]) -> tuple[Any, str]:
    if not tokens:
        raise _PatchError("the operation cannot target the whole document")
    node = doc
    for t in tokens[:-1]:
        node = _get(node, t)
    return node, tokens[-1]


def _get(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise _PatchError(f"member {token!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, allow_end=False)]
    raise _PatchError(f"cannot descend into a {type(node).__name__} with {token!r}")


def _resolve(doc: Any, pointer: Any) -> Any:
    node = doc
    for t in _tokens(pointer):
        node = _get(node, t)
    return node


def _add(doc: Any, pointer: Any, value: Any) -> Any:
    tokens = _tokens(pointer)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise _PatchError(f"cannot add into a {type(parent).__name__}")
    return doc


def _remove(doc: Any, pointer: Any) -> Any:
    parent, last = _parent(doc, _tokens(pointer))
    if isinstance(parent, dict):
        if last not in parent:
            raise _PatchError(f"member {last!r} does not exist")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise _PatchError(f"cannot remove from a {type(parent).__name__}")


def _apply_one(doc: Any, op: Any) -> Any:
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        raise _PatchError("an operation is an object with 'op' and 'path'")
    kind, path = op["op"], op.get("path")
    if "path" not in op:
        raise _PatchError("'path' is required")
    if kind in ("add", "replace", "test") and "value" not in op:
        raise _PatchError(f"'{kind}' needs 'value'")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind == "remove":
        _remove(doc, path)
        return doc
    if kind == "replace":
        if not _tokens(path):
            return copy.deepcopy(op["value"])
        _resolve(doc, path)  # must exist
        _remove(doc, path)
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind in ("move", "copy"):
        if "from" not in op:
            raise _PatchError(f"'{kind}' needs 'from'")
        if kind == "move" and isinstance(path, str) and path.startswith(str(op["from"]) + "/"):
            raise _PatchError("cannot move a value into one of its children")
        value = _resolve(doc, op["from"])
        if kind == "move":
            _remove(doc, op["from"])
        return _add(doc, path, copy.deepcopy(value))
    if kind == "test":
        if _resolve(doc, path) != op["value"]:
            raise _PatchError(f"test failed: the value at {path} is not {op['value']!r}")
        return doc
    raise _PatchError(f"unknown op {kind!r} (add, remove, replace, move, copy, test)")


def apply_patch(document: dict[str, Any], patch: list[Any]) -> Any:
    """``document`` with ``patch`` applied (the input is left untouched).

    >>> apply_patch({"policies": []}, [{"op": "add", "path": "/policies/-", "value": {"kind": "drain"}}])
    {'policies': [{'kind': 'drain'}]}
    """
    if not isinstance(patch, list):
        raise InvalidIntent([IntentError("patch", "a JSON Patch is a list of operations")])
    doc: Any = copy.deepcopy(document)
    for i, op in enumerate(patch):
        try:
            doc = _apply_one(doc, op)
        except _PatchError as exc:
            raise InvalidIntent([IntentError(f"patch[{i}]", str(exc))]) from None
    return doc
