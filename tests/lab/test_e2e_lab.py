"""End to end: a real ``loom serve`` driving a real FRR lab (clos3-small) through the change workflow.

The lab is clos3-small with 25 Gb/s leaf-spine links and a utilization limit of
0.35 (so one drained spine is safe and a second one in the same plane is not),
brought up in network namespaces under its own name; ``loom serve --lab``
starts a device agent in every node. The steps run in order, as an operator
would: ``loom apply`` the lab intent; drain a spine with a JSON Patch, review
(safe), commit, and the kernels route around it; drain a second spine: the
review is unsafe and the commit refused; change a weight by hand in a node's
namespace: drift is reported, then repaired; kill the controller with SIGKILL
in the middle of a commit and restart it: every device ends on one revision;
roll back to the first revision. Everything is torn down in finalizers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.model.intent import validate_intent
from labs import runner
from tests import dualstack
from tests.labkit import ServedLab, served_lab

REPO = Path(__file__).resolve().parents[2]
LAB = "wfe2e"
TOKEN = "e2e-" + "k3Jd8fQ2mZx7Lp4Rt9Wv6Yb1Nc5Hs0Ga"


def lab_intent() -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "labs" / "clos3-small" / "intent.yaml").read_text())
    doc["name"] = LAB
    for link in doc["links"]:
        if link["b"].startswith("spine"):
            link["capacity_gbps"] = 25.0
    doc["policies"] = [{"kind": "utilization_limit", "max": 0.35}]
    return doc


class Controller(ServedLab):
    """``loom serve --lab`` on the e2e lab, with a client for changes and the CLI."""

    def __init__(self, base: Path):
        super().__init__(base, LAB, lab_intent(), TOKEN,
                         env={"LOOM_CONFIRM_WITHIN": "90", "LOOM_VERIFY_TIMEOUT": "45"})

    def change(self, patch: list[Any]) -> dict[str, Any]:
        return self.server.change(patch)

    def review(self, cid: int) -> dict[str, Any]:
        return self.server.review(cid)


@pytest.fixture(scope="module")
def ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    with served_lab(Controller(tmp_path_factory.mktemp("wfe2e"))) as c:
        yield c


def kernel(node: str) -> dict[str, dict[str, int]]:
    """prefix -> port -> weight of what the node's kernel forwards on (lowest metric)."""
    return dualstack.kernel(LAB, node)


def ports_toward(spine: str) -> dict[str, str]:
    """device -> its port facing ``spine``."""
    intent = validate_intent(lab_intent())
    out = {}
    for link in intent.links:
        if link.b == spine:
            out[link.a] = link.a_port
        elif link.a == spine:
            out[link.b] = link.b_port
    return out


def eventually(check: Any, timeout: float = 30, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(interval)


def drift(ctl: Controller) -> dict[str, Any]:
    r = ctl("GET", "/v1/drift?refresh=true")
    assert r.status_code == 200, r.text
    return dict(r.json())


def all_ok(ctl: Controller) -> bool:
    return {d["status"] for d in drift(ctl)["devices"].values()} == {"ok"}


def test_apply_the_lab_intent(ctl: Controller) -> None:
    done = ctl.cli("apply", str(ctl.base / "intent.yaml"), "--json", "-m", "the lab's intent")
    assert done.returncode == 0, done.stdout + done.stderr
    ch = json.loads(done.stdout)
    assert ch["state"] == "committed" and ch["proposed_revision"] == 1
    assert set(ch["progress"]["devices"]) == {d["name"] for d in lab_intent()["devices"]}
    assert ctl("GET", "/v1/status").json()["active_revision"] == 1
    assert eventually(lambda: all_ok(ctl))
    state = ctl("GET", "/v1/devices/tor-0-0/state").json()
    assert state["observed"] and "10.1.0.0/24" in state["routes"]
    assert all(s["state"] == "Established" for s in state["sessions"])


def test_drain_a_spine_and_the_kernels_route_around_it(ctl: Controller) -> None:
    toward = ports_toward("spine-0-0")
    before = kernel("leaf-0-0")
    assert toward["leaf-0-0"] in before["10.1.0.0/24"]  # spine-0-0 carries cross-pod traffic now
    ch = ctl.change([{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-0"}}])
    rv = ctl.review(ch["id"])
    assert rv["verdict"] == "safe" and rv["active_revision"] == 1
    assert "spine-0-0" in rv["config_diff"] and "route-map" in rv["config_diff"]["spine-0-0"]
    assert ctl("POST", f"/v1/changes/{ch['id']}/commit", json={}).status_code == 202
    done = ctl.wait(ch["id"])
    assert done["state"] == "committed", done

    def avoided() -> bool:
        for leaf, port in toward.items():
            for prefix, weights in kernel(leaf).items():
                if prefix.startswith("10.") and port in weights:
                    return False
        return True
    assert eventually(avoided)
    assert set(kernel("leaf-0-0")["10.1.0.0/24"]) == {ports_toward("spine-0-1")["leaf-0-0"]}
    assert all_ok(ctl)


def test_a_second_drain_over_the_limit_is_refused(ctl: Controller) -> None:
    active = ctl("GET", "/v1/status").json()["active_revision"]
    ch = ctl.change([{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": "spine-0-1"}}])
    rv = ctl.review(ch["id"])
    assert rv["verdict"] == "unsafe"
    assert any(f["scenario"] == "baseline" and f["invariant"] == "utilization" for f in rv["safety"]["failing"])
    r = ctl("POST", f"/v1/changes/{ch['id']}/commit", json={})
    assert r.status_code == 409 and r.json()["failing"]
    assert ctl("GET", "/v1/status").json()["active_revision"] == active
    assert ports_toward("spine-0-1")["leaf-0-0"] in kernel("leaf-0-0")["10.1.0.0/24"]  # still in use
    refused = ctl.cli("changes", "commit", str(ch["id"]))
    assert refused.returncode == 1 and "baseline" in refused.stdout + refused.stderr


def test_a_weight_changed_by_hand_is_drift_and_is_repaired(ctl: Controller) -> None:
    plan_weights = kernel("tor-0-0")["10.1.0.0/24"]
    assert len(plan_weights) == 2
    route = runner.node_routes(LAB, "tor-0-0", dst="10.1.0.0/24")[0]
    hops = [["nexthop", "via", h["gateway"], "dev", h["dev"], "weight", str(w)]
            for h, w in zip(route["nexthops"], (90, 10), strict=True)]
    runner.node_exec(LAB, "tor-0-0", ["ip", "route", "replace", "10.1.0.0/24", "proto", "bgp", "metric",
                                      str(route.get("metric", 20)), *[x for h in hops for x in h]])
    assert sorted(kernel("tor-0-0")["10.1.0.0/24"].values()) == [10, 90]
    report = drift(ctl)
    assert report["devices"]["tor-0-0"]["status"] == "drift"
    assert any("10.1.0.0/24" in d for d in report["devices"]["tor-0-0"]["details"])
    out = ctl.cli("drift", "--repair", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["repair"]["state"] == "committed"
    assert kernel("tor-0-0")["10.1.0.0/24"] == plan_weights
    assert all_ok(ctl)


def test_controller_killed_mid_commit_leaves_every_device_on_one_revision(ctl: Controller) -> None:
    before = ctl("GET", "/v1/status").json()["active_revision"]
    ch = ctl.change([{"op": "remove", "path": "/policies/1"}])  # undrain spine-0-0
    assert ctl.review(ch["id"])["verdict"] == "safe"
    assert ctl("POST", f"/v1/changes/{ch['id']}/commit", json={}).status_code == 202
    deadline = time.monotonic() + 60
    while True:
        got = ctl("GET", f"/v1/changes/{ch['id']}").json()
        # past prepare: devices are committing, or verifying what they committed (the progress
        # document is saved at most every 0.2 s, so a short commit step can go unseen)
        if (got.get("progress") or {}).get("step") in ("commit", "verify") or got["state"] != "committing":
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert got["state"] == "committing", got
    ctl.kill9()
    ctl.start()
    done = ctl("GET", f"/v1/changes/{ch['id']}").json()
    assert done["state"] in ("committed", "rolled_back"), done
    assert "recovered after a controller restart" in done["transitions"][-1]["reason"]
    status = ctl("GET", "/v1/status").json()
    assert status["committing_change"] is None
    assert status["active_revision"] == (ch["proposed_revision"] if done["state"] == "committed" else before)
    assert eventually(lambda: all_ok(ctl), timeout=45)  # every device runs the active revision, kernels too
    states = {n: ctl("GET", f"/v1/devices/{n}/state").json() for n in ("tor-0-0", "spine-0-0", "leaf-1-1")}
    assert all(not s["pending_change"] for s in states.values())


def test_roll_back_to_the_first_revision(ctl: Controller) -> None:
    out = ctl.cli("rollback", "1", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["state"] == "committed"
    assert ctl("GET", "/v1/status").json()["active_revision"] == 1
    assert eventually(lambda: ports_toward("spine-0-0")["leaf-0-0"] in kernel("leaf-0-0").get("10.1.0.0/24", {}))
    assert all_ok(ctl)
    listed = ctl.cli("changes", "list", "--json")
    kinds = [c["kind"] for c in json.loads(listed.stdout)["items"]]
    assert "rollback" in kinds and "repair" in kinds


def test_a_failed_link_is_replanned_around_and_the_full_plan_returns(ctl: Controller) -> None:
    """Issue 30 under BGP link-bandwidth: a leaf-spine link goes down with nobody touching Loom. The leader
    sees it over gNMI, commits the plan without it (a reaction by failover) and every kernel runs the
    re-planned weights (drift holds them to the plan in force); when the link comes back, the full plan
    returns after the hold-down."""
    ch = ctl.change([{"op": "add", "path": "/policies/-",
                      "value": {"kind": "failure_reaction", "detect_s": 0.5, "hold_down_s": 3}}])
    assert ctl.review(ch["id"])["verdict"] == "safe"
    assert ctl("POST", f"/v1/changes/{ch['id']}/commit", json={}).status_code == 202
    assert ctl.wait(ch["id"])["state"] == "committed"
    assert eventually(lambda: {x["oper"] for x in ctl("GET", "/v1/state/links").json()["links"]} == {"up"})
    port = ports_toward("spine-0-0")["leaf-0-0"]
    link = f"leaf-0-0:{port}"

    def reactions() -> list[dict[str, Any]]:
        items = ctl("GET", "/v1/changes?limit=50").json()["items"]
        return [c for c in items if c["kind"] == "reaction" and c["state"] == "committed"]

    t0 = time.monotonic()
    runner.node_exec(LAB, "leaf-0-0", ["ip", "link", "set", port, "down"])
    first = eventually(reactions, timeout=30, interval=0.1)
    assert first and first[0]["author"] == "failover" and first[0]["overlay"] == {"links": [link], "devices": []}
    assert eventually(lambda: all_ok(ctl), timeout=45)  # every kernel runs the plan without the link
    reacted = time.monotonic() - t0
    assert port not in kernel("leaf-0-0")["10.1.0.0/24"]
    assert ctl("GET", "/v1/plans/active").json()["overlay"]["links"] == [link]

    runner.node_exec(LAB, "leaf-0-0", ["ip", "link", "set", port, "up"])
    assert eventually(lambda: next((x["oper"] for x in ctl("GET", "/v1/state/links").json()["links"]
                                    if x["id"] == link), None) == "up", timeout=10)

    def recovery() -> list[dict[str, Any]]:
        items = ctl("GET", "/v1/changes?limit=50").json()["items"]
        return [c for c in items if c["kind"] == "reaction" and (c.get("trigger") or {}).get("event") == "recovery"]
    # after the hold-down the full plan is pushed again (whether FRR 8.4 then puts the flapped veth back into
    # its nexthop group is up to zebra: it keeps the old group, see tests/faults.py, and the commit's read-back
    # says so; the fib square's test holds the full plan's return in the kernels)
    back = eventually(recovery, timeout=30, interval=0.2)
    assert back and back[0]["author"] == "failover" and back[0]["trigger"]["links"] == [link]
    print(f"link down -> every kernel on the re-planned weights: {reacted:.2f} s")
