"""Bounded reading of JSON and YAML text from outside: an API request's body, a file.

Text from outside meets three bounds before (and while) it becomes data, so that no
document can crash or exhaust the process that reads it:

* encoding: UTF-8 only, strictly (RFC 3629: no invalid bytes, overlong forms or
  encoded surrogates), and no lone surrogate written as an escape (``"\\ud800"`` in
  JSON, RFC 8259 section 8.2): text that is not Unicode is refused, never repaired;
* depth: arrays and objects (sequences and mappings) nested at most
  :attr:`TextLimits.max_depth` levels. Python's json module and PyYAML's composer
  recurse once per level (libyaml's composer is C: 30,000 nested ``[`` overflow the
  stack and kill the process), so depth is measured before either runs: for JSON by a
  scan of the brackets outside strings, for YAML on the parser's event stream, which
  libyaml produces without recursion;
* size: at most :attr:`TextLimits.max_nodes` values (scalars, arrays and objects;
  a composed YAML node costs some 400 bytes, a JSON value far less).

JSON is read as RFC 8259 defines it: ``NaN``, ``Infinity`` and ``-Infinity`` are not
numbers and are refused. Pure: text in, data or an error out. Errors are
:class:`~controller.model.errors.MalformedDocument` leaves (encoding, depth, size) or
:class:`~controller.model.errors.InvalidIntent` for what a reader cannot take (a
number of 5,000 digits, a date that does not exist), each naming the problem and,
where known, the place. Syntax errors stay the parsers' own (``json.JSONDecodeError``,
``yaml.YAMLError``), so that callers keep their messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import yaml

from controller.model.errors import (
    DocumentTooDeep,
    DocumentTooLarge,
    IntentError,
    InvalidEncoding,
    InvalidIntent,
)

__all__ = ["DEFAULT_LIMITS", "TextLimits", "check_yaml", "decode_utf8", "format_loc", "json_shape", "load_json",
           "load_yaml", "yaml_loader"]


@dataclass(frozen=True)
class TextLimits:
    """The bounds of one read. ``max_depth``: nesting levels of arrays and objects (a
    whole intent needs 4, a change carrying one 6); ``max_nodes``: values in all (the
    largest benchmark fabric, 7,424 devices, 80,282 links and 196,608 demands, has 2.4
    million)."""

    max_depth: int = 32
    max_nodes: int = 4_000_000

    def __post_init__(self) -> None:
        # the parsers recurse once per level: keep well under Python's recursion limit (1000)
        if not 1 <= self.max_depth <= 256:
            raise ValueError(f"max_depth {self.max_depth} out of range 1..256")
        if self.max_nodes < 1:
            raise ValueError(f"max_nodes {self.max_nodes} must be positive")


DEFAULT_LIMITS = TextLimits()

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: large fabrics
_SURROGATE = re.compile("[\ud800-\udfff]")


def yaml_loader() -> type:
    """The safe YAML loader used for documents (libyaml's when present)."""
    return _YamlLoader


def format_loc(parts: tuple[Any, ...] | list[Any]) -> str:
    """``("links", 7, "b")`` -> ``links[7].b``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


# -- encoding ---------------------------------------------------------------------------------

def decode_utf8(raw: bytes, what: str = "the document") -> str:
    """``raw`` as text, strictly UTF-8 (a UTF-8 byte order mark is left for the parser to refuse).

    Raises :class:`InvalidEncoding` naming the offending bytes and where they are.

    >>> decode_utf8(b"name: caf\\xc3\\xa9")
    'name: café'
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start:exc.end][:4].hex(" ")
        raise InvalidEncoding(f"{what} is not UTF-8: {exc.reason} at byte {exc.start} (0x{bad})") from None


def _encoded(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEncoding(f"{what} holds a lone surrogate U+{ord(text[exc.start]):04X} "
                              f"at character {exc.start}, which is no Unicode character") from None


def _surrogate_message(value: str) -> str:
    found = _SURROGATE.search(value)
    code = ord(found.group()) if found else 0
    return (f"a lone surrogate U+{code:04X} (an escape like \\u{code:04x} without its pair) "
            "is no Unicode character")


def _find_surrogate(doc: Any) -> tuple[tuple[Any, ...], str] | None:
    """The place and the text of the first string (or key) in ``doc`` holding a lone surrogate."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                return path, value
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    return path, key
                stack.append(((*path, key), item))
        elif isinstance(value, list):
            stack.extend(((*path, i), item) for i, item in reversed(list(enumerate(value))))
    return None


# -- JSON -------------------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = [0] * 256
for _c in b"[{":
    _STEP[_c] = 1
for _c in b"]}":
    _STEP[_c] = -1
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def json_shape(raw: bytes) -> tuple[int, int]:
    """``(depth, values)`` of JSON text without parsing it: the deepest nesting of arrays and
    objects, and (an upper bound of) the number of values, counted from the brackets, commas and
    colons outside strings. Linear, no recursion; on malformed text, numbers the parser will refuse anyway.

    >>> json_shape(b'{"a": [1, 2, {"b": "[[["}]}')
    (3, 8)
    """
    skeleton = _JSON_STRING.sub(b"", raw)
    brackets = skeleton.translate(None, _NOT_BRACKETS)
    depth = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    opened = brackets.count(b"[") + brackets.count(b"{")
    return depth, skeleton.count(b",") + skeleton.count(b":") + opened + 1


def _not_a_number(name: str) -> Any:
    raise InvalidIntent([IntentError("", f"{name} is not a JSON number (RFC 8259 section 6); "
                                         "write a finite number")])


def load_json(text: str | bytes, limits: TextLimits = DEFAULT_LIMITS, *, what: str = "the document") -> Any:
    """Parse JSON within ``limits``.

    Raises :class:`InvalidEncoding`, :class:`DocumentTooDeep`, :class:`DocumentTooLarge`,
    :class:`InvalidIntent` (``NaN``, a number the reader refuses, a lone surrogate: located where
    known), or ``json.JSONDecodeError`` for a syntax error.

    >>> load_json('{"devices": [{"name": "r1"}]}')
    {'devices': [{'name': 'r1'}]}
    """
    if isinstance(text, bytes):
        raw, text = text, decode_utf8(text, what)
    else:
        raw = _encoded(text, what)
    depth, nodes = json_shape(raw)
    if depth > limits.max_depth:
        raise DocumentTooDeep(f"arrays and objects nested {depth} levels deep; at most {limits.max_depth} are read")
    if nodes > limits.max_nodes:
        raise DocumentTooLarge(f"some {nodes} values; at most {limits.max_nodes} are read")
    try:
        doc = json.loads(text, parse_constant=_not_a_number)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # the int conversion's digit limit (4,300)
        msg = str(exc).split(";")[0]
        raise InvalidIntent([IntentError("", f"a number the JSON reader refuses: {msg}")]) from None
    if _SURROGATE_ESCAPE.search(raw):
        found = _find_surrogate(doc)
        if found is not None:
            raise InvalidEncoding(_surrogate_message(found[1]), format_loc(found[0]))
    return doc


# -- YAML -------------------------------------------------------------------------------------

_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
_VALUES = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)


def _where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _events(text: str) -> Iterator[yaml.Event]:
    return iter(yaml.parse(text, Loader=_YamlLoader))


def check_yaml(text: str, limits: TextLimits = DEFAULT_LIMITS, *, allow_aliases: bool = True) -> None:
    """Walk the YAML parser's events (no composing, no recursion) and refuse what is over
    ``limits``, aliases unless ``allow_aliases``, and lone surrogates in quoted scalars.

    Raises like :func:`load_yaml`; ``yaml.YAMLError`` for a syntax error met on the way.
    """
    depth = nodes = 0
    for event in _events(text):
        if isinstance(event, _VALUES):
            nodes += 1
            if nodes > limits.max_nodes:
                raise DocumentTooLarge(f"more than {limits.max_nodes} values{_where(event)}; "
                                       f"at most {limits.max_nodes} are read")
        if isinstance(event, _OPEN):
            depth += 1
            if depth > limits.max_depth:
                raise DocumentTooDeep(f"sequences and mappings nested deeper than {limits.max_depth} levels"
                                      f"{_where(event)}")
        elif isinstance(event, _CLOSE):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent) and not allow_aliases:
            raise InvalidIntent([IntentError("", "YAML aliases (*name) are not accepted here: "
                                                 "write the document out in full")])
        elif isinstance(event, yaml.ScalarEvent) and event.style == '"' and not event.value.isascii() \
                and _SURROGATE.search(event.value):
            raise InvalidEncoding(_surrogate_message(event.value) + _where(event))


def load_yaml(text: str | bytes, limits: TextLimits = DEFAULT_LIMITS, *, allow_aliases: bool = True,
              what: str = "the document") -> Any:
    """Parse YAML (safe tags only) within ``limits``: :func:`check_yaml`, then the loader.

    Raises :class:`InvalidEncoding`, :class:`DocumentTooDeep`, :class:`DocumentTooLarge`,
    :class:`InvalidIntent` (an alias where refused; a value the loader cannot build, such as a
    date that does not exist or a number of 5,000 digits), or ``yaml.YAMLError`` for a syntax error.

    >>> load_yaml("devices: [{name: r1}]")
    {'devices': [{'name': 'r1'}]}
    """
    text = decode_utf8(text, what) if isinstance(text, bytes) else text
    _encoded(text, what)
    check_yaml(text, limits, allow_aliases=allow_aliases)
    try:
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        raise
    except (ValueError, OverflowError) as exc:  # a timestamp like 2024-13-01, an int of 5,000 digits
        msg = str(exc).split(";")[0]
        raise InvalidIntent([IntentError("", f"a YAML value cannot be read: {msg}")]) from None
