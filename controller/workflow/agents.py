"""Where the controller finds the device agents.

``LOOM_AGENTS`` (``loom serve --agents FILE``) names a YAML or JSON mapping
``{device: "unix:/path/agent.sock" | "host:port"}``; TCP endpoints use the
client TLS settings (``LOOM_AGENT_TLS_CERT``/``_KEY``/``_CA``). ``LOOM_LAB``
(``loom serve --lab labs/NAME``) reads a lab's topology and points at each
node's agent socket in the lab's run directory (``RUN/NAME/NODE/agent.sock``,
where ``loom lab up`` keeps each node's files). No agents at all is allowed:
the controller then reviews with locally rendered configs and a commit only
records the revision as active.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from controller.model.errors import LoomError
from controller.settings import Settings

__all__ = ["endpoints_from_settings", "lab_endpoints", "make_driver", "read_agents_file", "start_lab_agents"]


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


def lab_endpoints(lab_dir: str | Path) -> dict[str, str]:
    """The agent socket of every node of the lab in ``lab_dir`` (running under ``loom lab up``)."""
    from labs import runner
    from labs.clab import load_topology

    topo = load_topology(lab_dir)
    base = runner.run_dir(topo.name)
    return {n.name: f"unix:{base / n.name / 'agent.sock'}" for n in topo.nodes}


def start_lab_agents(lab_dir: str | Path, *, timeout: float = 60.0) -> list[str]:
    """Start the device agent of each node of a running lab whose socket does not answer
    (``loom lab up`` starts them already; this covers a lab brought up without them).
    Returns the nodes started."""
    from labs import runner
    from labs.clab import load_topology

    return runner.start_agents(load_topology(lab_dir), timeout=timeout)  # LabError is a LoomError


def endpoints_from_settings(settings: Settings) -> dict[str, str]:
    out: dict[str, str] = {}
    if settings.lab:
        out.update(lab_endpoints(settings.lab))
    if settings.agents:
        out.update(read_agents_file(settings.agents))
    return out


def make_driver(settings: Settings, endpoints: dict[str, str]) -> Any:
    """An :class:`southbound.driver.AgentDriver` for ``endpoints`` (``None`` when there are none)."""
    if not endpoints:
        return None
    from southbound.driver import AgentDriver

    tls = None
    if settings.agent_tls_ca:
        from southbound.pki import ClientTls

        tls = ClientTls(Path(settings.agent_tls_cert) if settings.agent_tls_cert else None,
                        Path(settings.agent_tls_key) if settings.agent_tls_key else None,
                        Path(settings.agent_tls_ca))
    return AgentDriver(endpoints, tls=tls, timeout=10.0, commit_timeout=120.0, max_attempts=3)
