"""A change touches only what it changes: stable link addresses, router ids and NETs.

Numbers come from :mod:`controller.model.addressing` (a hash of each link's
ends, of each device's name; collisions probed in sorted order; a revision's
pins kept by the store). On clos3-small: removing tor-0-0's link to leaf-0-0
changes the configs of those two devices only and resets exactly the two ends
of its BGP session; removing a device moves no other router id, NET or link
address; adding a link moves nothing; reordering the intent's lists changes no
config at all, with or without a plan. Collisions are made on purpose (ids
searched until two share a home slot) to show that the store keeps an existing
link's /31 when the link at its home goes away or a new one would take it.
"""

from __future__ import annotations

import difflib
import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.model.addressing import LINK_POOL, Allocation, _home, allocate, carried, link_id
from controller.model.intent import load_intent, validate_intent
from controller.planning import compile_plan
from controller.store import repo
from controller.workflow import changes
from southbound.config import bgp_session_resets
from southbound.render import device_configs, isis_net, render_frr
from tests.apps import Api, running_api

REPO = Path(__file__).resolve().parents[2]
DOC = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml").to_document()
CUT = ("tor-0-0", "leaf-0-0")  # the link removed


def _without_link(doc: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    return {**doc, "links": [lk for lk in doc["links"] if {lk["a"], lk["b"]} != {a, b}]}


def _without_device(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {**doc, "devices": [d for d in doc["devices"] if d["name"] != name],
            "links": [lk for lk in doc["links"] if name not in (lk["a"], lk["b"])],
            "prefixes": [p for p in doc["prefixes"] if name not in p["origins"]],
            "demands": [x for x in doc["demands"] if x["from"] != name and any(
                p["prefix"] == x["to"] and name not in p["origins"] for p in doc["prefixes"])]}


def _texts(doc: dict[str, Any], plan: bool) -> dict[str, str]:
    intent = validate_intent(doc)
    return {d: render_frr(c) for d, c in device_configs(intent, compile_plan(intent) if plan else None).items()}


def _changed(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {d for d in set(a) | set(b) if a.get(d) != b.get(d)}


def _lines(a: str, b: str) -> list[str]:
    return [x for x in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
            if x[:1] in "+-" and not x.startswith(("+++", "---"))]


def test_removing_a_link_changes_only_its_two_devices() -> None:
    before, after = _texts(DOC, plan=False), _texts(_without_link(DOC, *CUT), plan=False)
    assert _changed(before, after) == set(CUT)
    old = device_configs(validate_intent(DOC))
    new = device_configs(validate_intent(_without_link(DOC, *CUT)))
    resets = bgp_session_resets(old, new)
    assert sorted((r.device, r.peer, r.reason) for r in resets) == [
        ("leaf-0-0", "tor-0-0", "removed"), ("tor-0-0", "leaf-0-0", "removed")]


def test_with_plans_other_devices_change_only_their_wcmp_weights() -> None:
    """The plan moves traffic off the removed link, so weights elsewhere may change; nothing else may."""
    before, after = _texts(DOC, plan=True), _texts(_without_link(DOC, *CUT), plan=True)
    for d in _changed(before, after) - set(CUT):
        for line in _lines(before[d], after[d]):
            assert line[1:].strip() in ("exit", "!") or any(
                w in line for w in ("route-map LOOM-", "prefix-list LOOM-LB-", "extcommunity bandwidth")), (d, line)
            assert "neighbor" not in line or "route-map" in line, (d, line)


def test_adding_a_link_moves_no_other_link() -> None:
    doc = _without_link(DOC, *CUT)
    old, new = device_configs(validate_intent(doc)), device_configs(validate_intent(DOC))
    assert bgp_session_resets(old, new) == []
    assert _changed(_texts(doc, False), _texts(DOC, False)) == set(CUT)


@pytest.mark.parametrize("gone", ["spine-0-1", "tor-1-0", "leaf-0-0"])
def test_removing_a_device_changes_no_other_router_id_net_or_link(gone: str) -> None:
    old = device_configs(validate_intent(DOC))
    new = device_configs(validate_intent(_without_device(DOC, gone)))
    assert set(new) == set(old) - {gone}
    for d, c in new.items():
        assert c.router_id == old[d].router_id and isis_net(c.router_id) == isis_net(old[d].router_id)
        kept = {i.name: i.address for i in old[d].interfaces if i.peer != gone}
        assert {i.name: i.address for i in c.interfaces} == kept
    resets = bgp_session_resets(old, new)
    assert resets and all(gone in (r.device, r.peer) and r.reason == "removed" for r in resets)
    assert len(resets) == 2 * sum(gone in (lk["a"], lk["b"]) for lk in DOC["links"])


def _shuffled(doc: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    out = dict(doc)
    for key in ("devices", "links", "prefixes", "demands"):
        out[key] = list(doc[key])
        rng.shuffle(out[key])
    # and each link the other way round
    out["links"] = [{**lk, "a": lk["b"], "a_port": lk["b_port"], "b": lk["a"], "b_port": lk["a_port"]}
                    if k % 2 else lk for k, lk in enumerate(out["links"])]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reordering_the_intent_changes_no_config(seed: int) -> None:
    assert _texts(_shuffled(DOC, seed), plan=True) == _texts(DOC, plan=True)
    assert _texts(_shuffled(DOC, seed), plan=False) == _texts(DOC, plan=False)


# -- collisions and the store ----------------------------------------------------------------------
def _colliding_links() -> tuple[dict[str, Any], dict[str, Any]]:
    """Two links between r0 and r1 (ports pN) whose ids hash to the same /31, found by search."""
    seen: dict[int, dict[str, Any]] = {}
    for n in itertools.count(1):
        lk = {"a": "r0", "a_port": f"p{n}", "b": "r1", "b_port": f"p{n}"}
        home = _home(link_id(validate_intent(_pair([lk])).links[0]), LINK_POOL.num_addresses // 2)
        if home in seen:
            return seen[home], lk
        seen[home] = lk
    raise AssertionError("unreachable")


def _pair(links: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "pair", "routing": "isis", "devices": [{"name": "r0", "role": "router"},
                                                          {"name": "r1", "role": "router"}], "links": links}


def _address(intent: Any, port: str) -> str | None:
    return device_configs(intent)["r0"].interface(port).address


@pytest.fixture(scope="module")
def collision() -> tuple[dict[str, Any], dict[str, Any]]:
    return _colliding_links()


def test_colliding_links_are_placed_in_sorted_order_whatever_the_document_order(
        collision: tuple[dict[str, Any], dict[str, Any]]) -> None:
    x, y = collision
    one, two = validate_intent(_pair([x, y])), validate_intent(_pair([y, x]))
    assert allocate(one) == allocate(two)
    ids = sorted(link_id(lk) for lk in one.links)
    alloc = allocate(one)
    assert alloc.links[ids[0]] == _home(ids[0], LINK_POOL.num_addresses // 2)
    assert alloc.links[ids[1]] == alloc.links[ids[0]] + 1  # probed to the next /31
    assert alloc.pins() == Allocation({ids[1]: alloc.links[ids[1]]}, {})
    assert allocate(one, keep=alloc.pins()) == alloc


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=DOC) as a:
        yield a


def _head_intent(api: Api, revision: int | None = None) -> Any:
    """The intent (with its allocation) of ``revision``, the head by default."""
    with api.db.session() as s:
        head = repo.head_revision(session=s)
        assert head is not None
        return changes.plan_for(revision or head.id, session=s)[0]


@pytest.mark.component
def test_the_store_keeps_a_probed_link_where_it_is_when_its_home_frees(
        tmp_path: Path, collision: tuple[dict[str, Any], dict[str, Any]]) -> None:
    x, y = sorted(collision, key=lambda lk: lk["a_port"])
    first, second = sorted([x, y], key=lambda lk: link_id(validate_intent(_pair([lk])).links[0]))
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=_pair([x, y])) as a:
        probed = _address(_head_intent(a), second["a_port"])
        assert probed != _address(validate_intent(_pair([second])), second["a_port"])  # not at its home
        gone = a.change(intent=_pair([second]))  # the link at its home goes away
        kept = _head_intent(a, gone["proposed_revision"])
        assert carried(kept) is not None
        assert _address(kept, second["a_port"]) == probed
        # and comes back, on that proposal: it is the one that moves now
        again = a.change(intent=_pair([second, first]), base=gone["proposed_revision"])
        back = _head_intent(a, again["proposed_revision"])
        assert _address(back, second["a_port"]) == probed
        assert _address(back, first["a_port"]) != probed


@pytest.mark.component
def test_the_store_never_moves_an_existing_link_for_a_new_one(
        tmp_path: Path, collision: tuple[dict[str, Any], dict[str, Any]]) -> None:
    first, second = sorted(collision, key=lambda lk: link_id(validate_intent(_pair([lk])).links[0]))
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=_pair([second])) as a:
        home = _address(_head_intent(a), second["a_port"])
        ch = a.change(intent=_pair([second, first]))  # the new link sorts first: from nothing it would take the home
        assert _address(validate_intent(_pair([second, first])), first["a_port"]) == home
        now = _head_intent(a, ch["proposed_revision"])
        assert _address(now, second["a_port"]) == home
        assert _address(now, first["a_port"]) != home


@pytest.mark.component
def test_the_review_counts_the_sessions_a_change_resets(api: Api) -> None:
    api.initial()
    index = next(k for k, lk in enumerate(DOC["links"]) if {lk["a"], lk["b"]} == set(CUT))
    ch = api.change([{"op": "remove", "path": f"/links/{index}"}])
    review = api.review(ch["id"])
    resets = review["bgp_sessions_reset"]
    assert resets["count"] == 2 == len(resets["sessions"])
    assert sorted((s["device"], s["peer"], s["reason"]) for s in resets["sessions"]) == [
        ("leaf-0-0", "tor-0-0", "removed"), ("tor-0-0", "leaf-0-0", "removed")]
    assert set(CUT) <= set(review["config_diff"])
    for d, diff in review["config_diff"].items():
        if d not in CUT:  # weights may move elsewhere; addresses and sessions may not
            changed = [x for x in diff.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))]
            assert not [x for x in changed if x[1:].startswith((" ip address", " bgp router-id"))
                        or "remote-as" in x or "activate" in x], (d, diff)
    # a drain resets nothing: its route maps are refreshed in place
    drained = {**DOC, "policies": [{"kind": "drain", "target": "spine-0-0"}]}
    drain = api.change(intent=drained, base=ch["proposed_revision"])
    assert api.review(drain["id"])["bgp_sessions_reset"] == {"count": 0, "sessions": []}


def test_an_explicit_loopback_is_never_given_to_another_device() -> None:
    one = validate_intent({"name": "x", "routing": "isis", "devices": [{"name": "r0", "role": "router"}],
                           "links": []})
    taken = device_configs(one)["r0"].router_id
    two = validate_intent({"name": "x", "routing": "isis", "links": [], "devices": [
        {"name": "r0", "role": "router"}, {"name": "r1", "role": "router", "loopback": taken}]})
    for keep in (None, allocate(one)):  # from nothing, and keeping r0's old slot: the loopback wins
        ids = {d: c.router_id for d, c in device_configs(two, allocation=allocate(two, keep)).items()}
        assert ids["r1"] == taken and ids["r0"] != taken
