"""``loom discover``: the intent of a running FRR fabric (DESIGN.md "Adoption").

``loom discover PATH`` reads a running lab through its namespaces (:mod:`labs.discover`);
``loom discover --agents FILE`` reads the routers through their device agents (the agents file
``{NODE: ENDPOINT}`` that ``loom serve --agents`` takes, :mod:`southbound.driver`). Either way
:func:`southbound.discovery.infer.discover` makes the intent, with every link's addresses and every
router's id pinned as they run, and lists what it could not decide with the question for the
operator. ``--out`` writes the intent (YAML, or JSON for a ``.json`` name); ``--json`` prints
``{"intent": ..., "questions": [{"where", "question"}]}``. Exit status 1 when the intent does not
validate (the validator's errors are among the questions), 2 on bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from controller.cli.common import EXIT_FAIL, app, console, die, emit_json
from controller.model.errors import DriverError
from labs.clab import InvalidLab, load_topology
from labs.discover import observe_lab
from labs.runner import LabError
from southbound.discovery.infer import DEFAULT_GBPS, Discovery, discover
from southbound.discovery.observed import ObservedDevice
from southbound.driver import observe_agents

__all__ = ["discover_command"]


def _observe(path: Path | None, agents: Path | None, as_json: bool) -> tuple[str, list[ObservedDevice]]:
    if (path is None) == (agents is None):
        die("give a lab PATH or --agents FILE (one of them)", as_json=as_json)
    try:
        if path is not None:
            topo = load_topology(path)
            return topo.name, observe_lab(topo)
        assert agents is not None
        endpoints = json.loads(agents.read_text())
        if not isinstance(endpoints, dict) or not all(isinstance(v, str) for v in endpoints.values()):
            die(f"{agents}: expected an agents file {{NODE: ENDPOINT}}", as_json=as_json)
        return agents.stem, observe_agents(endpoints)
    except InvalidLab as exc:
        die(str(exc), as_json=as_json, errors=[e.as_dict() for e in exc.errors])
    except (OSError, ValueError) as exc:
        die(f"{agents}: {exc}", as_json=as_json)
    except (LabError, DriverError) as exc:
        die(str(exc), code=EXIT_FAIL, as_json=as_json)


def _write(found: Discovery, out: Path) -> None:
    if out.suffix.lower() == ".json":
        out.write_text(json.dumps(found.intent, indent=2) + "\n")
    else:
        out.write_text(yaml.safe_dump(found.intent, sort_keys=False, default_flow_style=None, width=120))


@app.command("discover")
def discover_command(
    path: Annotated[Path | None, typer.Argument(help="a running lab: its directory or topology file")] = None,
    agents: Annotated[Path | None, typer.Option(
        "--agents", help="agents file {NODE: ENDPOINT} to read instead")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the intent here (YAML; JSON for .json)")] = None,
    name: Annotated[str | None, typer.Option(help="the fabric's name (default: the lab's, or the file's stem)")] = None,
    default_gbps: Annotated[float, typer.Option(
        "--default-gbps", help="capacity of links whose interfaces report no physical speed")] = DEFAULT_GBPS,
    as_json: Annotated[bool, typer.Option("--json", help="print {intent, questions}")] = False,
) -> None:
    """Read a running FRR fabric and write its intent, pinned as it runs, with the open questions."""
    fabric, observed = _observe(path, agents, as_json)
    found = discover(observed, name=name or fabric, default_gbps=default_gbps)
    if out is not None:
        _write(found, out)
    if as_json:
        emit_json(found.to_document())
    else:
        console.print(f"{len(found.intent['devices'])} devices, {len(found.intent['links'])} links, "
                      f"{len(found.intent['prefixes'])} prefixes, routing {found.intent['routing']}"
                      + (f"; intent written to {out}" if out else ""), highlight=False, markup=False)
        for q in found.questions:
            console.print(f"  ? {q.where}: {q.question}", highlight=False, markup=False)
        if out is None:
            console.print(yaml.safe_dump(found.intent, sort_keys=False, default_flow_style=None, width=120),
                          highlight=False, markup=False)
    if not found.valid:
        raise typer.Exit(EXIT_FAIL)
