"""CLI polish: ``loom check --plot FILE`` (SVG by hand, PNG with matplotlib) and progress bars
on a terminal (a real pseudo-terminal) versus plain lines in pipes.

The histogram's counts are checked against the plan document ``loom plan``
writes, binned independently here; the PNG is opened with Pillow.
"""

from __future__ import annotations

import json
import math
import os
import pty
import re
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from controller import service
from controller.cli import _register
from controller.cli.common import app
from controller.cli.progress import devices_bar
from tests.serving import LOOM

_register()
runner = CliRunner()
DC1 = Path(service.EXAMPLE_INTENT)
SVG = "{http://www.w3.org/2000/svg}"


def plan_doc(tmp_path: Path, intent: Path) -> dict[str, Any]:
    out = tmp_path / f"{intent.stem}.plan.json"
    res = runner.invoke(app, ["plan", str(intent), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    return dict(json.loads(out.read_text()))


def expected_bins(utils: list[float]) -> Counter[int]:
    n = max(10, *(math.ceil(u * 10 - 1e-9) for u in utils))
    return Counter(min(n - 1, max(0, math.floor(u * 10 - 1e-9))) for u in utils)


def svg_bins(path: Path) -> dict[str, Counter[int]]:
    """Series label -> Counter(bin index -> links), read back from the bars' titles."""
    out: dict[str, Counter[int]] = {}
    for rect in ET.parse(path).getroot().iter(f"{SVG}rect"):
        title = rect.find(f"{SVG}title")
        if title is None or title.text is None:
            continue
        m = re.fullmatch(r"(\w+): (\d+) link\(s\) at (\d+)-(\d+)%", title.text)
        assert m, title.text
        out.setdefault(m[1], Counter())[int(m[3]) // 10] += int(m[2])
    return out


def test_check_plots_the_plans_links_as_svg(tmp_path: Path) -> None:
    plan = plan_doc(tmp_path, DC1)
    out = tmp_path / "hist.svg"
    res = runner.invoke(app, ["check", str(DC1), "--plot", str(out)])
    assert res.exit_code == 0, res.output
    bins = svg_bins(out)
    assert set(bins) == {"plan"}
    assert bins["plan"] == expected_bins([x["utilization"] for x in plan["links"]])
    assert sum(bins["plan"].values()) == len(plan["links"])


def test_check_plots_before_and_after_against_the_active_intent(tmp_path: Path) -> None:
    doc = yaml.safe_load(DC1.read_text())
    doc["policies"] = [*doc.get("policies", []), {"kind": "drain", "target": "spine-0-0"}]
    drained = tmp_path / "drained.yaml"
    drained.write_text(yaml.safe_dump(doc))
    before, after = plan_doc(tmp_path, DC1), plan_doc(tmp_path, drained)
    out = tmp_path / "change.svg"
    res = runner.invoke(app, ["check", str(drained), "--against", str(DC1), "--plot", str(out), "--json"])
    assert res.exit_code in (0, 1), res.output
    bins = svg_bins(out)
    assert bins["before"] == expected_bins([x["utilization"] for x in before["links"]])
    assert bins["after"] == expected_bins([x["utilization"] for x in after["links"]])
    assert bins["before"] != bins["after"]  # draining a spine moves load


def test_check_plots_png(tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "hist.png"
    res = runner.invoke(app, ["check", str(DC1), "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as img:
        assert img.size == (720, 320)
        colours = {c for _, c in img.convert("RGB").getcolors(maxcolors=100_000) or []}
    assert (0x7F, 0x8F, 0xA6) in colours  # the plan's bars are drawn


def test_check_plot_refuses_other_formats(tmp_path: Path) -> None:
    res = runner.invoke(app, ["check", str(DC1), "--plot", str(tmp_path / "hist.pdf")])
    assert res.exit_code == 2 and ".svg or .png" in res.output
    assert not (tmp_path / "hist.pdf").exists()


def run_on_terminal(*args: str) -> str:
    """Run ``loom ARGS`` with stdout and stderr on a pseudo-terminal; everything it wrote."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*LOOM, *args], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=env)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        proc.wait(120)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.component
def test_plan_and_check_show_bars_on_a_terminal_and_plain_lines_otherwise(tmp_path: Path) -> None:
    tty = run_on_terminal("plan", str(DC1))
    assert "━" in tty and "\x1b[" in tty  # rich drew a bar
    piped = subprocess.run([*LOOM, "plan", str(DC1)], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0
    assert "━" not in piped.stderr and "\x1b[" not in piped.stderr
    assert re.search(r"^loom plan: routes \(\d", piped.stderr, re.M)
    tty = run_on_terminal("check", str(DC1), "--scope", "all_single")
    assert "replaying scenarios" in tty and "━" in tty


def test_the_commit_bar_counts_devices_done() -> None:
    change = {"state": "committing", "progress": {"step": "commit", "devices": {
        f"d{i}": {"step": "commit", "status": "ok" if i < 7 else "pending", "changed": True, "error": None}
        for i in range(12)}}}
    con = Console(record=True, width=100, force_terminal=True, color_system="truecolor")
    con.print(devices_bar(change))
    text = con.export_text()
    assert "commit" in text and "7/12 devices" in text and "━" in text
    change["progress"]["devices"]["d9"]["status"] = "failed"
    con.print(devices_bar(change))
    assert "8/12 devices" in con.export_text()
