"""containerlab files as people write them: inheritance, both link syntaxes, lab paths, and located refusals.

Topologies are written into temporary directories by each test (or read from
tests/lab/fixtures); nothing is brought up. Inheritance follows containerlab:
single values node > group > kind > defaults, ``env`` and ``labels`` merged key
by key, ``exec`` and ``binds`` concatenated (a more specific bind of the same
container path wins). What cannot be honoured is refused with a location that
names the node and the field; the daemons a router runs come from its
``daemons`` file or its configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from controller.cli import _register
from controller.cli.common import app
from labs.clab import InvalidLab, load_topology, topology_path
from labs.clab_spec import exec_env, magic_vars
from labs.frr_daemons import plan_daemons

FIXTURES = Path(__file__).resolve().parents[1] / "lab" / "fixtures"
FRR_CONF = "frr defaults datacenter\nhostname {name}\n!\nrouter ospf\n network 10.0.0.0/8 area 0\n!\n"

_register()
cli = CliRunner()


def write_lab(tmp_path: Path, topology: dict[str, Any], *, file: str = "lab.clab.yml", name: str = "t1",
              configs: tuple[str, ...] = ("r1", "r2")) -> Path:
    """A lab directory with ``cfg/NODE/frr.conf`` for ``configs`` and the topology in ``file``."""
    for node in configs:
        (tmp_path / "cfg" / node).mkdir(parents=True, exist_ok=True)
        (tmp_path / "cfg" / node / "frr.conf").write_text(FRR_CONF.format(name=node))
    path = tmp_path / file
    path.write_text(yaml.safe_dump({"name": name, "topology": topology}, sort_keys=False))
    return path


def errors_of(path: Path) -> dict[str, str]:
    with pytest.raises(InvalidLab) as err:
        load_topology(path)
    return {e.loc: e.msg for e in err.value.errors}


def test_kind_and_image_follow_containerlabs_precedence(tmp_path: Path) -> None:
    path = write_lab(tmp_path, {
        "defaults": {"kind": "linux", "image": "alpine:3", "env": {"A": "defaults", "B": "defaults"},
                     "labels": {"tier": "lab"}, "exec": ["ip link set lo up"]},
        "kinds": {"linux": {"image": "frrouting/frr:v8.4.1", "env": {"B": "kind", "C": "kind"},
                            "binds": ["cfg/r2:/etc/frr"], "exec": ["sysctl -w net.ipv4.ip_forward=1"]}},
        "groups": {"edge": {"image": "quay.io/frrouting/frr:8.4.1", "env": {"C": "group"},
                            "labels": {"tier": "edge"}, "binds": ["cfg/r1/frr.conf:/etc/frr/frr.conf"],
                            "exec": ["ip addr add 10.9.0.1/24 dev eth9"]}},
        "nodes": {"r1": {"group": "edge", "env": {"D": "node"}, "exec": ["ip link set eth1 up"]},
                  "r2": {},
                  "h1": {"image": "busybox", "binds": [], "exec": ["ip addr add 10.0.0.2/24 dev eth1"]}},
        "links": [{"endpoints": ["r1:eth1", "r2:eth1"]}, {"endpoints": ["r2:eth2", "h1:eth1"]}]})
    topo = load_topology(path)
    r1, r2, h1 = (topo.node_map[n] for n in ("r1", "r2", "h1"))
    assert (r1.kind, r1.image, r1.group) == ("linux", "quay.io/frrouting/frr:8.4.1", "edge")
    assert r2.image == "frrouting/frr:v8.4.1" and h1.image == "busybox"
    assert r1.env == {"A": "defaults", "B": "kind", "C": "group", "D": "node"}
    assert r2.env == {"A": "defaults", "B": "kind", "C": "kind"}
    assert r1.labels == {"tier": "edge"} and r2.labels == {"tier": "lab"}
    assert r1.exec == ("ip link set lo up", "sysctl -w net.ipv4.ip_forward=1", "ip addr add 10.9.0.1/24 dev eth9",
                       "ip link set eth1 up")
    assert r1.exec_locs[2] == "topology.groups.edge.exec[0]" and r1.exec_locs[3] == "topology.nodes.r1.exec[0]"
    # binds add up: r1 has the kind's directory and the group's file; the file, more specific, gives frr.conf
    assert r1.frr_conf == tmp_path / "cfg" / "r1" / "frr.conf"
    assert r2.frr_conf == tmp_path / "cfg" / "r2" / "frr.conf" and r2.daemons_file is None
    assert [n.name for n in topo.routers] == ["r1", "r2", "h1"]  # h1 inherits the kind's /etc/frr bind too


def test_a_group_gives_the_kind_and_a_node_without_frr_is_a_host(tmp_path: Path) -> None:
    path = write_lab(tmp_path, {
        "groups": {"spines": {"kind": "linux", "image": "quay.io/frrouting/frr:8.4.1"},
                   "servers": {"kind": "linux", "image": "alpine"}},
        "nodes": {"r1": {"group": "spines", "binds": ["cfg/r1:/etc/frr"]},
                  "r2": {"group": "spines"},
                  "s1": {"group": "servers", "exec": ["ip -4 addr add 192.0.2.5/24 dev eth1",
                                                     "ip route add default via 192.0.2.1"]}},
        "links": [{"endpoints": ["r1:eth1", "s1:eth1"]}, {"endpoints": ["r1:eth2", "r2:eth1"]}]})
    topo = load_topology(path)
    assert [n.name for n in topo.routers] == ["r1"] and [n.name for n in topo.hosts] == ["r2", "s1"]
    assert any("r2: an FRR image but no /etc/frr/frr.conf" in n for n in topo.notes)
    host = topo.node_map["s1"].host
    assert host is not None and (host.ip, host.prefix, host.gateway) == ("192.0.2.5", "192.0.2.0/24", "192.0.2.1")
    result = cli.invoke(app, ["lab", "hosts", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output)["s1"] == {"netns": "loom-t1-s1", "tor": "r1", "address": "192.0.2.5",
                                                   "prefix": "192.0.2.0/24"}


def test_both_link_syntaxes_with_mtu_and_mac(tmp_path: Path) -> None:
    path = write_lab(tmp_path, {
        "defaults": {"kind": "linux"},
        "nodes": {"r1": {"binds": ["cfg/r1/frr.conf:/etc/frr/frr.conf:ro"]}, "r2": {"binds": ["cfg/r2:/etc/frr"]}},
        "links": [{"endpoints": ["r1:e1-1", "r2:e1-1"]},
                  {"type": "veth", "mtu": 9000, "endpoints": [{"node": "r1", "interface": "e1-2"},
                                                               {"node": "r2", "interface": "e1-2",
                                                                "mac": "02:00:00:00:00:02"}]}]})
    topo = load_topology(path)
    first, second = topo.links
    assert (first.a, first.a_port, first.b, first.b_port, first.mtu) == ("r1", "e1-1", "r2", "e1-1", None)
    assert (second.a_port, second.b_port, second.mtu, second.b_mac) == ("e1-2", "e1-2", 9000, "02:00:00:00:00:02")


def test_a_lab_path_is_a_directory_or_any_topology_file(tmp_path: Path) -> None:
    topo = {"defaults": {"kind": "linux"}, "nodes": {"r1": {"binds": ["cfg/r1:/etc/frr"]}}, "links": []}
    named = write_lab(tmp_path, topo, file="frr01.clab.yml", configs=("r1",))
    assert topology_path(tmp_path) == named and load_topology(tmp_path).name == "t1"
    other = write_lab(tmp_path / "x", topo, file="whatever.yaml", name="t2", configs=("r1",))
    assert load_topology(other).name == "t2"
    write_lab(tmp_path, topo, file="second.clab.yaml", configs=("r1",))
    assert "several topology files (frr01.clab.yml, second.clab.yaml)" in str(errors_of(tmp_path))
    write_lab(tmp_path, topo, file="topology.clab.yml", name="t3", configs=("r1",))
    assert load_topology(tmp_path).name == "t3"  # topology.clab.yml first, as before
    assert load_topology(FIXTURES / "ospf-triangle").name == "clab-ospf3"


def _lab(**node: Any) -> dict[str, Any]:
    return {"nodes": {"r1": {"kind": "linux", "binds": ["cfg/r1:/etc/frr"]},
                      "r2": {"kind": "linux", "binds": ["cfg/r2:/etc/frr"], **node}},
            "links": [{"endpoints": ["r1:eth1", "r2:eth1"]}]}


@pytest.mark.parametrize("topology, loc, words", [
    (_lab(kind="nokia_srlinux"), "topology.nodes.r2.kind", "kind 'nokia_srlinux' (from topology.nodes.r2.kind)"),
    ({"groups": {"spines": {"kind": "ceos"}}, "nodes": {"r2": {"group": "spines"}}, "links": []},
     "topology.nodes.r2.kind",
     "kind 'ceos' (from topology.groups.spines.kind) is not supported"),
    ({**_lab(), "defaults": {"kind": "srl"}, "nodes": {"r1": {"binds": ["cfg/r1:/etc/frr"]}}},
     "topology.nodes.r1.kind", "from topology.defaults.kind"),
    ({"nodes": {"r1": {"binds": ["cfg/r1:/etc/frr"]}}}, "topology.nodes.r1.kind", "no kind"),
    (_lab(kind="ovs-bridge"), "topology.nodes.r2.kind", "kind 'ovs-bridge'"),
    (_lab(kind="host"), "topology.nodes.r2.kind", "kind 'host'"),
    (_lab(**{"startup-config": "r2.cfg"}), "topology.nodes.r2.startup-config", "an FRR node binds its frr.conf"),
    ({**_lab(group="g"), "groups": {"g": {"license": "x.lic"}}}, "topology.groups.g.license", "for node r2"),
    (_lab(**{"network-mode": "host"}), "topology.nodes.r2.network-mode", "cannot be honoured"),
    (_lab(**{"env-files": ["a.env"]}), "topology.nodes.r2.env-files", "not supported"),
    (_lab(colour="blue"), "topology.nodes.r2.colour", "unknown node field"),
    (_lab(group="nowhere"), "topology.nodes.r2.group", "unknown group 'nowhere'"),
    (_lab(binds=["cfg/r9:/etc/frr"]), "topology.nodes.r2.binds[0]", "not found"),
    (_lab(binds=["just-a-path"]), "topology.nodes.r2.binds[0]", "is not 'host-path:container-path"),
    (_lab(env=["A=1"]), "topology.nodes.r2.env", "must be a mapping"),
])
def test_what_cannot_be_honoured_is_refused_with_its_location(tmp_path: Path, topology: dict[str, Any],
                                                              loc: str, words: str) -> None:
    path = write_lab(tmp_path, topology)
    found = errors_of(path)
    assert loc in found and words in found[loc], found
    result = cli.invoke(app, ["lab", "up", str(path)])
    assert result.exit_code == 2 and loc in result.output


@pytest.mark.parametrize("link, loc, words", [
    ({"type": "macvlan", "endpoint": {"node": "r1", "interface": "eth1"}, "host-interface": "en0"},
     "topology.links[0].type", "link type 'macvlan' cannot be honoured"),
    ({"type": "host", "endpoint": {"node": "r1", "interface": "eth1"}}, "topology.links[0].type", "'host'"),
    ({"type": "vxlan", "remote": "192.0.2.9", "vni": 10}, "topology.links[0].type", "'vxlan'"),
    ({"type": "mgmt-net", "endpoint": {"node": "r1", "interface": "eth1"}}, "topology.links[0].type", "mgmt-net"),
    ({"endpoints": ["r1:eth1", "r2:eth1"], "mtu": 20}, "topology.links[0].mtu", "not an MTU"),
    ({"endpoints": ["r1:eth1", {"node": "r2"}]}, "topology.links[0].endpoints[1]", "needs 'node' and 'interface'"),
    ({"endpoints": ["r1:eth1", {"node": "r2", "interface": "eth1", "vlan": 3}]},
     "topology.links[0].endpoints[1].vlan", "unknown endpoint field"),
    ({"endpoints": ["r1:eth1", "r2:eth1"], "speed": 10}, "topology.links[0].speed", "unknown link field"),
    ({"endpoints": ["r1:eth1", "r3:eth1"]}, "topology.links[0].endpoints[1]", "unknown node 'r3'"),
])
def test_links_that_cannot_be_honoured_are_refused(tmp_path: Path, link: dict[str, Any], loc: str,
                                                   words: str) -> None:
    found = errors_of(write_lab(tmp_path, {**_lab(), "links": [link]}))
    assert loc in found and words in found[loc], found


def test_docker_only_fields_are_accepted_with_one_note(tmp_path: Path) -> None:
    topology = _lab(**{"mgmt-ipv4": "172.20.0.3", "ports": ["80:80"], "startup-delay": 5,
                       "image-pull-policy": "always"})
    topology["nodes"]["r1"]["mgmt-ipv6"] = "2001:db8::3"
    path = write_lab(tmp_path, topology)
    doc = yaml.safe_load(path.read_text())
    doc["mgmt"] = {"network": "m", "ipv4-subnet": "172.20.0.0/24"}
    path.write_text(yaml.safe_dump(doc))
    topo = load_topology(path)
    assert len(topo.notes) == 1
    assert all(w in topo.notes[0] for w in ("mgmt (the lab)", "mgmt-ipv4 (r2)", "mgmt-ipv6 (r1)", "ports (r2)"))


def test_router_daemons_come_from_the_daemons_file_or_the_configuration(tmp_path: Path) -> None:
    conf = tmp_path / "frr.conf"
    conf.write_text("hostname r\n!\nrouter bgp 65001\n!\nrouter isis core\n net 49.0001.0000.0000.0001.00\n!\n"
                    "ip route 10.0.0.0/8 blackhole\n")
    runs = lambda d: None  # noqa: E731 - every daemon runs
    assert plan_daemons(conf, None, runs).start == ["zebra", "staticd", "bgpd", "isisd"]
    daemons = tmp_path / "daemons"
    daemons.write_text("bgpd=yes\nisisd=yes\nospfd=no\nldpd=yes\nbfdd=yes\nvtysh_enable=yes\n")
    no_mpls = lambda d: "no MPLS" if d == "ldpd" else None  # noqa: E731
    plan = plan_daemons(conf, daemons, no_mpls)
    assert plan.start == ["zebra", "staticd", "bgpd", "isisd", "bfdd"]
    assert plan.skipped == ["ldpd skipped: no MPLS"] and plan.errors == []
    conf.write_text(conf.read_text() + "mpls ldp\n router-id 10.0.0.1\n!\n")
    assert plan_daemons(conf, daemons, no_mpls).errors == [
        "frr.conf line 9 'mpls ldp' needs ldpd, which cannot run here: no MPLS"]
    daemons.write_text("bgpd=yes\n")
    errors = plan_daemons(conf, daemons, runs).errors
    assert any("line 5 'router isis core' needs isisd" in e and "does not enable" in e for e in errors), errors


def test_the_fixture_labs_read_as_their_authors_meant() -> None:
    ospf = load_topology(FIXTURES / "ospf-triangle" / "frr01.clab.yml")
    assert [n.name for n in ospf.routers] == ["r1", "r2", "r3"]
    assert {n.name: n.labels.get("role") for n in ospf.nodes} == {
        "r1": "router", "r2": "router", "r3": "router", "pc1": "pc", "pc2": "pc", "pc3": "pc"}
    assert ospf.node_map["pc1"].labels == {"role": "pc", "site": "east"}
    assert ospf.node_map["r3"].daemons_file == FIXTURES / "ospf-triangle" / "config" / "r3" / "daemons"
    ls = load_topology(FIXTURES / "ebgp-leafspine")
    assert {lk.mtu for lk in ls.links} == {9000, None} and ls.node_map["h1"].image == "alpine:3.20"
    assert ls.node_map["spine2"].image == "quay.io/frrouting/frr:8.4.1"
    isis = load_topology(FIXTURES / "isis-pair")
    assert [n.name for n in isis.bridges] == ["lan-a"] and [n.name for n in isis.hosts] == ["ha", "hb"]
    assert {n.name: n.daemons_file is None for n in isis.routers} == {"ra": False, "rb": True}


def test_magic_variables_and_the_exec_environment(tmp_path: Path) -> None:
    path = write_lab(tmp_path, {
        "defaults": {"kind": "linux", "binds": ["cfg/__clabNodeName__:/etc/frr"],
                     "exec": ["ip link set dev eth1 alias __clabNodeName__"]},
        "nodes": {"r1": {"labels": {"fabric.role": "spine"}, "env": {"CLAB_LABEL_CONTAINERLAB": "mine"}},
                  "r2": {}},
        "links": [{"endpoints": ["r1:eth1", "r2:eth1"]}]}, name="magic")
    topo = load_topology(path)
    r1, r2 = topo.node_map["r1"], topo.node_map["r2"]
    assert r1.frr_conf == tmp_path / "cfg" / "r1" / "frr.conf" and r2.frr_conf == tmp_path / "cfg" / "r2" / "frr.conf"
    assert r2.exec == ("ip link set dev eth1 alias r2",)
    env = exec_env(topo.name, r1.name, r1.kind, r1.group, r1.labels, r1.env)
    assert env["CLAB_LABEL_FABRIC_ROLE"] == "spine" and env["CLAB_LABEL_CLAB_NODE_NAME"] == "r1"
    assert env["CLAB_LABEL_CONTAINERLAB"] == "mine"  # the node's env comes last
    assert magic_vars("__clabNodeDir__/x", "magic", "r1", tmp_path) == f"{tmp_path}/clab-magic/r1/x"
