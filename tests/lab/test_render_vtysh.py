"""FRR's own parser accepts every golden FRR configuration, of every underlay and family (#36).

Each ``tests/golden/frr/*.conf`` (what :func:`southbound.render.render_frr` renders, frozen by
``tests/unit/test_render.py``) is loaded with ``vtysh -C -f`` (FRR's dry check: every line parsed, nothing
applied) from an empty config dir; any error fails, whatever vtysh's exit status. The goldens cover the
``ipv4-numbered`` fabric, the dual-stack ``unnumbered`` and ``ipv6-numbered`` BGP fabrics (interface peers and
router advertisements, extended next hop, link-bandwidth and drains in both address families) and IS-IS
dual-stack and IPv6-only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.golden_files import GOLDEN

CONFS = sorted(p.name for p in (GOLDEN / "frr").glob("*.conf"))
#: what each underlay's rendering must show, so that a golden set missing one fails here too
UNDERLAYS = {"unnumbered-": "neighbor eth1 interface v6only remote-as", "ipv6-numbered-": "capability extended-nexthop",
             "isis-dual-": "ipv6 router isis loom", "isis-ipv6-numbered-": "ipv6 router isis loom"}


def vtysh_check(path: Path, config_dir: Path) -> str:
    """vtysh's complaints about ``path`` ("" when it parses), with an empty ``vtysh.conf`` in ``config_dir``."""
    (config_dir / "vtysh.conf").touch()
    proc = subprocess.run(["vtysh", "--config_dir", str(config_dir), "-C", "-f", str(path)],
                          capture_output=True, text=True, timeout=30)
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("%") or "rror" in ln]
    return "" if proc.returncode == 0 and not errors else f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("name", CONFS)
def test_frr_accepts_the_golden_config(name: str, tmp_path: Path) -> None:
    assert vtysh_check(GOLDEN / "frr" / name, tmp_path) == ""


@pytest.mark.parametrize("prefix", sorted(UNDERLAYS))
def test_every_underlay_has_a_golden_config(prefix: str) -> None:
    texts = [(GOLDEN / "frr" / n).read_text() for n in CONFS if n.startswith(prefix)]
    assert texts and all(UNDERLAYS[prefix] in t for t in texts), prefix


def test_the_check_can_fail(tmp_path: Path) -> None:
    """A dual-stack line FRR does not know (a misspelt IPv6 match) is refused."""
    bad = tmp_path / "bad.conf"
    text = (GOLDEN / "frr" / "unnumbered-wcmp-leaf-0-0.conf").read_text()
    assert "match ipv6 address prefix-list" in text
    bad.write_text(text.replace("match ipv6 address prefix-list", "match ipv6 adress prefix-list"))
    assert vtysh_check(bad, tmp_path) != ""
