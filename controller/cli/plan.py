"""``loom plan`` and ``loom gen clos``: compile an intent offline, make synthetic fabrics.

This module owns two commands of the CLI (DESIGN.md, contract 3). ``loom plan
INTENT`` validates the intent, runs the solver (a progress display on a
terminal, plain stage lines on stderr otherwise), prints the plan summary (a
table for people, JSON with ``--json``) and writes the plan document with
``--out``. An intent whose demand cannot be routed exits 2 (bad input) naming
each unroutable demand. ``loom gen clos`` writes a 3-tier Clos intent
document (:mod:`controller.gen`) as YAML or JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from controller.cli.common import EXIT_INPUT, app, console, die, emit_json, err_console, read_intent
from controller.gen import clos_document, with_family
from controller.model import Underlay
from controller.model.errors import Infeasible

__all__ = ["gen_app"]

gen_app = typer.Typer(help="Generate synthetic intent documents.", no_args_is_help=True)
app.add_typer(gen_app, name="gen")

_STAGES = {"routes": "routes", "lp": "WCMP LP", "weights": "integer weights", "loads": "loads"}


def _summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title="plan summary", show_header=True)
    table.add_column("key")
    table.add_column("value", justify="right")
    for k, v in summary.items():
        table.add_row(k, f"{v:.4f}" if isinstance(v, float) else str(v))
    return table


@app.command("plan")
def plan_cmd(
    intent_path: Annotated[Path, typer.Argument(metavar="INTENT", help="intent document (YAML or JSON)")],
    out: Annotated[Path | None, typer.Option("--out", help="write the plan document (JSON) here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    backend: Annotated[str, typer.Option(
        "--backend", help="LP backend: auto, glop, pdlp, highs, scipy-highs")] = "auto",
    robust: Annotated[bool, typer.Option(
        "--robust", help="robust WCMP: hold the failure_tolerance policy's limit in every scenario where possible")
    ] = False,
) -> None:
    """Compile INTENT into a forwarding plan offline and print its summary.

    Exit status 2 for an invalid intent or a demand that cannot be routed.
    """
    # lazy: the solver stack (numpy, scipy, the LP backends: about 0.4 s), for `loom plan` only
    from controller.planning import CompileOptions, compile_plan
    from solver import BACKENDS  # lazy: as above

    if backend not in BACKENDS:
        die(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}", as_json=as_json)
    options = CompileOptions(backend=backend, robust=robust)
    t0 = time.perf_counter()
    intent = read_intent(intent_path, as_json=as_json)
    validate_s = time.perf_counter() - t0
    try:
        if err_console.is_terminal and not as_json:
            with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                          console=err_console, transient=True) as bar:
                task = bar.add_task("solving", total=1.0)

                def show(stage: str, frac: float) -> None:
                    bar.update(task, description=_STAGES.get(stage, stage), completed=frac)

                plan = compile_plan(intent, options, progress=show)
        else:
            last: list[str] = []

            def lines(stage: str, frac: float) -> None:
                if not last or last[-1] != stage:
                    last.append(stage)
                    sys.stderr.write(f"loom plan: {_STAGES.get(stage, stage)} ({time.perf_counter() - t0:.1f} s)\n")

            plan = compile_plan(intent, options, progress=lines)
    except Infeasible as exc:
        errors = [{"loc": str(d.get("loc", "")), "msg": f"{d.get('from')} -> {d.get('to')}: {d.get('reason')}"}
                  if "from" in d else {"loc": "", "msg": json.dumps(d)} for d in exc.details]
        die(f"{intent_path}: infeasible: {exc}", code=EXIT_INPUT, as_json=as_json, errors=errors)
    doc = plan.to_document()
    if out is not None:
        out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    summary: dict[str, object] = {**plan.summary.to_document()}
    summary["validate_seconds"] = round(validate_s, 3)
    if as_json:
        emit_json({"fabric": plan.fabric, "summary": summary, "out": str(out) if out else None})
    else:
        console.print(_summary_table(summary))
        if out is not None:
            console.print(f"plan written to {out}")


@gen_app.command("clos")
def gen_clos(
    pods: Annotated[int, typer.Option("--pods", min=1, max=256, help="pods")],
    tors: Annotated[int, typer.Option("--tors", min=1, max=4096,
                                      help="ToRs per pod (over 256: each originates a /26)")],
    planes: Annotated[int, typer.Option("--planes", min=1, help="spine planes (one leaf per plane per pod)")],
    spines: Annotated[int, typer.Option("--spines", min=1, help="spines per plane")],
    seed: Annotated[int, typer.Option("--seed", help="random seed")] = 0,
    missing: Annotated[float, typer.Option("--missing", min=0.0, max=0.99,
                                           help="fraction of leaf-spine links left out")] = 0.0,
    hetero: Annotated[float, typer.Option("--hetero", min=0.0, max=1.0,
                                          help="fraction of leaf-spine links with half or double capacity")] = 0.0,
    demand: Annotated[str, typer.Option("--demand", help="uniform | gravity | hotspot")] = "uniform",
    load: Annotated[float, typer.Option("--load", min=0.0,
                                        help="scale demand so ECMP's max utilization is this")] = 0.5,
    fanout: Annotated[int | None, typer.Option(
        "--fanout", min=0,
        help="destinations per ToR (default: all pairs up to 256 ToRs, else 32; 0: no demand)")] = None,
    max_ecmp_entries: Annotated[int, typer.Option("--max-ecmp-entries", min=1, help="group budget")] = 128,
    family: Annotated[str, typer.Option(
        "--family", help="the ToRs' prefixes: ipv4 | ipv6 | dual (each demand split over both)")] = "ipv4",
    underlay: Annotated[str | None, typer.Option(
        "--underlay", help="ipv4-numbered | unnumbered | ipv6-numbered (default: unnumbered with IPv6)")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="write here (.json for JSON, else YAML); default stdout")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of YAML")] = False,
) -> None:
    """Write a 3-tier Clos intent (RFC 7938 ASNs, failure domains, a demand matrix)."""
    if demand not in ("uniform", "gravity", "hotspot"):
        die(f"--demand: expected uniform, gravity or hotspot, got {demand!r}", as_json=as_json)
    if underlay is not None and underlay not in {u.value for u in Underlay}:
        die(f"--underlay: expected ipv4-numbered, unnumbered or ipv6-numbered, got {underlay!r}", as_json=as_json)
    if family != "ipv4" and underlay == Underlay.IPV4_NUMBERED.value:
        die(f"--family {family} with --underlay ipv4-numbered: BGP sessions over IPv4 link addresses carry IPv4 "
            "only (use unnumbered or ipv6-numbered)", as_json=as_json)
    try:
        doc = clos_document(pods=pods, tors=tors, planes=planes, spines=spines, seed=seed, missing=missing,
                            hetero=hetero, demand=demand, load=load, fanout=fanout,  # type: ignore[arg-type]
                            max_ecmp_entries=max_ecmp_entries)
        doc = with_family(doc, family, underlay)
    except ValueError as exc:
        die(f"--family: {exc}" if "family" in str(exc) else str(exc), as_json=as_json)
    use_json = as_json or (out is not None and out.suffix == ".json")
    text = json.dumps(doc, indent=1) + "\n" if use_json else yaml.safe_dump(doc, sort_keys=False, width=200)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        n = {k: len(v) if isinstance(v := doc.get(k), list) else 0 for k in ("devices", "links", "demands")}
        err_console.print(f"wrote {out}: {n['devices']} devices, {n['links']} links, {n['demands']} demands")
