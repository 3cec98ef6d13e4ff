"""Pins through the REST API (DESIGN.md "Adoption"): a link's ``a_address``/``b_address`` and a device's
``router_id`` are written, read back and validated as the whole intent they make, with located 422s."""

from __future__ import annotations

from tests.apps import Api


def test_pins_are_written_read_back_and_validated(api: Api) -> None:
    half = api("PATCH", "/v1/links/leaf-0-0:eth1", json={"a_address": "192.168.1.1/30"}, headers={"If-Match": '"1"'})
    assert half.status_code == 422, half.text
    assert [e["loc"] for e in half.json()["errors"]] == [f"links[{_index(api, 'leaf-0-0:eth1')}].b_address"]
    both = api("PATCH", "/v1/links/leaf-0-0:eth1", json={"a_address": "192.168.1.1/30", "b_address": "192.168.1.2/30"})
    assert both.status_code == 200, both.text
    link = api("GET", "/v1/links/leaf-0-0:eth1", role="viewer").json()
    assert {link["a_address"], link["b_address"]} == {"192.168.1.1/30", "192.168.1.2/30"}
    rid = api("PATCH", "/v1/devices/tor-0-0", json={"router_id": "10.9.9.9"})
    assert rid.status_code == 200 and api("GET", "/v1/devices/tor-0-0", role="viewer").json()["router_id"] == "10.9.9.9"
    twice = api("PATCH", "/v1/devices/tor-0-1", json={"router_id": "10.9.9.9"})
    assert twice.status_code == 422 and "already used by 'tor-0-0'" in twice.json()["errors"][0]["msg"], twice.text
    bad = api("PATCH", "/v1/devices/tor-0-1", json={"router_id": "10.9.9"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["loc"].endswith("router_id"), bad.text
    exported = api("GET", "/v1/intent", role="viewer").json()
    assert sum("a_address" in lk for lk in exported["links"]) == 1
    assert [d["name"] for d in exported["devices"] if "router_id" in d] == ["tor-0-0"]


def _index(api: Api, link_id: str) -> int:
    links = api("GET", "/v1/intent", role="viewer").json()["links"]
    return next(i for i, lk in enumerate(links)
                if link_id in (f"{lk['a']}:{lk['a_port']}", f"{lk['b']}:{lk['b_port']}"))
