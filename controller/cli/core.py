"""``loom serve``, ``loom validate`` and ``loom token``: running the controller,
checking an intent file offline, and managing bearer tokens in the store.

``serve`` migrates the store, optionally loads the example fabric as the first
revision, makes sure an admin token exists (printing it, once, when it creates
one) and runs the API with uvicorn. ``token create|list|revoke|bootstrap`` work
on the store directly (``--db``), for the first admin and for recovery.
Failures are messages for people (exit 2 for bad input, 1 otherwise), never
tracebacks; every command has ``--json``.
"""

from __future__ import annotations

import getpass
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from controller import service
from controller.cli.common import EXIT_FAIL, app, console, die, emit_json, read_intent
from controller.logs import setup_logging
from controller.model.errors import LoomError, SingleReplicaStore
from controller.model.tokens import token_name_problem
from controller.settings import Settings
from controller.store.db import Database
from controller.workflow.cluster import Cluster
from labs import runner
from labs.clab import load_topology

__all__ = ["parse_duration", "serve", "token_app", "validate"]

token_app = typer.Typer(help="Manage bearer tokens in the store (viewer, operator, admin).", no_args_is_help=True)
app.add_typer(token_app, name="token")

DbOption = Annotated[str | None, typer.Option(
    "--db", help="store URL or SQLite file (default: $LOOM_DB_URL or ./loom.db)")]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90``, ``30m``, ``12h``, ``30d``, ``2w`` -> a timedelta (ValueError otherwise)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text)
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"'{text}' is not a duration (like 3600, 30m, 12h, 30d)")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2) or "s"])


def _settings(as_json: bool, **overrides: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        die("invalid settings", as_json=as_json,
            errors=[{"loc": "LOOM_" + str(e["loc"][0]).upper() if e["loc"] else "", "msg": e["msg"]}
                    for e in exc.errors()])


def _open_store(settings: Settings, as_json: bool) -> Database:
    db = Database(settings.db_url, ack_standbys=settings.store_ack_standbys)
    try:
        db.migrate()
    except Exception as exc:  # noqa: BLE001 - any failure to open the store is told, not traced
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        die(f"cannot open the store {db.display_url}: {type(exc).__name__}: {first_line}", code=EXIT_FAIL,
            as_json=as_json)
    return db


def _cli_ctx(message: str = "") -> service.WriteContext:
    """A CLI write; a refused one is audited with the status the API would answer for it."""
    from api.core.problems import status_for  # lazy: FastAPI (about 0.2 s), for token writes and serve only

    return service.WriteContext(actor=service.Actor(f"cli:{getpass.getuser()}", "admin"), method="CLI",
                                path="loom", message=message, reject_status=status_for)


def _token_json(token: Any, secret: str | None = None) -> dict[str, Any]:
    out = {"id": token.id, "name": token.name, "role": token.role, "created_at": token.created_at.isoformat(),
           "created_by": token.created_by,
           "expires_at": token.expires_at.isoformat() if token.expires_at else None,
           "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
           "active": token.active(datetime.now(UTC))}
    if secret is not None:
        out["token"] = secret
    return out


def _attach_lab(settings: Settings, lab: str, info: dict[str, Any], as_json: bool) -> Settings:
    """``--lab``: start the lab's agents that are not running and point the settings at the agents
    file the lab keeps (the server itself never imports the lab harness)."""
    if settings.agents:
        die("--lab and --agents (or LOOM_AGENTS) both name the agents: use one", as_json=as_json)
    try:
        topo = load_topology(lab)
        info["agents_started"] = runner.start_agents(topo)
    except Exception as exc:  # noqa: BLE001 - a lab that is not up is told, not traced
        die(f"agents: {exc}", as_json=as_json)
    return settings.model_copy(update={"agents": str(runner.agents_file(topo.name))})


def _lock(settings: Settings, database: Database, as_json: bool) -> Cluster:
    """The leader lease; on SQLite, also the one-process lock (taken here, or exit 2)."""
    cluster = Cluster(settings, database)
    if cluster.lock is not None:
        try:
            cluster.lock.acquire(database.display_url)
        except SingleReplicaStore as exc:
            die(str(exc), as_json=as_json)
    return cluster


def _seed(database: Database, settings: Settings, example: bool, info: dict[str, Any]) -> None:
    """``--example`` into an empty store, and the first admin token unless ``LOOM_ADMIN_TOKEN`` names one."""
    with database.session() as session:
        if example:
            loaded = service.load_example(session=session, ctx=_cli_ctx("loom serve --example: example fabric dc1"))
            info["example"] = f"loaded as revision {loaded.revision.id}" if loaded else "store not empty: kept"
        if settings.admin_token is not None:
            info["admin_token"] = "from LOOM_ADMIN_TOKEN"
        else:
            made = service.bootstrap_admin(session=session, ctx=_cli_ctx())
            if made:
                info["admin_token"] = made[1]


def _banner(info: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(info)
        return
    console.print(f"Loom API on [bold]{info['url']}[/]  (docs: {info['docs']}; store: {info['store']})",
                  highlight=False)
    if "agents" in info:
        console.print(f"device agents: {info['agents']}"
                      + (f" (started {len(info['agents_started'])})" if info.get("agents_started") else ""),
                      highlight=False)
    if "example" in info:
        console.print(f"example fabric: {info['example']}", highlight=False)
    token = info.get("admin_token")
    if token and token.startswith("loom_"):
        console.print("admin token (shown once, stored hashed):", highlight=False)
        console.print(f"  {token}", highlight=False, markup=False, soft_wrap=True)
        console.print(f'  curl -H "Authorization: Bearer {token}" {info["url"]}/v1/intent',
                      highlight=False, markup=False, soft_wrap=True)
    elif token:
        console.print("admin token: the one in LOOM_ADMIN_TOKEN", highlight=False)
    else:
        console.print("an admin token exists already; make another with: "
                      "loom token create --role admin --name NAME", highlight=False)


@app.command()
def serve(
    db: DbOption = None,
    host: Annotated[str, typer.Option(help="address to listen on (keep it loopback unless behind TLS)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    example: Annotated[bool, typer.Option("--example", help="load the example fabric dc1 into an empty store")] = False,
    agents: Annotated[str | None, typer.Option(
        "--agents", help="device agents file {device: unix:PATH | HOST:PORT} (default: $LOOM_AGENTS)")] = None,
    lab: Annotated[str | None, typer.Option(
        "--lab", help="use the agents of a running lab (labs/NAME), starting those not running")] = None,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error")] = "info",
    log_format: Annotated[str, typer.Option("--log-format", help="json (one object a line) or text")] = "json",
    as_json: JsonOption = False,
) -> None:
    """Serve the REST API and the web UI (at /; API docs at /docs) on the store; logs are JSON lines."""
    if log_level.lower() not in ("debug", "info", "warning", "error") or log_format not in ("json", "text"):
        die(f"--log-level {log_level} --log-format {log_format}: expected debug|info|warning|error and json|text",
            as_json=as_json)
    # the server and its app (uvicorn, FastAPI, the workflow engine, the gRPC drivers: about 1.7 s)
    import uvicorn  # lazy: the server, for `loom serve` only

    from api.app import create_app  # lazy: as above
    from controller.workflow.agents import make_driver  # lazy: as above, part of the app's import

    settings = _settings(as_json, db_url=db, host=host, port=port, agents=agents)
    # from here on every record (and every Python warning, of the migrations say) is a log line with its
    # request id (controller.logs); the banner below goes to stdout
    setup_logging(log_level, json=log_format == "json")
    database = _open_store(settings, as_json)
    url = f"http://{host}:{port}"
    info: dict[str, Any] = {"url": url, "docs": f"{url}/docs", "store": database.display_url}
    cluster = _lock(settings, database, as_json)
    info["replica"] = cluster.replica
    if lab:
        settings = _attach_lab(settings, lab, info, as_json)
    driver = None
    if settings.agents:
        try:
            driver = make_driver(settings)
        except Exception as exc:  # noqa: BLE001 - a bad agents file is told, not traced
            die(f"agents: {exc}", as_json=as_json)
        info["agents"] = len(driver.devices) if driver is not None else 0
    _seed(database, settings, example, info)
    _banner(info, as_json)
    # access lines come from api.metrics, with the request id
    # a response's head and body leave in one write: a replica killed mid-answer leaves nothing half sent
    from api.wire import WholeResponseH11  # lazy: uvicorn, for serve only
    uvicorn.run(create_app(settings, database=database, driver=driver, cluster=cluster), host=host, port=port,
                log_level=log_level.lower(), log_config=None, access_log=False, http=WholeResponseH11)


@app.command()
def validate(
    intent: Annotated[Path, typer.Argument(help="intent document (YAML or JSON)")],
    as_json: JsonOption = False,
) -> None:
    """Check an intent document; exit 2 listing every located error."""
    parsed = read_intent(intent, as_json=as_json)
    summary = {"valid": True, "name": parsed.name, "routing": parsed.routing.value, "devices": len(parsed.devices),
               "links": len(parsed.links), "failure_domains": len(parsed.failure_domains),
               "prefixes": len(parsed.prefixes), "policies": len(parsed.policies), "demands": len(parsed.demands),
               "jobs": len(parsed.jobs), "hash": parsed.content_hash}
    if as_json:
        emit_json(summary)
    else:
        console.print(f"{intent}: valid intent '{parsed.name}' ({parsed.routing.value}): "
                      f"{len(parsed.devices)} devices, {len(parsed.links)} links, "
                      f"{len(parsed.prefixes)} prefixes, {len(parsed.demands)} demands"
                      f"{f', {len(parsed.jobs)} jobs' if parsed.jobs else ''}; "
                      f"hash {parsed.content_hash[:12]}", highlight=False, markup=False, soft_wrap=True)


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", help="who or what uses it")],
    role: Annotated[str, typer.Option("--role", help="viewer, operator or admin")] = "viewer",
    expires_in: Annotated[str | None, typer.Option("--expires-in", help="lifetime: 3600, 30m, 12h, 30d")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue a token; its secret is printed once."""
    if role not in service.ROLES:
        die(f"--role: unknown role '{role}' (expected one of {', '.join(service.ROLES)})", as_json=as_json)
    problem = token_name_problem(name)
    if problem:
        die(f"--name: {problem}", as_json=as_json)
    expires = None
    if expires_in is not None:
        try:
            expires = datetime.now(UTC) + parse_duration(expires_in)
        except ValueError as exc:
            die(f"--expires-in: {exc}", as_json=as_json)
    database = _open_store(_settings(as_json, db_url=db), as_json)
    with database.session() as session:
        try:
            token, secret = service.create_token(name, role, session=session, ctx=_cli_ctx(), expires_at=expires)
        except LoomError as exc:
            die(str(exc), as_json=as_json)
    if as_json:
        emit_json(_token_json(token, secret))
    else:
        console.print(f"token {token.id} ({token.name}, {token.role}"
                      f"{', expires ' + token.expires_at.isoformat(timespec='seconds') if token.expires_at else ''}):",
                      highlight=False, markup=False)
        console.print(f"  {secret}", highlight=False, markup=False, soft_wrap=True)


@token_app.command("list")
def token_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """List tokens (never their secrets)."""
    database = _open_store(_settings(as_json, db_url=db), as_json)
    with database.session() as session:
        tokens = service.list_tokens(session=session)
    if as_json:
        emit_json([_token_json(t) for t in tokens])
        return
    if not tokens:
        console.print("no tokens")
        return
    now = datetime.now(UTC)
    for t in tokens:
        state = "active" if t.active(now) else ("revoked" if t.revoked_at else "expired")
        exp = t.expires_at.isoformat(timespec="seconds") if t.expires_at else "never"
        console.print(f"{t.id}  {t.role:<8}  {state:<7}  expires {exp:<25}  {t.name}", highlight=False, markup=False)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="the token's id")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a token: it stops working at once."""
    database = _open_store(_settings(as_json, db_url=db), as_json)
    with database.session() as session:
        try:
            # the store's own tool may revoke the last admin token: `loom token bootstrap` makes a new one
            token = service.revoke_token(token_id, session=session, ctx=_cli_ctx(), keep_last_admin=False)
        except LoomError as exc:
            die(str(exc), as_json=as_json)
    if as_json:
        emit_json(_token_json(token))
    else:
        console.print(f"token {token.id} ({token.name}) revoked", highlight=False, markup=False)


@token_app.command("bootstrap")
def token_bootstrap(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Create the first admin token, only if no active admin token exists."""
    database = _open_store(_settings(as_json, db_url=db), as_json)
    with database.session() as session:
        made = service.bootstrap_admin(session=session, ctx=_cli_ctx())
    if made is None:
        die("an active admin token exists already; use 'loom token create --role admin' with it, "
            "or revoke it first", code=EXIT_FAIL, as_json=as_json)
    token, secret = made
    if as_json:
        emit_json(_token_json(token, secret))
    else:
        console.print(f"admin token {token.id} (shown once, stored hashed):", highlight=False)
        console.print(f"  {secret}", highlight=False, markup=False, soft_wrap=True)
