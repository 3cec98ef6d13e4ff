"""``loom validate``, ``loom token ...`` and ``loom serve``: exit codes, messages
for people, ``--json`` for scripts; and ``loom serve --example`` as a real
process answering ``GET /v1/intent`` with the token it printed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from controller import service
from controller.cli import COMMANDS, _register, app, modules_for
from controller.cli.core import parse_duration
from controller.model.intent import load_intent
from tests.serving import free_port, wait_ready

_register()
runner = CliRunner()
EXAMPLE = service.EXAMPLE_INTENT
LOOM = shutil.which("loom", path=str(Path(sys.executable).parent)) or ""


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env=env)


def test_the_command_table_names_the_module_that_registers_each_command() -> None:
    registered = {c.name or c.callback.__name__: c.callback.__module__ for c in app.registered_commands
                  if c.callback is not None}
    for g in app.registered_groups:
        first = g.typer_instance.registered_commands[0].callback if g.typer_instance else None
        registered[str(g.name)] = first.__module__ if first else "?"
    assert {k: f"controller.cli.{m}" for k, m in COMMANDS.items()} == registered
    assert modules_for(["--help"]) == modules_for([]) == modules_for(["nope"]) and len(modules_for([])) > 1
    assert modules_for(["changes", "list", "--json"]) == ("changes",)


@pytest.mark.parametrize(("argv", "module", "absent"), [
    (["changes", "list", "--help"], "controller.cli.changes", "safety.kernels"),
    (["agent", "--help"], "controller.cli.agent", "controller.cli.check"),
    (["check", "--help"], "controller.cli.check", "controller.cli.lab"),  # a lone command stays a subcommand
])
def test_a_command_line_imports_only_the_module_of_its_command(argv: list[str], module: str, absent: str) -> None:
    code = ("import sys; from controller.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    print(e.code, " + repr(module) + " in sys.modules, " + repr(absent) + " in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines()[-1] == "0 True False", out.stdout + out.stderr
    assert f"Usage: -c {argv[0]}" in out.stdout  # (python -c names the program "-c")


def test_validate_ok_and_json() -> None:
    r = run("validate", str(EXAMPLE))
    assert r.exit_code == 0 and "valid intent 'dc1'" in r.output and "12 devices" in r.output
    j = run("validate", str(EXAMPLE), "--json")
    assert j.exit_code == 0
    body = json.loads(j.output)
    assert body["valid"] and body["hash"] == load_intent(EXAMPLE).content_hash and body["links"] == 16


def test_validate_lists_every_located_error(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["links"][7]["b"] = "leaf-9-9"
    doc["devices"][1]["asn"] = -5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    r = run("validate", str(bad))
    assert r.exit_code == 2
    assert "links[7].b: unknown device 'leaf-9-9'" in r.output and "devices[1].asn" in r.output
    assert "Traceback" not in r.output
    j = run("validate", str(bad), "--json")
    assert j.exit_code == 2
    assert {"links[7].b", "devices[1].asn"} <= {e["loc"] for e in json.loads(j.output)["errors"]}
    missing = run("validate", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_tokens_against_the_store(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    made = run("token", "create", "--name", "ci", "--role", "operator", "--expires-in", "30d", "--db", db, "--json")
    assert made.exit_code == 0, made.output
    token = json.loads(made.output)
    assert token["role"] == "operator" and token["token"].startswith(f"loom_{token['id']}_") and token["expires_at"]
    listed = run("token", "list", "--db", db, "--json")
    assert [t["id"] for t in json.loads(listed.output)] == [token["id"]] and "token" not in listed.output.replace(
        '"token"', "")
    people = run("token", "list", "--db", db)
    assert token["id"] in people.output and "operator" in people.output and token["token"] not in people.output
    revoked = run("token", "revoke", token["id"], "--db", db)
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    assert json.loads(run("token", "list", "--db", db, "--json").output)[0]["active"] is False
    assert run("token", "revoke", "nope", "--db", db).exit_code == 2
    first = run("token", "bootstrap", "--db", db, "--json")
    assert first.exit_code == 0 and json.loads(first.output)["role"] == "admin"
    again = run("token", "bootstrap", "--db", db)
    assert again.exit_code == 1 and "exists already" in again.output
    bad_role = run("token", "create", "--name", "x", "--role", "root", "--db", db)
    assert bad_role.exit_code == 2 and "unknown role" in bad_role.output
    bad_ttl = run("token", "create", "--name", "x", "--expires-in", "soon", "--db", db)
    assert bad_ttl.exit_code == 2 and "--expires-in" in bad_ttl.output


def test_parse_duration() -> None:
    assert parse_duration("90").total_seconds() == 90
    assert parse_duration("12h").total_seconds() == 12 * 3600
    assert parse_duration("2w").days == 14
    for bad in ("", "0", "5y", "-1h"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_unreachable_store_is_a_message(tmp_path: Path) -> None:
    r = run("token", "list", "--db", f"postgresql://nobody@/nodb?host={tmp_path}")
    assert r.exit_code == 1 and "cannot open the store" in r.output and "Traceback" not in r.output


def test_short_admin_token_is_refused(tmp_path: Path) -> None:
    r = run("serve", "--db", str(tmp_path / "x.db"), env={"LOOM_ADMIN_TOKEN": "too-short"})
    assert r.exit_code == 2 and "LOOM_ADMIN_TOKEN" in r.output and "at least 32" in r.output


@pytest.mark.component
@pytest.mark.skipif(not LOOM, reason="the loom script is not installed in this virtualenv")
def test_serve_example_answers_with_the_printed_token(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    log = (tmp_path / "serve.log").open("w")  # uvicorn's log; a pipe nobody reads could fill and block it
    proc = subprocess.Popen([LOOM, "serve", "--example", "--db", str(tmp_path / "serve.db"), "--host", "127.0.0.1",
                             "--port", str(port), "--json"], stdout=subprocess.PIPE, stderr=log,
                            text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        info = json.loads(_read_json_object(proc))
        assert info["example"] == "loaded as revision 1" and info["admin_token"].startswith("loom_")
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, proc, tmp_path / "serve.log", timeout=60)
        auth = {"Authorization": f"Bearer {info['admin_token']}"}
        r = httpx.get(f"{base}/v1/intent", headers=auth)
        assert r.status_code == 200 and r.json() == load_intent(EXAMPLE).to_document()
        assert httpx.get(f"{base}/docs").status_code == 200
        bad = {**r.json(), "links": [*r.json()["links"], {"a": "tor-0-0", "a_port": "eth7", "b": "nowhere",
                                                          "b_port": "eth1"}]}
        put = httpx.put(f"{base}/v1/intent", headers=auth, json=bad)
        assert put.status_code == 422 and put.json()["errors"][0]["loc"] == "links[16].b"
        assert httpx.get(f"{base}/v1/revisions", headers=auth).json()["total"] == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def _read_json_object(proc: subprocess.Popen[str]) -> str:
    """The first JSON object ``loom serve --json`` prints (it spans lines)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("loom serve exited before printing its JSON (see serve.log)")
        lines.append(line)
        if line.startswith("}"):
            return "".join(lines)
    raise AssertionError("no JSON from loom serve")
