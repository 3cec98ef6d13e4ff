"""``loom agent`` (the device agent beside FRR) and ``loom pki init|issue`` (its private CA).

This module owns those commands' arguments and output only; the agent is
:mod:`southbound.device.agent`, the CA :mod:`southbound.pki`.
"""

from __future__ import annotations

import socket
from pathlib import Path

import typer

from controller.cli.common import app, console, die, emit_json
from southbound.device.agent import run_agent

__all__ = ["agent", "pki_app"]


@app.command()
def agent(
    frr_dir: Path = typer.Option(..., "--frr-dir", help="FRR's vty socket directory (the node's run directory)"),
    listen: str = typer.Option(..., "--listen", help="unix:PATH or HOST:PORT (TCP needs --tls-*)"),
    hostname: str = typer.Option("", "--hostname", help="the device's name (default: this host's name)"),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="durable state (default FRR_DIR/agent)"),
    dry_frr: bool = typer.Option(False, "--dry-frr", help="render and record only, never call FRR (scale tests)"),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="server certificate (loom pki issue)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="its key"),
    tls_ca: Path | None = typer.Option(None, "--tls-ca", help="CA whose client certificates are accepted"),
    dry_prepare_delay: float = typer.Option(0.0, "--dry-prepare-delay", hidden=True),
    dry_apply_delay: float = typer.Option(0.0, "--dry-apply-delay", hidden=True),
) -> None:
    """Run the Loom device agent: a gRPC server beside FRR, the only thing that changes this switch."""
    from southbound.pki import ServerTls  # lazy: cryptography (about 0.1 s), for an agent on TCP only

    tls = None
    if any((tls_cert, tls_key, tls_ca)):
        if not (tls_cert and tls_key and tls_ca):
            die("--tls-cert, --tls-key and --tls-ca go together")
        tls = ServerTls(tls_cert, tls_key, tls_ca)
    if not listen.startswith("unix:") and tls is None:
        die(f"--listen {listen}: an agent on TCP requires mutual TLS (--tls-cert, --tls-key, --tls-ca)")
    if (dry_prepare_delay or dry_apply_delay) and not dry_frr:
        die("--dry-*-delay only applies with --dry-frr")
    run_agent(hostname=hostname or socket.gethostname(), frr_dir=frr_dir, listen=listen, state_dir=state_dir,
              dry_frr=dry_frr, tls=tls, prepare_delay=dry_prepare_delay, apply_delay=dry_apply_delay)


pki_app = typer.Typer(help="A private CA and certificates for the agents' mutual TLS.", no_args_is_help=True)
app.add_typer(pki_app, name="pki")


@pki_app.command("init")
def pki_init(
    directory: Path = typer.Argument(..., help="where ca.crt and ca.key go"),
    name: str = typer.Option("Loom private CA", "--name"),
    days: int = typer.Option(3650, "--days", min=1),
    force: bool = typer.Option(False, "--force", help="replace an existing CA"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Make a private CA."""
    from southbound.pki import init_ca  # lazy: cryptography (about 0.1 s), for `loom pki` only

    try:
        crt = init_ca(directory, name=name, days=days, force=force)
    except FileExistsError as exc:
        die(str(exc), as_json=as_json)
    if as_json:
        emit_json({"ca": str(crt), "key": str(directory / "ca.key")})
    else:
        console.print(f"CA written: {crt} (key {directory / 'ca.key'}, mode 0600)")


@pki_app.command("issue")
def pki_issue(
    directory: Path = typer.Argument(..., help="the CA's directory (loom pki init)"),
    name: str = typer.Argument(..., help="device name (server) or controller name (client)"),
    client: bool = typer.Option(False, "--client", help="a client certificate (the controller) instead of a server's"),
    san: list[str] = typer.Option([], "--san", help="extra DNS name or IP address (repeatable)"),
    days: int = typer.Option(825, "--days", min=1),
    out: Path | None = typer.Option(None, "--out", help="directory for NAME.crt and NAME.key (default: the CA's)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Sign a certificate with the private CA."""
    from southbound.pki import issue  # lazy: cryptography (about 0.1 s), for `loom pki` only

    if not (directory / "ca.key").exists():
        die(f"{directory}: no CA here (run `loom pki init {directory}` first)", as_json=as_json)
    crt, key = issue(directory, name, kind="client" if client else "server", sans=tuple(san), days=days, out=out)
    if as_json:
        emit_json({"cert": str(crt), "key": str(key), "kind": "client" if client else "server"})
    else:
        console.print(f"{'client' if client else 'server'} certificate for {name}: {crt} (key {key})")
