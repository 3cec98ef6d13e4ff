"""Mutual TLS between the controller and an agent on TCP (loopback): only certificates of the private CA get in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from southbound.device.agent import AgentCore, serve
from southbound.device.frr_apply import DryFrr
from southbound.driver import AgentDriver
from southbound.pki import ClientTls, ServerTls, init_ca, issue

pytestmark = pytest.mark.anyio


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = tmp_path / "ca"
    init_ca(ca)
    issue(ca, "leaf-1", kind="server")
    issue(ca, "controller", kind="client")
    issue(ca, "leaf-2", kind="server")  # a server certificate is not a client certificate
    other = tmp_path / "other"
    init_ca(other, name="someone else's CA")
    issue(other, "controller", kind="client")
    return tmp_path


async def _with_agent(tmp: Path, body) -> None:  # type: ignore[no-untyped-def]
    ca = tmp / "ca"
    core = AgentCore(DryFrr(tmp / "dry"), tmp / "state", "leaf-1")
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve(core, "127.0.0.1:0", tls=ServerTls(ca / "leaf-1.crt", ca / "leaf-1.key",
                                                                        ca / "ca.crt"), ready=ready.set, stop=stop))
    await asyncio.wait_for(ready.wait(), 10)
    try:
        await body(f"127.0.0.1:{core.port}")
    finally:
        stop.set()
        await task


async def _info(target: str, tls: ClientTls) -> str:
    async with AgentDriver({"leaf-1": target}, tls=tls, timeout=3, max_attempts=1) as drv:
        return (await drv.info("leaf-1")).hostname


async def test_agent_accepts_only_clients_with_a_certificate_of_its_ca(pki: Path) -> None:
    ca = pki / "ca"

    async def body(target: str) -> None:
        good = ClientTls(ca / "controller.crt", ca / "controller.key", ca / "ca.crt", server_name="leaf-1")
        assert await _info(target, good) == "leaf-1"
        refused = {
            "no client certificate": ClientTls(None, None, ca / "ca.crt", server_name="leaf-1"),
            "another CA's certificate": ClientTls(pki / "other" / "controller.crt", pki / "other" / "controller.key",
                                                  ca / "ca.crt", server_name="leaf-1"),
            "a server certificate as client": ClientTls(ca / "leaf-2.crt", ca / "leaf-2.key", ca / "ca.crt",
                                                        server_name="leaf-1"),
            "not trusting the agent's CA": ClientTls(ca / "controller.crt", ca / "controller.key",
                                                     pki / "other" / "ca.crt", server_name="leaf-1"),
            "the wrong agent name": ClientTls(ca / "controller.crt", ca / "controller.key", ca / "ca.crt",
                                              server_name="leaf-9"),
        }
        for why, tls in refused.items():
            with pytest.raises(Exception) as exc:  # noqa: PT011 - grpc raises AioRpcError
                await _info(target, tls)
            assert "UNAVAILABLE" in str(exc.value) or "DEADLINE" in str(exc.value), why
        assert await _info(target, good) == "leaf-1"  # still serving

    await _with_agent(pki, body)


async def test_agent_refuses_tcp_without_tls(tmp_path: Path) -> None:
    core = AgentCore(DryFrr(tmp_path / "dry"), tmp_path / "state", "leaf-1")
    with pytest.raises(ValueError, match="mutual TLS"):
        await serve(core, "127.0.0.1:0")


def test_pki_cli_makes_a_ca_and_certificates(tmp_path: Path) -> None:
    _register()
    runner = CliRunner()
    ca = tmp_path / "ca"
    r = runner.invoke(app, ["pki", "init", str(ca), "--json"])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["pki", "init", str(ca)]).exit_code == 2  # refuses to overwrite
    r = runner.invoke(app, ["pki", "issue", str(ca), "spine-0", "--san", "10.0.0.7", "--json"])
    assert r.exit_code == 0 and '"server"' in r.output
    r = runner.invoke(app, ["pki", "issue", str(ca), "ctl", "--client"])
    assert r.exit_code == 0
    assert (ca / "spine-0.crt").exists() and (ca / "ctl.key").stat().st_mode & 0o777 == 0o600
    assert runner.invoke(app, ["pki", "issue", str(tmp_path / "nowhere"), "x"]).exit_code == 2
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((ca / "spine-0.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "spine-0" in sans.get_values_for_type(x509.DNSName)
    assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "10.0.0.7"]
