"""Where the controller finds the device agents, and the driver that talks to them.

``LOOM_AGENTS`` (``loom serve --agents FILE``) names a YAML or JSON mapping
``{device: "unix:/path/agent.sock" | "host:port"}``; TCP endpoints use the
client TLS settings (``LOOM_AGENT_TLS_CERT``/``_KEY``/``_CA``). A lab brought
up by ``loom lab up`` writes such a file into its run directory, and ``loom
serve --lab labs/NAME`` points this setting at it: the controller learns where
a lab's agents are from the file, never from the lab harness. No agents at all
is allowed: the controller then reviews with locally rendered configs and a
commit only records the revision as active.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from controller.model.errors import LoomError
from controller.settings import Settings
from southbound.driver import DeviceDriver, drivers
from southbound.pki import ClientTls

__all__ = ["client_tls", "endpoints_from_settings", "make_driver", "read_agents_file"]


def read_agents_file(path: str | Path) -> dict[str, str]:
    """``{device: endpoint}`` from a YAML/JSON file (or inline JSON text)."""
    text = str(path)
    if not text.lstrip().startswith("{"):
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise LoomError(f"agents file {path}: {exc.strerror}") from None
    try:
        doc: Any = yaml.safe_load(text) if not text.lstrip().startswith("{") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise LoomError(f"agents file {path}: not YAML/JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("agents"), dict):
        doc = doc["agents"]
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise LoomError(f"agents file {path}: expected a mapping of device name to 'unix:PATH' or 'HOST:PORT'")
    return dict(doc)


def endpoints_from_settings(settings: Settings) -> dict[str, str]:
    """The agents file's endpoints (none without ``LOOM_AGENTS``)."""
    return read_agents_file(settings.agents) if settings.agents else {}


def client_tls(settings: Settings) -> ClientTls | None:
    """The client side of mutual TLS towards agents on TCP (``None`` without a CA: unix sockets only)."""
    if not settings.agent_tls_ca:
        return None
    return ClientTls(Path(settings.agent_tls_cert) if settings.agent_tls_cert else None,
                     Path(settings.agent_tls_key) if settings.agent_tls_key else None,
                     Path(settings.agent_tls_ca))


def make_driver(settings: Settings, endpoints: dict[str, str] | None = None) -> DeviceDriver | None:
    """The gRPC driver for ``endpoints`` (default: the agents file), with the settings' deadlines,
    retries and client TLS; ``None`` when there are no agents."""
    endpoints = endpoints_from_settings(settings) if endpoints is None else endpoints
    if not endpoints:
        return None
    return drivers.create("grpc", endpoints=endpoints, tls=client_tls(settings), timeout=settings.agent_timeout,
                          commit_timeout=settings.agent_commit_timeout, max_attempts=settings.agent_max_attempts)
