"""Operational state and failure reaction through the real API, on real agents (``--dry-frr``, no FRR).

The twelve clos3-small agents run in a subprocess (their gNMI on the same unix sockets); a dry agent's
ports are up unless listed in its record directory's ``down`` file, which is how these tests fail a link.
The controller follows every agent over gNMI ON_CHANGE, shows the link down in ``/v1/state/links``,
re-plans around it (a change of kind ``reaction`` by ``failover`` with the overlay), and after the
hold-down brings the full plan back; ``/v1/events`` streams all of it. The pure parts (the view, the
damping, the overlay) are unit-tested in ``test_operations.py``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.apps import Api, running_api
from tests.component.test_workflow_api import DOC, Fleet, fleet  # noqa: F401 - the fixture

LINK = "leaf-0-0:eth3"  # leaf-0-0 eth3 <-> spine-0-0 eth1
ENDS = (("leaf-0-0", "eth3"), ("spine-0-0", "eth1"))
POLICY = {"kind": "failure_reaction", "detect_s": 0.3, "hold_down_s": 2.0}


def fail(agents: Fleet, ends: tuple[tuple[str, str], ...], down: bool = True) -> None:
    for device, port in ends:
        path = agents.base / device / "dry" / "down"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{port}\n" if down else "")


def until(what: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def link_state(api: Api, link: str) -> str:
    return str(next(x for x in api("GET", "/v1/state/links", role="viewer").json()["links"] if x["id"] == link)["oper"])


def reactions(api: Api) -> list[dict[str, Any]]:
    items = api("GET", "/v1/changes?limit=100", role="viewer").json()["items"]
    return [c for c in items if c["kind"] == "reaction"]


def events(api: Api) -> list[tuple[str, dict[str, Any]]]:
    """Every event kept, read from the SSE stream until it goes quiet."""
    out: list[tuple[str, dict[str, Any]]] = []
    with api.client.stream("GET", "/v1/events", headers={"Authorization": f"Bearer {api.tokens['viewer']}",
                                                          "Last-Event-ID": "0"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind is not None:
                out.append((kind, json.loads(line.removeprefix("data: "))))
                if kind == "link.up":
                    break
    return out


def test_a_failed_link_is_seen_replanned_around_and_brought_back(tmp_path: Path,
                                                                 fleet: Fleet) -> None:  # noqa: F811 - the fixture
    doc = copy.deepcopy(DOC)
    doc["policies"] = [*doc.get("policies", []), POLICY]
    settings = {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        api.initial()
        until(lambda: all(x["oper"] == "up" for x in api("GET", "/v1/state/links", role="viewer").json()["links"]))
        devices = api("GET", "/v1/state/devices", role="viewer").json()["devices"]
        assert {d["agent"] for d in devices} == {"reachable"} and len(devices) == 12
        full = api("GET", "/v1/plans/active", role="viewer").json()
        assert full["overlay"] == {"links": [], "devices": []}

        fail(fleet, ENDS)
        until(lambda: link_state(api, LINK) == "down", timeout=5)
        first = until(lambda: [c for c in reactions(api) if c["state"] == "committed"])[0]
        assert first["author"] == "failover" and first["overlay"] == {"links": [LINK], "devices": []}
        assert first["trigger"]["event"] == "failure" and first["trigger"]["links"] == [LINK]
        assert first["trigger"]["verdict"] in ("safe", "no_worse")
        status = api("GET", "/v1/status", role="viewer").json()
        assert status["active_revision"] == 1 and status["head_revision"] == 1  # the intent is untouched
        assert api("GET", "/v1/revisions", role="viewer").json()["total"] == 1
        active = api("GET", "/v1/plans/active", role="viewer").json()
        assert active["overlay"] == {"links": [LINK], "devices": []}
        leaf = active["devices"]["leaf-0-0"]
        assert all(h["port"] != "eth3" for g in leaf["groups"].values() for h in g)  # nothing over the dead link
        conf = (fleet.base / "leaf-0-0" / "dry" / "frr.conf").read_text()  # pushed to the switch: drained in place
        assert "interface eth3" in conf and "route-map LOOM-DENY in" in conf

        # an operator's change while the overlay is in force commits around the failed link too
        more = copy.deepcopy(doc)
        more["demands"][0]["gbps"] = 12.0
        op = api.change(intent=more, base=1)
        api.review(op["id"])
        done = api.commit(op["id"])
        assert done["state"] == "committed" and done["overlay"] == {"links": [LINK], "devices": []}
        assert api("GET", "/v1/plans/active", role="viewer").json()["overlay"]["links"] == [LINK]

        fail(fleet, ENDS, down=False)
        until(lambda: link_state(api, LINK) == "up", timeout=5)
        back = until(lambda: [c for c in reactions(api) if c["state"] == "committed" and c["id"] != first["id"]],
                     timeout=30)[0]
        assert back["trigger"]["event"] == "recovery" and "overlay" not in back
        assert api("GET", "/v1/plans/active", role="viewer").json()["overlay"] == {"links": [], "devices": []}
        assert "LOOM-DENY" not in (fleet.base / "leaf-0-0" / "dry" / "frr.conf").read_text()
        flaps = next(x for x in api("GET", "/v1/state/links", role="viewer").json()["links"] if x["id"] == LINK)
        assert flaps["flaps_1h"] == 1

        seen = events(api)
        kinds = [k for k, _ in seen]
        assert kinds.index("link.down") < kinds.index("reaction.committed") < kinds.index("link.up")
        assert next(d for k, d in seen if k == "link.down")["link"] == LINK
        assert any(k == "change.state" and d["change"] == first["id"] for k, d in seen)
        audit = api("GET", "/v1/audit?limit=200", role="viewer").json()["items"]
        assert {"link.down", "link.up"} <= {a["action"] for a in audit}


def test_reaction_plans_are_precomputed_at_commit_and_looked_up_on_failure(
        tmp_path: Path, fleet: Fleet) -> None:  # noqa: F811 - the fixture
    """Issue 30.3: after the commit the leader plans every scenario of the failure-tolerance scope
    (``all_single``: each link and each device) and judges it; ``/v1/state/reactions`` counts them; a
    link failure then commits the plan it looked up (``trigger.plan: precomputed``), the very plan the
    table holds, while the plan of a failure outside the scope would be solved."""
    doc = copy.deepcopy(DOC)
    doc["policies"] = [*doc.get("policies", []), POLICY, {"kind": "failure_tolerance", "scope": "all_single",
                                                          "max_utilization": 1.0}]
    settings = {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        api.initial()
        table = until(lambda: (t := api("GET", "/v1/state/reactions", role="viewer").json())["state"] == "ready"
                      and t, timeout=120)
        assert table["revision"] == 1
        assert table["scenarios"] == len(doc["links"]) + len(doc["devices"])
        assert table["ready"] + table["failed"] == table["scenarios"] and table["ready"] >= len(doc["links"])
        # issue 30.5: a review of the active revision's intent (the same revision) reads its reactions from the
        # table: every scenario's reaction precomputed, the delay without planning time
        same = api.review(api.change(intent=doc, base=1)["id"])
        assert same["proposed_revision"] == 1
        rc = same["reaction"]
        assert rc["counts"]["scenarios"] == table["scenarios"]
        assert rc["counts"].get("precomputed", 0) == table["ready"] and not rc["counts"].get("not_planned")
        row = next(r for r in rc["scenarios"] if r["scenario"] == f"link:{LINK}")
        assert row["plan"] == "precomputed" and row["verdict"] in ("safe", "no_worse")
        assert row["window_s"] == pytest.approx(POLICY["detect_s"] + rc["push_s"], abs=1e-3)
        until(lambda: all(x["oper"] == "up" for x in api("GET", "/v1/state/links", role="viewer").json()["links"]))

        fail(fleet, ENDS)
        try:
            first = until(lambda: [c for c in reactions(api) if c["state"] == "committed"])[0]
        finally:
            fail(fleet, ENDS, down=False)
        assert first["overlay"] == {"links": [LINK], "devices": []}
        assert first["trigger"]["plan"] == "precomputed" and first["trigger"]["verdict"] in ("safe", "no_worse")
        from controller.operations.overlay import Overlay
        from controller.operations.table import TABLE
        from controller.store import repo
        from controller.store.db import Database

        db = Database(f"sqlite:///{tmp_path / 'loom.db'}")
        with db.session() as s:
            identity = repo.revision_identity(1, session=s)
        db.dispose()
        entry = TABLE.get(identity, Overlay(frozenset({LINK})))
        assert entry is not None and entry.judgement is not None
        active = api("GET", "/v1/plans/active", role="viewer").json()
        assert active["summary"]["max_utilization"] == entry.plan.summary.max_utilization
        assert first["trigger"]["verdict"] == entry.judgement.verdict
        until(lambda: [c for c in reactions(api) if c["state"] == "committed" and c["id"] != first["id"]])


def test_drift_sees_an_edit_behind_loom_and_a_link_down_the_plan_expects_up(
        tmp_path: Path, fleet: Fleet) -> None:  # noqa: F811 - the fixture
    """Issue 30.6: the hash an agent reports is that of what its FRR runs, read back, so a configuration
    edited behind Loom is drift; and a link down that no reaction left out is drift on both its ends."""
    doc = copy.deepcopy(DOC)
    doc["policies"] = [*doc.get("policies", []), {"kind": "failure_reaction", "enabled": False}]
    settings = {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5}
    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        api.initial()
        until(lambda: all(x["oper"] == "up" for x in api("GET", "/v1/state/links", role="viewer").json()["links"]))
        clean = api("GET", "/v1/drift?refresh=true", role="viewer").json()
        assert {r["status"] for r in clean["devices"].values()} == {"ok"}, clean

        conf = fleet.base / "tor-1-1" / "dry" / "frr.conf"
        conf.write_text(conf.read_text() + "ip route 192.0.2.0/24 Null0\n")  # an operator's edit behind Loom
        fail(fleet, ENDS)
        until(lambda: link_state(api, LINK) == "down", timeout=5)
        time.sleep(1.0)  # the reaction is off: nothing is committed
        assert reactions(api) == []
        report = api("GET", "/v1/drift?refresh=true", role="viewer").json()["devices"]
        assert report["tor-1-1"]["status"] == "drift"
        assert any("running config" in d for d in report["tor-1-1"]["details"])
        for device in ("leaf-0-0", "spine-0-0"):
            assert report[device]["status"] == "drift"
            assert any(f"link {LINK} is down" in d for d in report[device]["details"]), report[device]
        assert report["tor-0-0"]["status"] == "ok"


@pytest.mark.parametrize("routing", ["isis", "ospf"])
def test_dry_agents_model_link_state_adjacencies_seen_through_the_api(
        tmp_path: Path, fleet: Fleet, routing: str) -> None:  # noqa: F811 - the fixture
    """The same twelve dry agents under ``routing: isis`` (``ospf``): each serves an IS-IS (OSPF) adjacency per
    fabric port over gNMI (up while its port is: ``UP``, ``FULL``), the view counts them as the devices' sessions
    and lists them (``adjacencies``, ``ospf_adjacencies``), and a failed link takes the adjacency at both its
    ends down and back (no reaction here: it would drain the link)."""
    field, up = ("adjacencies", "UP") if routing == "isis" else ("ospf_adjacencies", "FULL")
    doc = copy.deepcopy(DOC)
    doc["routing"] = routing
    doc["policies"] = [p for p in doc.get("policies", []) if p.get("kind") != "wcmp"] + [
        {"kind": "wcmp", "enabled": True, "realization": "fib"}, {"kind": "failure_reaction", "enabled": False}]
    ports: dict[str, set[str]] = {}
    for ln in doc["links"]:
        ports.setdefault(ln["a"], set()).add(ln["a_port"])
        ports.setdefault(ln["b"], set()).add(ln["b_port"])
    settings = {"agents": json.dumps(fleet.endpoints()), "drift_interval": 0, "verify_timeout": 5}

    def adjacencies() -> dict[tuple[str, str], tuple[str, str]]:
        devices = api("GET", "/v1/state/devices", role="viewer").json()["devices"]
        return {(d["name"], a["port"]): (a["state"], a["neighbor"]) for d in devices for a in d[field]}

    with running_api(f"sqlite:///{tmp_path / 'loom.db'}", intent=doc, **settings) as api:
        api.initial()
        every = {(d, p) for d, ps in ports.items() for p in ps}
        until(lambda: {k: s for k, (s, _) in adjacencies().items()} == dict.fromkeys(every, up))
        peers = {(ln["a"], ln["a_port"]): ln["b"] for ln in doc["links"]} | {
            (ln["b"], ln["b_port"]): ln["a"] for ln in doc["links"]}
        assert {k: n for k, (_, n) in adjacencies().items()} == peers  # a dry agent names its neighbor by hostname
        devices = {d["name"]: d for d in api("GET", "/v1/state/devices", role="viewer").json()["devices"]}
        assert all(d["sessions"] == d["sessions_up"] == len(ports[n]) for n, d in devices.items()), devices

        fail(fleet, ENDS)
        until(lambda: {k for k, (s, _) in adjacencies().items() if s != up} == set(ENDS), timeout=5)
        leaf = next(d for d in api("GET", "/v1/state/devices", role="viewer").json()["devices"]
                    if d["name"] == "leaf-0-0")
        assert (leaf["sessions_up"], leaf["sessions"]) == (len(ports["leaf-0-0"]) - 1, len(ports["leaf-0-0"]))
        fail(fleet, ENDS, down=False)
        until(lambda: {s for s, _ in adjacencies().values()} == {up}, timeout=5)
