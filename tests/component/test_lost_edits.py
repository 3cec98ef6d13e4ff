"""No operator's edit is lost to a dry run, a drain or a change on an older base (issue 31.1).

Against a real ``loom serve --example`` (SQLite, no devices) and the real CLI: an operator edits
the head (a link's capacity, with ``If-Match``); then a dry run of a whole document, a drain made
on the active revision, or a change on a stale base follows. The head must keep the edit: a dry run
does not move it at all, a commit carries only its own edits onto it, and a commit whose edits
collide with the head's is refused (409, located) with nothing written.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.client import Client
from tests.serving import LOOM, LoomServer, example_server, running

REPO = Path(__file__).resolve().parents[2]
TOKEN = "lost-" + "Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc"
LINK = "leaf-0-0:eth3"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LoomServer]:
    with running(example_server(tmp_path, TOKEN)) as s:
        yield s


@pytest.fixture
def api(server: LoomServer) -> Iterator[Client]:
    with server.client() as client:
        yield client


def loom(server: LoomServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "LOOM_SERVER"}, "LOOM_TOKEN": TOKEN}
    return subprocess.run([*LOOM, *args, "--server", server.url], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def head(server: LoomServer) -> tuple[int, dict[str, Any]]:
    r = server("GET", "/v1/intent")
    assert r.status_code == 200
    return int(r.headers["etag"].strip('"')), r.json()


def capacity(doc: dict[str, Any]) -> float:
    return float(next(ln["capacity_gbps"] for ln in doc["links"] if f"{ln['a']}:{ln['a_port']}" == LINK))


def edit_capacity(server: LoomServer, rev: int, gbps: float) -> int:
    r = server("PATCH", f"/v1/links/{LINK}", json={"capacity_gbps": gbps}, headers={"If-Match": f'"{rev}"'})
    assert r.status_code == 200, r.text
    return int(r.headers["etag"].strip('"'))


def with_demand(doc: dict[str, Any], gbps: float) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["demands"][0]["gbps"] = gbps
    return out


def write(tmp: Path, doc: dict[str, Any]) -> Path:
    path = tmp / "intent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def commit(server: LoomServer, change: int) -> dict[str, Any]:
    assert server("POST", f"/v1/changes/{change}/review").status_code == 200
    r = server("POST", f"/v1/changes/{change}/commit", json={})
    assert r.status_code == 202, r.text
    for _ in range(300):
        ch = server("GET", f"/v1/changes/{change}").json()
        if ch["state"] != "committing":
            return dict(ch)
        server("GET", "/v1/status")
    raise AssertionError(f"change {change} still committing")


def test_a_dry_run_never_moves_the_head(server: LoomServer, api: Client, tmp_path: Path) -> None:
    first, doc = head(server)
    edited = edit_capacity(server, first, 40)
    out = loom(server, "apply", str(write(tmp_path, with_demand(doc, 33))), "--dry-run", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    review = json.loads(out.stdout)
    assert api.status().head_revision == edited
    now, current = head(server)
    assert now == edited and capacity(current) == 40 and current["demands"][0]["gbps"] == doc["demands"][0]["gbps"]
    proposed = server("GET", f"/v1/revisions/{review['proposed_revision']}")
    assert proposed.status_code == 200 and proposed.json()["proposal"] is True  # a revision, off the head's line
    planned = server("GET", f"/v1/plans/{review['proposed_revision']}")
    assert planned.status_code == 200


def test_a_drain_on_the_active_revision_keeps_the_heads_edits(server: LoomServer, api: Client,
                                                              tmp_path: Path) -> None:
    first, doc = head(server)
    done = loom(server, "apply", str(write(tmp_path, doc)), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "committed", done.stdout + done.stderr
    assert api.status().active_revision == first
    edit_capacity(server, first, 40)
    drained = loom(server, "drain", "spine-0-0", "--commit", "--json")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    status = api.status()
    _, now = head(server)
    assert capacity(now) == 40 and {"kind": "drain", "target": "spine-0-0"} in now["policies"]
    active = api.raw.intent(status.active_revision)
    assert capacity(active) == 100 and {"kind": "drain", "target": "spine-0-0"} in active["policies"]
    undrained = loom(server, "undrain", "spine-0-0", "--commit", "--json")
    assert undrained.returncode == 0, undrained.stdout + undrained.stderr
    _, now = head(server)
    assert capacity(now) == 40 and all(p["kind"] != "drain" for p in now["policies"])


def test_a_change_on_a_stale_base_keeps_the_heads_edits_or_is_refused(server: LoomServer, api: Client) -> None:
    first, doc = head(server)
    edited = edit_capacity(server, first, 40)
    # another object: created, committed, and the head has both
    other = api.create_change(first, intent=with_demand(doc, 33))
    assert api.status().head_revision == edited  # creating it moved nothing
    assert commit(server, other.id)["state"] == "committed"
    _, now = head(server)
    assert capacity(now) == 40 and now["demands"][0]["gbps"] == 33
    # the same object, differently: the commit is refused, located, and the head keeps its edit
    before, _ = head(server)
    patch = [{"op": "replace", "path": "/links/8/capacity_gbps", "value": 50}]
    clash = api.create_change(first, patch=patch).id
    assert server("POST", f"/v1/changes/{clash}/review").status_code == 200
    r = server("POST", f"/v1/changes/{clash}/commit", json={})
    assert r.status_code == 409 and r.json()["type"].endswith("merge-conflict"), r.text
    assert [e["loc"] for e in r.json()["errors"]] == [f"links[{LINK}]"]
    assert api.change(clash).state == "reviewed"
    after, now = head(server)
    assert after == before and capacity(now) == 40
