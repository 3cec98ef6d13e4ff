"""Snapshots and incremental validation, held against the whole-document path they replace.

The oracle is what the store did before revisions were stored by content: edit
the document (:mod:`controller.store.objects`), validate it whole
(:func:`validate_intent`), hash its canonical JSON. A snapshot must give the
same content hash, the same document and the same served bytes, and a
:class:`Draft` the same verdict with the same located errors, over long
chains of random edits (valid and not) on Clos and IS-IS fabrics. The
reference fields that incremental validation trusts are checked against the
attributes the cross-object rules really read.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from starlette.responses import JSONResponse

from controller.gen import clos_document
from controller.model import Intent
from controller.model import intent as intent_module
from controller.model.errors import Conflict, InvalidIntent, LoomError, NotFound
from controller.model.intent import load_intent, validate_intent
from controller.model.revalidate import BOUNDED_FIELDS, DERIVED_FIELDS, LEAF_SECTIONS, REFERENCE_FIELDS
from controller.service import EXAMPLE_INTENT
from controller.store import objects
from controller.store.draft import Draft
from controller.store.snapshot import SECTIONS, Snapshot, diff_snapshots

Doc = dict[str, Any]


def example() -> Doc:
    return load_intent(EXAMPLE_INTENT).to_document()


def clos(**kw: Any) -> Doc:
    doc = clos_document(pods=3, tors=3, planes=2, spines=2, missing=0.1, hetero=0.3, fanout=3, seed=7,
                        scale_to_ecmp=False, **kw)
    doc["jobs"] = [{"name": "llm", "tors": ["tor-0-0", "tor-1-1", "tor-2-2"], "collective": "ring_allreduce",
                    "bytes_per_iter": 1e9, "iter_s": 0.5}]
    doc["policies"] += [{"kind": "drain", "target": "leaf-1-0"}, {"kind": "utilization_limit", "max": 0.9},
                        {"kind": "failure_tolerance", "scope": "domains"}]
    doc["failure_domains"][0]["kind"] = "pößer ⚡"  # non-ASCII: stored escaped, served as UTF-8
    return validate_intent(doc).to_document()


def isis() -> Doc:
    routers = [{"name": f"r{i}", "loopback": f"10.255.1.{i + 1}"} for i in range(6)]
    links = [{"a": f"r{i}", "a_port": "e1", "b": f"r{(i + 1) % 6}", "b_port": "e2", "metric": 10 + i} for i in range(6)]
    doc = {"name": "ring", "routing": "isis", "devices": routers, "links": links,
           "prefixes": [{"prefix": f"10.{i}.0.0/24", "origins": [f"r{i}"]} for i in range(6)],
           "policies": [{"kind": "wcmp", "enabled": True, "realization": "fib"},
                        {"kind": "paths", "mode": "loop_free"}],
           "demands": [{"from": "r0", "to": "10.3.0.0/24", "gbps": 5}, {"from": "r2", "to": "10.5.0.0/24", "gbps": 1}]}
    return validate_intent(doc).to_document()


def ospf() -> Doc:
    return validate_intent({**isis(), "routing": "ospf"}).to_document()


FABRICS: dict[str, Callable[[], Doc]] = {"example": example, "clos": clos, "isis": isis, "ospf": ospf}


@pytest.mark.parametrize("name", FABRICS)
def test_snapshot_reads_back_the_document_its_hash_and_the_served_bytes(name: str) -> None:
    intent = validate_intent(FABRICS[name]())
    snap = Snapshot.from_intent(intent)
    assert snap.hash == intent.content_hash
    assert snap.document() == intent.to_document()
    assert json.dumps(snap.document()) == json.dumps(intent.to_document())  # key order too
    assert snap.json() == JSONResponse(intent.to_document()).body
    again = Snapshot.from_document(json.loads(snap.json()))
    assert again.hash == intent.content_hash and again.intent.content_hash == intent.content_hash


# -- random edits against the whole-document oracle ------------------------------------------------
def _pick(rng: random.Random, doc: Doc, section: str) -> Doc | None:
    items = doc.get(section) or []
    return rng.choice(items) if items else None


def _values(rng: random.Random, doc: Doc, section: str, element: Doc) -> Doc:
    """A patch for ``element``: valid or not, reference fields or not."""
    devices = [d["name"] for d in doc["devices"]]
    options: dict[str, list[Any]] = {
        "devices": [{"max_ecmp_entries": rng.choice([16, 64, None])}, {"asn": rng.choice([65010, 4200000001, 7, 0])},
                    {"name": rng.choice(["tor-new", devices[0]])}, {"pod": rng.choice([0, 1, None])},
                    {"loopback": rng.choice(["10.250.0.9", "10.255.0.1", None])}],
        "links": [{"capacity_gbps": rng.choice([40.0, 400.0, -1.0])}, {"metric": rng.choice([5, 20, 0])},
                  {"a_port": rng.choice(["eth77", "eth1"])}, {"b": rng.choice([*devices[:3], "nowhere"])}],
        "failure_domains": [{"kind": rng.choice(["srlg", "rack"])}, {"devices": rng.sample(devices, 1)},
                            {"links": ["nowhere:eth1"]}],
        "prefixes": [{"origins": rng.sample(devices, 1)}, {"origins": []}],
        "policies": [{"target": rng.choice([*devices[:4], "ghost"])}, {"max": rng.choice([0.5, -1.0])},
                     {"scope": "all_single"}, {"enabled": False}, {"realization": "fib"}, {"mode": "loop_free"}],
        "demands": [{"gbps": rng.choice([1.5, 0.0, -3.0])}, {"to": rng.choice(["10.0.0.0/24", "192.0.2.0/24"])},
                    {"from": rng.choice(devices[:5])}],
        "jobs": [{"bytes_per_iter": rng.choice([2e9, -1.0])}, {"tors": rng.sample(devices, 2)},
                 {"collective": "all_to_all"}],
    }
    patch = dict(rng.choice(options[section]))
    return {k: v for k, v in patch.items() if k in element or v is not None or rng.random() < 0.5}


def _new_element(rng: random.Random, doc: Doc, section: str) -> Doc:
    devices = [d["name"] for d in doc["devices"]]
    prefixes = [p["prefix"] for p in doc.get("prefixes") or []] or ["10.0.0.0/24"]
    return {
        "devices": lambda: {"name": f"x{rng.randrange(99)}", "role": rng.choice(["tor", "router"]), "asn": 4200001234},
        "links": lambda: {"a": rng.choice(devices), "a_port": f"eth{rng.randrange(40, 60)}", "b": rng.choice(devices),
                          "b_port": f"eth{rng.randrange(40, 60)}"},
        "failure_domains": lambda: {"name": f"fd{rng.randrange(9)}", "devices": rng.sample(devices, 1)},
        "prefixes": lambda: {"prefix": f"10.200.{rng.randrange(3)}.0/24", "origins": rng.sample(devices, 1)},
        "policies": lambda: rng.choice([{"kind": "drain", "target": rng.choice([*devices, "ghost"])},
                                        {"kind": "utilization_limit", "max": 0.7}]),
        "demands": lambda: {"from": rng.choice(devices), "to": rng.choice(prefixes), "gbps": 2.0},
        "jobs": lambda: {"name": f"j{rng.randrange(5)}", "tors": rng.sample(devices, 2), "collective": "pipeline",
                         "bytes_per_iter": 1e8, "iter_s": 1.0},
    }[section]()


def _oracle(doc: Doc, op: str, section: str, ident: str | None, value: Doc | None) -> tuple[str, Any]:
    coll = next(c for c in objects.COLLECTIONS.values() if c.key == section)
    try:
        if op == "update":
            assert ident is not None and value is not None
            new, _ = objects.update_element(coll, doc, ident, value)
        elif op == "insert":
            assert value is not None
            new = objects.insert_element(coll, doc, value)
        else:
            assert ident is not None
            new = objects.delete_element(coll, doc, ident)
        intent = validate_intent(new)
    except InvalidIntent as exc:
        return "invalid", [e.as_dict() for e in exc.errors]
    except LoomError as exc:
        return type(exc).__name__, str(exc)
    return "ok", intent


def _draft(base: Snapshot, op: str, section: str, ident: str | None, value: Doc | None) -> tuple[str, Any]:
    draft = Draft(base)
    try:
        if op == "update":
            assert ident is not None and value is not None
            merged = dict(draft.get(section, ident))
            for k, v in value.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = copy.deepcopy(v)
            draft.replace(section, ident, merged)
        elif op == "insert":
            assert value is not None
            draft.insert(section, value)
        else:
            assert ident is not None
            draft.delete(section, ident)
        snap = draft.finish()
    except InvalidIntent as exc:
        return "invalid", [e.as_dict() for e in exc.errors]
    except (NotFound, Conflict) as exc:
        return type(exc).__name__, str(exc)
    return "ok", snap


@pytest.mark.parametrize(("name", "seed", "chunk"), [("example", 1, 256), ("clos", 2, 256), ("clos", 3, 3),
                                                    ("isis", 4, 2), ("ospf", 5, 2)])
def test_drafts_agree_with_whole_document_validation_over_random_edits(name: str, seed: int, chunk: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("controller.store.snapshot.CHUNK", chunk)  # small pieces: the hash reuses most of them
    rng = random.Random(seed)
    base = Snapshot.from_intent(validate_intent(FABRICS[name]()))
    accepted = 0
    for _ in range(150):
        doc = base.document()
        section = rng.choice([s for s in SECTIONS if doc.get(s) or s in ("policies", "demands")])
        op = rng.choices(["update", "insert", "delete"], weights=[6, 2, 1])[0]
        element = _pick(rng, doc, section)
        if op != "insert" and element is None:
            continue
        ident = objects.identity(next(c for c in objects.COLLECTIONS.values() if c.key == section), element) \
            if element is not None else None
        value = (_values(rng, doc, section, element) if op == "update" and element is not None
                 else _new_element(rng, doc, section) if op == "insert" else None)
        want = _oracle(copy.deepcopy(doc), op, section, ident, copy.deepcopy(value))
        got = _draft(base, op, section, ident, copy.deepcopy(value))
        assert got[0] == want[0], (op, section, ident, value, got, want)
        if want[0] != "ok":
            assert got[1] == want[1], (op, section, ident, value)
            continue
        intent, snap = want[1], got[1]
        assert snap.hash == intent.content_hash, (op, section, ident, value)
        assert snap.document() == intent.to_document()
        assert snap.json() == JSONResponse(intent.to_document()).body
        assert diff_snapshots(base, snap) == objects.diff_documents(doc, snap.document())
        base = snap
        accepted += 1
    assert accepted >= 40  # the chain really moved


def test_a_capacity_change_is_proven_without_checking_the_fabric_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    base = Snapshot.from_intent(validate_intent(clos()))
    whole: list[int] = []
    monkeypatch.setattr("controller.store.draft.validate_intent",
                        lambda doc: whole.append(1) or validate_intent(doc))  # type: ignore[func-returns-value]
    monkeypatch.setattr("controller.store.draft.cross_object_valid", lambda *a: whole.append(2) or False)
    draft = Draft(base)
    link = base.sections["links"].elements[3]
    draft.replace("links", link.ident, {**link.doc, "capacity_gbps": 12.5})
    snap = draft.finish()
    assert whole == [] and snap.validated
    delta = snap.delta
    assert delta is not None and delta.entries == 1 and list(delta.sections) == ["links"]
    # a new drain re-runs the policies' rules only; a re-cabled link needs the cross-object pass
    d2 = Draft(snap)
    d2.insert("policies", {"kind": "drain", "target": "spine-0-0"})
    assert d2.finish().validated and whole == []
    d3 = Draft(snap)
    d3.replace("links", link.ident, {**link.doc, "a_port": "eth99"})
    assert d3.finish().validated  # the stub refused the cross-object pass, so the document was checked whole
    assert whole == [2, 1]


# -- positions ---------------------------------------------------------------------------------------
def test_insertions_and_renames_keep_their_place_without_rewriting_the_section() -> None:
    doc = example()
    base = Snapshot.from_document(doc)
    links = list(doc["links"])
    moved = {**links[2], "a_port": "eth77", "b_port": "eth78"}  # re-cabled: a new identity in the same place
    extra = {"a": "tor-0-0", "a_port": "eth50", "b": "leaf-0-1", "b_port": "eth50", "capacity_gbps": 100.0,
             "metric": 10}
    new_doc = {**doc, "links": [links[0], extra, links[1], moved, *links[3:]]}
    snap = Snapshot.from_document(new_doc, base)
    assert snap.document() == new_doc
    d = snap.delta.sections["links"]  # type: ignore[union-attr]
    assert not d.whole and sorted(d.puts) == sorted([objects.identity(objects.collection("links"), moved),
                                                     objects.identity(objects.collection("links"), extra)])
    assert d.removed == (objects.identity(objects.collection("links"), links[2]),)
    pos = snap.sections["links"].pos
    assert pos == sorted(pos) and len(set(pos)) == len(pos)
    # a reordering writes the section whole; nothing else
    swapped = {**doc, "devices": [doc["devices"][1], doc["devices"][0], *doc["devices"][2:]]}
    snap2 = Snapshot.from_document(swapped, base)
    assert snap2.delta.sections["devices"].whole and set(snap2.delta.sections) == {"devices"}  # type: ignore[union-attr]
    assert snap2.document() == swapped


def test_many_insertions_in_one_place_fall_back_to_numbering_afresh() -> None:
    doc = example()
    snap = Snapshot.from_document(doc)
    whole = []
    for i in range(30):  # each between the first demand and the last one inserted: the gap halves every time
        demands = snap.document()["demands"]
        demands = [demands[0], {"from": f"tor-{i}", "to": "10.0.1.0/24", "gbps": float(i)}, *demands[1:]]
        snap = Snapshot.from_document({**snap.document(), "demands": demands}, snap)
        assert snap.document()["demands"] == demands
        pos = snap.sections["demands"].pos
        assert all(a < b for a, b in zip(pos, pos[1:], strict=False))
        d = snap.delta.sections["demands"]  # type: ignore[union-attr]
        whole.append(d.whole)
        assert d.whole or d.puts == (f"tor-{i},10.0.1.0/24",)
    assert 1 <= sum(whole) <= 2 and not whole[0]


# -- what incremental validation may trust ----------------------------------------------------------
class _Recorder:
    """An object that notes which of its attributes the rules read."""

    def __init__(self, obj: Any, seen: set[str]):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_seen", seen)

    @property  # isinstance() looks here
    def __class__(self) -> type:  # type: ignore[override]
        return type(object.__getattribute__(self, "_obj"))

    def __getattr__(self, name: str) -> Any:
        object.__getattribute__(self, "_seen").add(name)
        return getattr(object.__getattribute__(self, "_obj"), name)


def _broken_variants() -> list[Doc]:
    """Documents that break rule after rule (each still shapes): so every branch of the rules runs."""
    out = []
    for name in FABRICS:
        doc = FABRICS[name]()
        out.append(doc)
        bad = copy.deepcopy(doc)
        bad["devices"].append(copy.deepcopy(bad["devices"][0]))
        bad["devices"][1]["asn"] = bad["devices"][-1].get("asn") or 1
        bad["devices"].append({"name": "lonely", "role": "tor", "asn": 65444, "loopback": "10.255.0.1"})
        bad["links"].append({**bad["links"][0], "b": "ghost"})
        bad["links"].append({**bad["links"][1], "b": bad["links"][1]["a"]})
        bad["links"].append({"a": bad["devices"][0]["name"], "a_port": "eth90", "b": bad["devices"][1]["name"],
                             "b_port": "eth91"})
        bad.setdefault("failure_domains", []).append({"name": "x", "devices": ["ghost"], "links": ["ghost:e1", "bad"]})
        bad["failure_domains"].append({"name": "x", "links": [f"{bad['devices'][0]['name']}:nope"]})
        bad.setdefault("prefixes", []).append({**(bad.get("prefixes") or [{"prefix": "10.0.0.0/24"}])[0],
                                               "origins": ["ghost", "ghost"]})
        bad["policies"] = [*bad.get("policies", []), {"kind": "drain", "target": "ghost"},
                           {"kind": "drain", "target": "ghost"}, {"kind": "drain", "target": "ghost:e1"},
                           {"kind": "utilization_limit", "max": 0.5}, {"kind": "utilization_limit", "max": 0.6},
                           {"kind": "paths", "mode": "loop_free"}, {"kind": "wcmp", "realization": "link-bandwidth"}]
        bad.setdefault("demands", []).extend([{"from": "ghost", "to": "192.0.2.0/24", "gbps": 1},
                                              {"from": "ghost", "to": "192.0.2.0/24", "gbps": 1}])
        bad["jobs"] = [{"name": "j", "tors": ["ghost", "ghost", bad["devices"][2]["name"]], "collective": "pipeline",
                        "bytes_per_iter": 1e6, "iter_s": 1}] * 2
        out.append(bad)
        out.append({**bad, "routing": "isis" if doc["routing"] == "bgp" else "bgp"})
    return out


def test_cross_object_rules_read_only_the_reference_fields() -> None:
    seen: dict[str, set[str]] = {s: set() for s in SECTIONS}
    for doc in _broken_variants():
        errors: list[Any] = []
        top, routing = intent_module._check_top(doc, errors)
        items, partial, names_seen = intent_module._shape_sections(doc, errors)
        merged = {s: sorted(good + partial[s], key=lambda e: e[0]) for s, good in items.items()}
        wrapped = {s: [(i, _Recorder(o, seen[s])) for i, o in objs] for s, objs in merged.items()}
        intent_module._check_meaning(routing, wrapped, names_seen, [], structure=True)
    allowed = {s: set(REFERENCE_FIELDS[s]) | set(BOUNDED_FIELDS.get(s, ())) for s in SECTIONS}
    for s in SECTIONS:
        reads = set()
        for name in seen[s]:
            reads |= set(DERIVED_FIELDS.get(name, (name,)))
        assert reads <= allowed[s], f"{s}: the rules read {sorted(reads - allowed[s])}, not in REFERENCE_FIELDS"
    assert seen["devices"] and seen["links"] and seen["policies"]  # the recorder saw the rules at work
    assert "metric" in seen["links"]  # the OSPF fabric's cost rule too (the bound proven_valid guards)
    # nothing refers to the leaf sections: their objects are read only by their own rules
    assert LEAF_SECTIONS.isdisjoint({"devices", "links", "prefixes"})


def test_an_edit_to_a_cost_ospf_cannot_carry_is_refused_where_isis_takes_it() -> None:
    """A link's metric is no reference field (an edit of it alone is proven valid), but OSPF's costs stop at
    65535: an edit past that is checked whole, and refused, located, under ``routing: ospf`` alone."""
    for routing, verdict in (("ospf", "invalid"), ("isis", "ok")):
        base = Snapshot.from_intent(validate_intent({**isis(), "routing": routing}))
        link = base.document()["links"][2]
        ident = objects.identity(objects.COLLECTIONS["links"], link)
        got = _draft(base, "update", "links", ident, {"metric": 70000})
        assert got[0] == verdict, got
        if verdict == "invalid":
            assert [e["loc"] for e in got[1]] == ["links[2].metric"], got
        assert _draft(base, "update", "links", ident, {"metric": 65535})[0] == "ok"


def test_intent_model_construct_matches_validation() -> None:
    intent = validate_intent(clos())
    snap = Snapshot.from_document(intent.to_document())
    assert snap.intent == Intent(**{f: getattr(intent, f) for f in Intent.model_fields})
    assert snap.intent.to_document() == intent.to_document()
