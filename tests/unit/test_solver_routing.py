"""Routing semantics: RFC 7938 BGP (valleys, drains, missing links, anycast, failures) and IS-IS ECMP.

Expected next hops come from the fabric's structure or from networkx
reference computations, never from the solver's own code.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest

from controller.gen import clos_document
from controller.model.intent import validate_intent
from solver.core.routing import next_hops


def small_clos(pods: int = 2, tors: int = 2, planes: int = 2, spines: int = 1, **kw: Any) -> dict[str, Any]:
    return clos_document(pods=pods, tors=tors, planes=planes, spines=spines, scale_to_ecmp=False, **kw)


def drop_link(doc: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    doc = dict(doc)
    doc["links"] = [x for x in doc["links"] if {x["a"], x["b"]} != {a, b}]
    return doc


def neighbors(hops: tuple[tuple[str, str], ...]) -> set[str]:
    return {nb for _port, nb in hops}


def test_full_clos_bgp_equals_all_shortest_paths() -> None:
    """In a complete Clos every shortest path is valley-free, so BGP multipath = all shortest paths."""
    doc = small_clos(pods=3, tors=2, planes=2, spines=2)
    it = validate_intent(doc)
    g = nx.Graph([(x["a"], x["b"]) for x in doc["links"]])
    nh = next_hops(it)
    for p in doc["prefixes"]:
        origin = p["origins"][0]
        dist = nx.single_source_shortest_path_length(g, origin)
        routes = nh[p["prefix"]]
        assert origin not in routes
        for v in g.nodes:
            if v == origin:
                continue
            expected = {u for u in g[v] if dist[u] == dist[v] - 1}
            assert neighbors(routes[v]) == expected, (p["prefix"], v)


def test_valley_is_prevented_when_a_leaf_loses_its_tor() -> None:
    doc = drop_link(small_clos(), "tor-0-0", "leaf-0-0")
    nh = next_hops(validate_intent(doc))["10.0.0.0/24"]
    # leaf-0-0 could only reach tor-0-0 down-up-down (via spine and back into pod 0, or via tor-0-1):
    # AS-path loop prevention rejects both, so the route is withdrawn there
    assert "leaf-0-0" not in nh
    assert "spine-0-0" not in nh  # nothing in plane 0 has it from below
    assert "leaf-1-0" not in nh
    assert neighbors(nh["tor-0-1"]) == {"leaf-0-1"}
    assert neighbors(nh["tor-1-0"]) == {"leaf-1-1"}
    assert neighbors(nh["spine-1-0"]) == {"leaf-0-1"}


def test_same_pod_leaves_give_no_valley_path_between_tors() -> None:
    """tor-0-1 reaches tor-0-0 only through leaves that link to tor-0-0 directly."""
    doc = drop_link(small_clos(planes=3), "tor-0-0", "leaf-0-2")
    nh = next_hops(validate_intent(doc))["10.0.0.0/24"]
    assert neighbors(nh["tor-0-1"]) == {"leaf-0-0", "leaf-0-1"}
    assert "leaf-0-2" not in nh


def test_drained_spine_carries_no_transit_but_keeps_routes() -> None:
    doc = small_clos(spines=2)
    doc["policies"] = [{"kind": "drain", "target": "spine-0-0"}]
    nh = next_hops(validate_intent(doc))
    for prefix, routes in nh.items():
        for dev, hops in routes.items():
            assert "spine-0-0" not in neighbors(hops), (prefix, dev)
    assert neighbors(nh["10.0.0.0/24"]["spine-0-0"]) == {"leaf-0-0"}  # it still has routes itself
    assert neighbors(nh["10.1.0.0/24"]["leaf-0-0"]) == {"spine-0-1"}


def test_drained_link_is_not_used() -> None:
    doc = small_clos()
    doc["policies"] = [{"kind": "drain", "target": "tor-0-0:eth1"}]  # tor-0-0 <-> leaf-0-0
    nh = next_hops(validate_intent(doc))
    assert neighbors(nh["10.1.0.0/24"]["tor-0-0"]) == {"leaf-0-1"}
    assert "leaf-0-0" not in nh["10.0.0.0/24"]  # and no valley around the drained link


def test_drained_tor_still_originates_and_routes() -> None:
    doc = small_clos()
    doc["policies"] = [{"kind": "drain", "target": "tor-0-0"}]
    nh = next_hops(validate_intent(doc))
    assert neighbors(nh["10.0.0.0/24"]["leaf-0-0"]) == {"tor-0-0"}
    assert neighbors(nh["10.1.0.0/24"]["tor-0-0"]) == {"leaf-0-0", "leaf-0-1"}


def test_anycast_prefers_the_nearer_origin() -> None:
    doc = small_clos()
    doc["prefixes"] = [*doc["prefixes"], {"prefix": "10.9.0.0/24", "origins": ["tor-0-0", "tor-1-1"]}]
    nh = next_hops(validate_intent(doc))["10.9.0.0/24"]
    assert "tor-0-0" not in nh and "tor-1-1" not in nh
    assert neighbors(nh["tor-0-1"]) == {"leaf-0-0", "leaf-0-1"}
    assert neighbors(nh["leaf-0-0"]) == {"tor-0-0"}
    assert neighbors(nh["leaf-1-1"]) == {"tor-1-1"}
    assert neighbors(nh["spine-0-0"]) == {"leaf-0-0", "leaf-1-0"}


def test_failures_withdraw_routes() -> None:
    doc = small_clos()
    it = validate_intent(doc)
    nh = next_hops(it, failed_devices={"spine-0-0"})
    assert neighbors(nh["10.1.0.0/24"]["tor-0-0"]) == {"leaf-0-1"}
    assert "spine-0-0" not in nh["10.1.0.0/24"]
    link = next(x for x in it.links if {x.a, x.b} == {"leaf-1-1", "spine-1-0"})
    nh = next_hops(it, failed_devices={"spine-0-0"}, failed_links={link.key})
    assert "tor-0-0" not in nh["10.1.0.0/24"]  # no path left: withdrawn
    assert next_hops(it, failed_devices={"tor-1-0"}).get("10.1.0.0/24", {}) == {}


def isis_doc(edges: list[tuple[str, str, int]], origin: str) -> dict[str, Any]:
    names = sorted({n for e in edges for n in e[:2]})
    ports: dict[str, int] = {}

    def port(n: str) -> str:
        ports[n] = ports.get(n, 0) + 1
        return f"e{ports[n]}"

    return {"name": "g", "routing": "isis", "devices": [{"name": n} for n in names],
            "links": [{"a": a, "a_port": port(a), "b": b, "b_port": port(b), "metric": m} for a, b, m in edges],
            "prefixes": [{"prefix": "10.0.0.0/24", "origins": [origin]}]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_isis_ecmp_matches_networkx(seed: int) -> None:
    g = nx.gnm_random_graph(14, 30, seed=seed)
    import random

    rng = random.Random(seed)
    edges = [(f"r{a}", f"r{b}", rng.choice([1, 2, 3])) for a, b in g.edges]
    doc = isis_doc(edges, "r0")
    nh = next_hops(validate_intent(doc))["10.0.0.0/24"]
    ref = nx.Graph()
    ref.add_weighted_edges_from(edges)
    dist = nx.single_source_dijkstra_path_length(ref, "r0")
    for v in ref.nodes:
        if v == "r0" or v not in dist:
            assert v not in nh
            continue
        expected = {u for u in ref[v] if dist[u] + ref[v][u]["weight"] == dist[v]}
        assert neighbors(nh[v]) == expected


def test_isis_drained_router_is_not_transit() -> None:
    doc = isis_doc([("a", "b", 1), ("b", "d", 1), ("a", "c", 5), ("c", "d", 5)], "d")
    doc["policies"] = [{"kind": "drain", "target": "b"}]
    nh = next_hops(validate_intent(doc))["10.0.0.0/24"]
    assert neighbors(nh["a"]) == {"c"}
    assert neighbors(nh["b"]) == {"d"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ospf_routes_are_isis_routes(seed: int) -> None:
    """The same fabric under ``routing: ospf`` and ``isis``: the same route classes, next hops and DAGs,
    shortest and ``loop_free`` (no drain: the two differ only in how a drained router is kept out)."""
    import random

    from solver.core.fabric import build_fabric
    from solver.core.routing import route_classes

    rng = random.Random(seed)
    g = nx.gnm_random_graph(12, 24, seed=seed)
    doc = isis_doc([(f"r{a}", f"r{b}", rng.choice([1, 2, 5])) for a, b in g.edges], "r0")
    for mode in ("shortest", "loop_free"):
        doc["policies"] = [{"kind": "paths", "mode": mode}]
        isis = route_classes(build_fabric(validate_intent(doc)))
        ospf = route_classes(build_fabric(validate_intent({**doc, "routing": "ospf"})))
        assert [(c.origins, c.prefixes, c.nexthops, c.dag, c.dist) for c in ospf] == \
            [(c.origins, c.prefixes, c.nexthops, c.dag, c.dist) for c in isis]
        assert any(c.nexthops for c in ospf)


def test_ospf_drained_router_is_a_stub_router() -> None:
    """RFC 6987, as FRR's ``max-metric router-lsa administrative``: a drained OSPF router's links cost 65535.
    Where another way exists it carries no transit (as IS-IS's overload bit); its own next hops are the
    least costly past that first hop; where it is the only way, it still carries transit (IS-IS withdraws)."""
    doc = isis_doc([("a", "b", 1), ("b", "d", 1), ("a", "c", 5), ("c", "d", 5), ("b", "e", 1)], "d")
    doc["routing"] = "ospf"
    doc["policies"] = [{"kind": "drain", "target": "b"}]
    doc["prefixes"].append({"prefix": "10.0.1.0/24", "origins": ["e"]})
    nh = next_hops(validate_intent(doc))
    assert neighbors(nh["10.0.0.0/24"]["a"]) == {"c"}
    assert neighbors(nh["10.0.0.0/24"]["b"]) == {"d"}
    assert neighbors(nh["10.0.0.0/24"]["e"]) == {"b"}  # e's only way out is through b
    assert neighbors(nh["10.0.1.0/24"]["a"]) == {"b"}
    doc["routing"] = "isis"
    nh = next_hops(validate_intent(doc))
    assert "e" not in nh["10.0.0.0/24"] and "a" not in nh["10.0.1.0/24"]


def reference_bgp(names: list[str], asn: dict[str, int], edges: list[tuple[str, str]], origins: set[str],
                  drained: set[str], left_out: set[str] = frozenset()) -> dict[str, set[str]]:
    """RFC 7938 path-vector rounds with explicit AS paths (the rules of the routing module's
    docstring): next-hop neighbors per device toward ``origins``."""
    nbrs: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        nbrs[a].append(b)
        nbrs[b].append(a)
    dist = {o: 0 for o in origins}
    path: dict[str, tuple[int, ...]] = {o: () for o in origins}
    best_from: dict[str, str] = {}
    hops: dict[str, set[str]] = {}
    frontier, k = sorted(origins), 0
    while frontier:
        k += 1
        reached = []
        for u in frontier:
            if u in drained and u not in origins:
                continue
            adv = (asn[u], *path[u])
            for w in nbrs[u]:
                if w in left_out or w in origins or asn[w] in adv or dist.get(w, k) != k:
                    continue
                if w not in dist:
                    dist[w] = k
                    reached.append(w)
                hops.setdefault(w, set()).add(u)
                if w not in best_from or u < best_from[w]:
                    best_from[w], path[w] = u, adv
        frontier = reached
    return hops


@pytest.mark.parametrize("seed", range(8))
def test_compiled_bgp_matches_explicit_as_paths(seed: int) -> None:
    """Random graphs with shared ASNs (so loop prevention and the best path's tie-break decide
    routes), drained devices, anycast origins and devices left out: the compiled rounds give
    the next hops that explicit AS-path tuples give. (Intents must follow a Clos's ASN plan,
    so the fabric's indexes are built here directly.)"""
    import random

    import numpy as np

    from solver.core.fabric import Fabric
    from solver.core.routing import PathVector, _bgp_class

    rng = random.Random(seed)
    n = 24
    g = nx.gnm_random_graph(n, 60, seed=seed)
    names = [f"r{rng.randrange(1000):03d}-{i}" for i in range(n)]  # name order is not index order
    asn = {x: 65000 + rng.randrange(8) for x in names}  # few ASNs: many paths loop
    edges = [(names[a], names[b]) for a, b in g.edges]
    drained = set(rng.sample(names, 3))
    tail = np.array([x for a, b in g.edges for x in (a, b)], dtype=np.int64)
    head = np.array([x for a, b in g.edges for x in (b, a)], dtype=np.int64)
    adj: list[list[tuple[int, int, str]]] = [[] for _ in names]
    for arc, (t, h) in enumerate(zip(tail.tolist(), head.tolist(), strict=True)):
        adj[t].append((arc, h, f"e{arc}"))
    rng.shuffle(adj[0])  # adjacency order must not matter
    fab = Fabric(intent=None, names=tuple(names), index={x: i for i, x in enumerate(names)},  # type: ignore[arg-type]
                 asn=tuple(asn[x] for x in names), alive=np.ones(n, dtype=bool),
                 drained=np.array([x in drained for x in names]), arc_tail=tail, arc_head=head,
                 arc_cap=np.ones(len(tail)), arc_metric=np.ones(len(tail), dtype=np.int64),
                 arc_port=tuple(f"e{a}" for a in range(len(tail))), adj=tuple(tuple(x) for x in adj),
                 adj_indptr=np.cumsum([0, *(len(x) for x in adj)]),
                 adj_arc=np.array([a for x in adj for a, _h, _p in x], dtype=np.int64))
    pv = PathVector(fab)
    left_out = set(rng.sample(names[6:], 5))
    active = np.array([x not in left_out for x in names])
    routed = 0
    for origins in ({names[0]}, {names[1], names[2]}, {names[3], names[4], names[5]}):
        ix = tuple(fab.index[o] for o in origins)
        for out, act in ((set(), None), (left_out, active)):
            want = reference_bgp(names, asn, edges, origins, drained, out)
            got_arcs = _bgp_class(fab, ix, act, pv)
            got = {names[v]: {names[int(head[a])] for a in arcs} for v, arcs in got_arcs.items()}
            assert got == want, (seed, origins)
            assert all(list(arcs) == sorted(arcs) and int(tail[arcs[0]]) == v for v, arcs in got_arcs.items())
            routed += len(want)
    assert routed > 30  # not vacuous
