"""``loom apply``, ``loom changes``, ``loom rollback`` and ``loom drift`` against a real ``loom serve``
(a subprocess on loopback, no devices attached): output for scripts (``--json``), plain progress
lines when not on a terminal, and exit codes (0 done, 1 refused or unsafe, 2 bad input)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from controller.client import Client
from controller.store.db import Database
from tests.component.test_workflow_api import DOC, workflow_server
from tests.serving import LOOM, LoomServer

REPO = Path(__file__).resolve().parents[2]
TOKEN = "cli-" + "Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoomServer]:
    tmp = tmp_path_factory.mktemp("cli")
    db = Database(f"sqlite:///{tmp / 'loom.db'}")
    db.migrate()
    db.dispose()
    s = workflow_server(tmp, db.url, {}, TOKEN)
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(server: LoomServer) -> Iterator[Client]:
    with server.client() as client:
        yield client


def loom(server: LoomServer, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LOOM_TOKEN", "LOOM_SERVER")}
    if token is not None:
        env["LOOM_TOKEN"] = token
    return subprocess.run([*LOOM, *args, "--server", server.url], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


def write(tmp: Path, name: str, doc: dict) -> Path:  # type: ignore[type-arg]
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_apply_dry_run_then_commit_then_rollback(server: LoomServer, api: Client, tmp_path: Path) -> None:
    intent = write(tmp_path, "intent.yaml", DOC)
    dry = loom(server, "apply", str(intent), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    review = json.loads(dry.stdout)
    assert review["verdict"] == "safe" and review["active_revision"] is None and review["devices_attached"] is False
    assert set(review["config_diff"]) == {d["name"] for d in DOC["devices"]}  # rendered locally
    done = loom(server, "apply", str(intent))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SAFE" in done.stdout and "committed" in done.stdout and "no devices attached" in done.stdout
    drained = json.loads(json.dumps(DOC))
    drained["policies"].append({"kind": "drain", "target": "spine-1-1"})
    out = loom(server, "apply", str(write(tmp_path, "drained.yaml", drained)), "--json", "-m", "drain spine-1-1")
    assert out.returncode == 0 and json.loads(out.stdout)["state"] == "committed"
    listed = json.loads(loom(server, "changes", "list", "--json").stdout)
    assert [c["state"] for c in listed["items"]][:2] == ["committed", "committed"]
    show = loom(server, "changes", "show", str(listed["items"][0]["id"]))
    assert show.returncode == 0 and "drain spine-1-1" in show.stdout and "committing" in show.stdout
    # a dry run shows the update schedule: stages, devices, worst utilization (and in --json)
    both = json.loads(json.dumps(drained))
    both["policies"].append({"kind": "drain", "target": "spine-0-0"})
    shown = loom(server, "apply", str(write(tmp_path, "both.yaml", both)), "--dry-run")
    assert shown.returncode == 0 and "update schedule: 1 stage(s), 0 intermediate plan(s)" in shown.stdout
    assert "spine-0-0" in shown.stdout and "states)" in shown.stdout
    as_json = json.loads(loom(server, "apply", str(tmp_path / "both.yaml"), "--dry-run", "--json").stdout)
    assert "spine-0-0" in as_json["schedule"]["stages"][0]["devices"] and as_json["schedule"]["safe"]
    back = loom(server, "rollback", "1", "--json")
    assert back.returncode == 0 and json.loads(back.stdout)["kind"] == "rollback"
    assert api.status().active_revision == 1
    drift = loom(server, "drift", "--json")
    assert drift.returncode == 0 and json.loads(drift.stdout)["note"] == "no devices attached"


def test_unsafe_is_refused_and_forced_only_with_a_reason(server: LoomServer, tmp_path: Path) -> None:
    tight = json.loads(json.dumps(DOC))
    tight["policies"].append({"kind": "utilization_limit", "max": 0.01})
    path = write(tmp_path, "tight.yaml", tight)
    dry = loom(server, "apply", str(path), "--dry-run")
    assert dry.returncode == 1 and "UNSAFE" in dry.stdout and "baseline" in dry.stdout
    refused = loom(server, "apply", str(path))
    assert refused.returncode == 1 and "409" in refused.stderr
    cid = json.loads(loom(server, "changes", "list", "--json", "--limit", "1").stdout)["items"][0]["id"]
    assert loom(server, "changes", "commit", str(cid), "--force").returncode == 2  # a reason is required
    forced = loom(server, "changes", "commit", str(cid), "--force", "--reason", "lab test", "--json")
    assert forced.returncode == 0 and json.loads(forced.stdout)["force_reason"] == "lab test"


def test_bad_input_and_missing_token(server: LoomServer, tmp_path: Path) -> None:
    bad = json.loads(json.dumps(DOC))
    bad["devices"][0]["asn"] = "not a number"
    out = loom(server, "apply", str(write(tmp_path, "bad.yaml", bad)), "--json")
    assert out.returncode == 2 and json.loads(out.stdout)["errors"][0]["loc"].startswith("devices[0]")
    assert loom(server, "changes", "list", token=None).returncode == 2
    assert loom(server, "changes", "show", "9999").returncode == 1
    nowhere = subprocess.run([*LOOM, "changes", "list", "--server", "http://127.0.0.1:9"], capture_output=True,
                             text=True, env={**os.environ, "LOOM_TOKEN": TOKEN}, cwd=REPO, timeout=60)
    assert nowhere.returncode == 1 and "cannot reach" in nowhere.stderr


def test_drain_and_undrain_are_reviewed_changes(server: LoomServer, api: Client, tmp_path: Path) -> None:
    assert loom(server, "apply", str(write(tmp_path, "intent.yaml", DOC)), "--json").returncode == 0
    reviewed = loom(server, "drain", "spine-1-1", "--json")
    assert reviewed.returncode == 0, reviewed.stdout + reviewed.stderr
    doc = json.loads(reviewed.stdout)
    assert doc["verdict"] == "safe" and any(x["after"] == 0 for x in doc["links"])
    assert api.change(doc["change"]).state == "reviewed"  # not committed
    done = loom(server, "drain", "spine-1-1", "--commit", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["state"] == "committed", done.stdout + done.stderr
    policies = api.raw.intent(api.status().active_revision)["policies"]
    assert {"kind": "drain", "target": "spine-1-1"} in policies
    again = loom(server, "drain", "spine-1-1", "--json")
    assert again.returncode == 2 and json.loads(again.stdout)["errors"][0]["msg"] == "already drained"
    undone = loom(server, "undrain", "spine-1-1", "--commit")
    assert undone.returncode == 0 and "committed" in undone.stdout, undone.stdout + undone.stderr
    policies = api.raw.intent(api.status().active_revision)["policies"]
    assert not any(p.get("kind") == "drain" for p in policies)
    assert loom(server, "undrain", "spine-1-1").returncode == 2
