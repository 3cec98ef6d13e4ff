"""Bounded input in the ground layer: the reading of JSON and YAML text from outside
(:mod:`controller.model.text`: strict UTF-8, nesting depth, number of values, RFC 8259
numbers) and the numeric bounds of every field a solver or a switch sees
(:mod:`controller.model.domain`), each refusal located like the intent's other errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import service
from controller.model import MAX_GBPS, MAX_INDEX, MAX_METRIC, MAX_UTILIZATION, MIN_CAPACITY_GBPS, MIN_UTILIZATION
from controller.model.domain import merge_demands
from controller.model.errors import DocumentTooDeep, DocumentTooLarge, InvalidEncoding, InvalidIntent
from controller.model.intent import load_intent, parse_intent_text, validate_intent
from controller.model.text import TextLimits, decode_utf8, json_shape, load_json, load_yaml

EXAMPLE = load_intent(service.EXAMPLE_INTENT).to_document()


def nested(depth: int, fmt: str = "json") -> str:
    """An array ``depth`` levels deep (YAML: block sequences)."""
    if fmt == "yaml":
        return "- " * depth + "x\n"
    return "[" * depth + "]" * depth


def errors_of(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidIntent) as info:
        validate_intent(doc)
    return [str(e) for e in info.value.errors]


# -- depth and size -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_nesting_up_to_the_bound_is_read_and_one_more_level_is_refused(fmt: str) -> None:
    limits = TextLimits(max_depth=8)
    parse_intent_text(nested(8, fmt), fmt, limits=limits)
    with pytest.raises(DocumentTooDeep) as info:
        parse_intent_text(nested(9, fmt), fmt, limits=limits)
    assert "8" in info.value.errors[0].msg and info.value.kind == "document-too-deep"


@pytest.mark.parametrize("fmt,text", [
    ("json", "[" * 100_000 + "]" * 100_000),   # json.loads: RecursionError before
    ("json", "[" * 100_000),                   # unbalanced: refused for its depth, not parsed
    ("yaml", "[" * 30_000),                    # libyaml's composer recursed in C before
    ("yaml", "- " * 30_000 + "x"),
    ("yaml", "{a: " * 5_000 + "1" + "}" * 5_000),
])
def test_hostile_nesting_is_refused_without_recursion(fmt: str, text: str) -> None:
    with pytest.raises(InvalidIntent) as info:  # too deep, or a syntax error of the parser's own bound
        parse_intent_text(text, fmt, allow_aliases=False)
    assert info.value.errors[0].msg


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_document_of_more_values_than_the_bound_is_refused(fmt: str) -> None:
    text = json.dumps(list(range(1000))) if fmt == "json" else "".join(f"- {i}\n" for i in range(1000))
    assert len(parse_intent_text(text, fmt, limits=TextLimits(max_nodes=1001))) == 1000
    with pytest.raises(DocumentTooLarge):
        parse_intent_text(text, fmt, limits=TextLimits(max_nodes=999))


def test_the_example_fabric_reads_well_within_the_default_bounds() -> None:
    text = json.dumps(EXAMPLE)
    depth, values = json_shape(text.encode())
    assert depth == 4 and values < 1000  # failure_domains[0].devices
    assert parse_intent_text(text, "json") == EXAMPLE


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{}",:\\ \u00e9'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='k[]{}"\\', max_size=3), inner,
                                                                max_size=4),
    max_leaves=30)


def _depth(value: Any) -> int:
    """The nesting depth by walking the parsed value (the independent checker)."""
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _count(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(1 + _count(v) for v in value.values())
    return 1


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans())
def test_the_bracket_scan_measures_what_the_parser_builds(value: Any, indent: bool) -> None:
    raw = json.dumps(value, indent=1 if indent else None, ensure_ascii=False).encode()
    depth, values = json_shape(raw)
    assert depth == _depth(value)
    assert values >= _count(value)  # an upper bound: an empty array or object counts one more


# -- encoding ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,why", [
    (b'{"name": "x\xff"}', "invalid start byte at byte 11"),
    (b'{"name": "\xc0\xaf"}', "invalid start byte"),              # an overlong '/'
    (b'{"name": "\xed\xa0\x80"}', "invalid continuation byte"),   # a surrogate encoded in UTF-8 (CESU)
    (b'{"name": "\xe2\x82"}', "invalid continuation byte"),       # a truncated sequence
    (b'\xff\xfe{\x00}\x00', "invalid start byte at byte 0"),      # UTF-16, which json.loads would guess
])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_text_that_is_not_utf8_is_refused_naming_the_bytes(raw: bytes, why: str, fmt: str) -> None:
    with pytest.raises(InvalidEncoding) as info:
        parse_intent_text(raw, fmt)
    assert why in info.value.errors[0].msg and "not UTF-8" in info.value.errors[0].msg


@pytest.mark.parametrize("text,loc", [
    ('{"devices": [{"name": "r\\ud800"}]}', "devices[0].name"),
    ('{"devices": [{"name": "r\\uDFFF"}]}', "devices[0].name"),
    ('{"name": "\\udc00\\ud800"}', "name"),          # a pair in the wrong order is two lone surrogates
    ('{"x\\ud800": 1}', ""),                          # a key
])
def test_a_lone_surrogate_escape_is_refused_where_it_is(text: str, loc: str) -> None:
    with pytest.raises(InvalidEncoding) as info:
        load_json(text)
    assert info.value.errors[0].loc == loc and "lone surrogate" in info.value.errors[0].msg


def test_surrogate_pairs_and_escaped_backslashes_are_text() -> None:
    assert load_json('{"name": "\\ud83d\\ude00"}') == {"name": "\U0001f600"}
    assert load_json('{"name": "\\\\ud800"}') == {"name": "\\ud800"}  # a backslash, then 'ud800'
    assert load_yaml('name: "\\U0001F600"') == {"name": "\U0001f600"}
    assert decode_utf8("café".encode()) == "café"


def test_a_lone_surrogate_in_text_already_decoded_is_refused() -> None:
    with pytest.raises(InvalidEncoding):
        parse_intent_text('{"name": "\ud800"}', "json")
    with pytest.raises(InvalidEncoding):
        parse_intent_text('name: "\ud800"', "yaml")


def test_an_intent_file_that_is_not_utf8_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "dc.yaml"
    path.write_bytes(b"name: dc\xff\n")
    with pytest.raises(InvalidEncoding) as info:
        load_intent(path)
    assert str(path) in info.value.errors[0].msg


# -- numbers the readers cannot take ------------------------------------------------------------------

@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_json_is_rfc_8259_nan_and_infinity_are_not_numbers(literal: str) -> None:
    with pytest.raises(InvalidIntent) as info:
        load_json(f'{{"gbps": {literal}}}')
    assert literal.lstrip("-") in info.value.errors[0].msg and "RFC 8259" in info.value.errors[0].msg


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_an_integer_of_5000_digits_is_an_error_not_a_crash(fmt: str) -> None:
    text = '{"asn": ' + "9" * 5000 + "}" if fmt == "json" else "asn: " + "9" * 5000
    with pytest.raises(InvalidIntent) as info:
        parse_intent_text(text, fmt)
    assert "4300 digits" in info.value.errors[0].msg


def test_a_yaml_date_that_does_not_exist_is_an_error_not_a_crash() -> None:
    with pytest.raises(InvalidIntent) as info:
        parse_intent_text("name: 2024-13-01\n", "yaml")
    assert "month must be in 1..12" in info.value.errors[0].msg


# -- numeric bounds of the model --------------------------------------------------------------------

def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(EXAMPLE))
    if path[0] == "devices" and path[-1] in ("pod", "plane"):
        # a pod or plane is a group: renumber every device of the group, so that the Clos still holds
        field, old = path[-1], doc["devices"][path[1]][path[-1]]
        for device in doc["devices"]:
            if device.get(field) == old and device is not doc["devices"][path[1]]:
                device[field] = value
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


#: (path in the example document, the largest and smallest values accepted, values just past them)
BOUNDS = [
    (("links", 7, "capacity_gbps"), [MIN_CAPACITY_GBPS, MAX_GBPS], [MIN_CAPACITY_GBPS / 2, MAX_GBPS * 1.0001]),
    (("links", 7, "metric"), [1, MAX_METRIC], [0, MAX_METRIC + 1]),
    (("devices", 0, "pod"), [0, MAX_INDEX], [-1, MAX_INDEX + 1]),     # the whole of pod 0 renumbered
    (("devices", 4, "plane"), [0, MAX_INDEX], [-1, MAX_INDEX + 1]),   # the whole of leaf-0-0's plane
    (("devices", 4, "max_ecmp_entries"), [1, 65536], [0, 65537]),
    (("defaults", "max_ecmp_entries"), [1, 65536], [0, 65537]),
    (("demands", 1, "gbps"), [0, 1e-6, MAX_GBPS], [-1e-9, 1e-7, MAX_GBPS * 1.0001]),
    (("policies", 0, "max"), [MIN_UTILIZATION, MAX_UTILIZATION], [MIN_UTILIZATION / 2, MAX_UTILIZATION * 1.01]),
    (("policies", 1, "max_utilization"), [MIN_UTILIZATION, MAX_UTILIZATION],
     [MIN_UTILIZATION / 2, MAX_UTILIZATION * 1.01]),
]
HOSTILE = [float("nan"), float("inf"), -float("inf"), 1e308, 5e-324, 1e-320, 10**100, -(10**100), True]


def _loc(path: tuple[Any, ...]) -> str:
    from controller.model.text import format_loc

    return format_loc(path)


@pytest.mark.parametrize("path,good,bad", BOUNDS, ids=[_loc(b[0]) for b in BOUNDS])
def test_every_number_has_bounds_and_an_error_located_at_it(path: tuple[Any, ...], good: list[Any],
                                                            bad: list[Any]) -> None:
    assert EXAMPLE["policies"][0]["kind"] == "utilization_limit"
    assert EXAMPLE["policies"][1]["kind"] == "failure_tolerance"
    for value in good:
        validate_intent(_with(path, value))
    for value in [*bad, *HOSTILE]:
        errs = errors_of(_with(path, value))
        assert any(e.startswith(_loc(path) + ":") for e in errs), (value, errs)


def test_no_hostile_number_reaches_a_solver_through_a_job() -> None:
    job = {"name": "j", "tors": ["tor-0-0", "tor-1-1"], "collective": "ring_allreduce", "bytes_per_iter": 1e9,
           "iter_s": 1.0}
    validate_intent(_with(("jobs",), [job]))
    for field in ("bytes_per_iter", "iter_s"):
        for value in [*HOSTILE, 1e-7]:  # 1e-7 s per iteration, or 1e-7 bytes: past a bound of its own or of the rate
            errs = errors_of(_with(("jobs",), [{**job, field: value}]))
            assert any(e.startswith("jobs[0]") for e in errs), (field, value, errs)


def test_a_ring_share_above_one_declared_demand_is_merged_not_refused() -> None:
    doc = _with(("jobs",), [{"name": "j", "tors": ["tor-0-0", "tor-0-1", "tor-1-1"], "collective": "ring_allreduce",
                             "bytes_per_iter": 1.25e14, "iter_s": 1.0}])  # 1e6 gbps: a ring member sends 4/3 of it
    intent = validate_intent(doc)
    assert max(d.gbps for d in merge_demands(intent)) > MAX_GBPS


def test_names_referenced_elsewhere_are_bounded_so_errors_do_not_echo_megabytes() -> None:
    errs = errors_of(_with(("links", 0, "b"), "x" * 100_000))
    assert errs == ["links[0].b: string should have at most 64 characters"]
