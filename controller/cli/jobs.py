"""``loom jobs what-if JOB``: what one more ML job does to the fabric of a running controller.

The job file is one job as the intent document spells it (YAML or JSON:
``name``, ``tors``, ``collective``, ``bytes_per_iter``, ``iter_s``). The
controller adds it to its active intent, plans and replays it, and stores
nothing (``POST /v1/jobs/what-if``). Prints the planned maximum utilization,
the verdict and the failing scenarios; exit 1 when unsafe, 2 for bad input
(located under ``job``). ``--server`` and ``$LOOM_TOKEN`` as for ``loom apply``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from controller.cli.common import EXIT_FAIL, EXIT_INPUT, app, console, die, emit_json
from controller.cli.remote import DEFAULT_SERVER, JsonOption, ServerOption, print_failing, remote
from controller.model.errors import InvalidIntent
from controller.model.intent import parse_intent_text

__all__ = ["jobs_app", "what_if"]

jobs_app = typer.Typer(help="ML jobs on a running controller: what-if.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


@jobs_app.command("what-if")
def what_if(
    job_path: Annotated[Path, typer.Argument(metavar="JOB", help="one job (YAML or JSON)")],
    server: ServerOption = DEFAULT_SERVER,
    as_json: JsonOption = False,
) -> None:
    """Plan and check the active intent with JOB added; nothing is stored."""
    try:
        job = parse_intent_text(job_path.read_text(), "json" if job_path.suffix.lower() == ".json" else None)
    except OSError as exc:
        die(f"cannot read {job_path}: {exc.strerror}", code=EXIT_INPUT, as_json=as_json)
    except InvalidIntent as exc:
        die(f"{job_path}: not a job document", code=EXIT_INPUT, as_json=as_json,
            errors=[{"loc": e.loc, "msg": e.msg} for e in exc.errors])
    with remote(server, as_json) as client:
        answer = client.raw.what_if(job)
    if as_json:
        emit_json(answer)
    else:
        colour = "green" if answer["verdict"] == "safe" else "red"
        console.print(f"[bold {colour}]{answer['verdict'].upper()}[/] with job '{job.get('name')}': "
                      f"planned max utilization {answer['max_utilization']:.4f}, "
                      f"{len(answer['failing'])} failing", highlight=False)
        if answer["failing"]:
            print_failing(answer["failing"])
    if answer["verdict"] != "safe":
        raise typer.Exit(EXIT_FAIL)
