"""The API under hostile input, against a real ``loom serve`` over HTTP on 127.0.0.1 (one per module).

Classes of input, not cases: nesting (JSON and YAML, deep and wide), size (over the
route's limit with ``Content-Length``, chunked without it, and a 200 MB upload from
nobody), encodings (invalid, overlong and CESU UTF-8, UTF-16, lone surrogate escapes),
numbers at and beyond every bound (NaN, Infinity, 1e308, 1e-320, huge integers,
booleans) and bodies from an unauthenticated caller and from a viewer on every write
route, enumerated from the server's own OpenAPI document. Every refusal asserts its
status and problem type, that the process still runs (same pid, ``/healthz``) and that
nothing was stored (head revision, revisions, changes and tokens unchanged). Every
status the server answered is, at the end, checked against the OpenAPI document of
the operation that answered it.

The server runs with small limits (256 KiB per body, 1 MiB per whole intent, 100,000
values per document) so that the bounds are crossed quickly; the defaults are the
settings' (``tests/unit/test_input_bounds.py`` reads the same code in-process).
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serving import LoomServer

TOKEN = "hostile-suite-admin-token-7fQ2xLm9Zr4Kp8Wd"
BODY_LIMIT = 256 * 1024
DOCUMENT_LIMIT = 1024 * 1024
NODES = 100_000
JSON = {"Content-Type": "application/json"}
YAML = {"Content-Type": "application/yaml"}
WRITES = ("POST", "PUT", "PATCH", "DELETE")

#: (method, OpenAPI path, status) of every answer, for the last test
ANSWERED: list[tuple[str, str, int]] = []


class Hostile:
    """The server, its tokens by role, and the checks every refusal makes."""

    def __init__(self, server: LoomServer):
        self.server = server
        self.spec: dict[str, Any] = httpx.get(server.url + "/openapi.json", timeout=30).json()
        self.templates = {p: re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(p)) + "$")
                          for p in self.spec["paths"]}
        assert server.proc is not None
        self.pid = server.proc.pid
        self.client = httpx.Client(base_url=server.url, timeout=120)  # keep-alive: a suite of thousands of requests
        self.tokens = {"admin": TOKEN}
        for role in ("viewer", "operator"):
            r = self.request("POST", "/v1/tokens", "admin", json={"name": f"{role}-hostile", "role": role})
            assert r.status_code == 201, r.text
            self.tokens[role] = r.json()["token"]

    # -- requests ---------------------------------------------------------------------------
    def template(self, method: str, path: str) -> str | None:
        found = [p for p, rx in self.templates.items() if rx.match(path) and method.lower() in self.spec["paths"][p]]
        literal = [p for p in found if "{" not in p]
        return (literal or found or [None])[0]

    def request(self, method: str, path: str, role: str | None = "operator", *, headers: dict[str, str] | None = None,
                **kw: Any) -> httpx.Response:
        auth = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        r = self.client.request(method, path, headers={**auth, **(headers or {})}, **kw)
        template = self.template(method, path)
        if template is not None:
            ANSWERED.append((method, template, r.status_code))
        return r

    # -- what a refusal must leave as it was ------------------------------------------------
    def stored(self) -> tuple[Any, ...]:
        """What a write would change: the head and active revisions (a new revision is a new head), the
        changes, the tokens."""
        status = self.request("GET", "/v1/status", "admin").json()
        changes = int(self.request("GET", "/v1/changes?limit=1", "admin").headers["x-total-count"])
        tokens = len(self.request("GET", "/v1/tokens", "admin").json())
        return status["head_revision"], status["active_revision"], changes, tokens

    def alive(self) -> None:
        assert self.server.proc is not None and self.server.proc.poll() is None, "the server process died"
        assert self.server.proc.pid == self.pid
        assert self.client.get("/healthz").status_code == 200

    def refused(self, status: int, method: str, path: str, role: str | None = "operator", *, kind: str | None = None,
                **kw: Any) -> dict[str, Any]:
        """Send, and check the refusal: ``status`` (and the problem ``kind``), alive, nothing stored."""
        before = self.stored()
        r = self.request(method, path, role, **kw)
        assert r.status_code == status, (r.status_code, r.text[:500])
        assert r.headers["content-type"] == "application/problem+json", r.headers
        body: dict[str, Any] = r.json()
        if kind is not None:
            assert body["type"] == f"urn:loom:problem:{kind}", body
        self.alive()
        assert self.stored() == before, "a refused request stored something"
        return body

    def write_routes(self) -> list[tuple[str, str, bool]]:
        """Every write route of the OpenAPI document: (method, URL with its parameters filled, takes a body)."""
        out = []
        for path, ops in self.spec["paths"].items():
            url = re.sub(r"\{(change_id|revision|a|b)\}", "1", path)
            url = re.sub(r"\{[^}]+\}", "x", url)
            for method, op in ops.items():
                if method.upper() in WRITES:
                    out.append((method.upper(), url, "requestBody" in op))
        return out

    def rss_mb(self) -> tuple[float, float]:
        """The server's resident memory and its peak (MB)."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    base = tmp_path_factory.mktemp("hostile")
    server = LoomServer(base, ["--example", "--db", f"sqlite:///{base / 'loom.db'}"], TOKEN,
                        env={"LOOM_MAX_BODY_BYTES": str(BODY_LIMIT),
                             "LOOM_MAX_DOCUMENT_BODY_BYTES": str(DOCUMENT_LIMIT),
                             "LOOM_MAX_DOCUMENT_NODES": str(NODES), "LOOM_TELEMETRY_INTERVAL_S": "0"})
    server.start()
    try:
        hostile = Hostile(server)
        yield hostile
        hostile.client.close()
    finally:
        server.stop()


def example(h: Hostile) -> dict[str, Any]:
    doc: dict[str, Any] = h.request("GET", "/v1/intent", "viewer").json()
    return doc


def raw_exchange(h: Hostile, head: bytes, body: bytes, timeout: float = 20.0) -> tuple[int, bytes, float]:
    """Send ``head`` and ``body`` on a socket of our own and read the answer until the server closes:
    (status, the answer's header block, seconds). Nothing more of the body is sent."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", h.server.port), timeout=timeout) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head_block = data.split(b"\r\n\r\n", 1)[0]
    return int(head_block.split()[1]), head_block.lower(), time.monotonic() - start


# -- nesting -------------------------------------------------------------------------------------

DEEP = [
    ("json", b"[" * 100_000 + b"]" * 100_000),
    ("json", b'{"a":' * 40_000 + b"1" + b"}" * 40_000),
    ("json", b"[" * 200_000),                 # unbalanced, 200 KB
    ("yaml", b"[" * 30_000),                  # flow: libyaml's composer recursed in C
    ("yaml", b"- " * 30_000 + b"x"),          # block sequences
    ("yaml", b"a:\n" + b"".join(b" " * i + b"a:\n" for i in range(1, 200)) + b" " * 200 + b"x"),
]


@pytest.mark.parametrize("fmt,body", DEEP, ids=[f"{f}-{i}" for i, (f, _) in enumerate(DEEP)])
@pytest.mark.parametrize("route", [("PUT", "/v1/intent"), ("POST", "/v1/jobs/what-if")])
def test_deep_documents_are_refused_without_recursion(hostile: Hostile, fmt: str, body: bytes,
                                                      route: tuple[str, str]) -> None:
    method, path = route
    problem = hostile.refused(422, method, path, content=body,
                              headers=YAML if fmt == "yaml" else JSON)
    assert problem["type"] in ("urn:loom:problem:document-too-deep", "urn:loom:problem:invalid-intent"), problem


def test_deep_json_is_refused_on_every_route_that_takes_a_body(hostile: Hostile) -> None:
    routes = [(m, p) for m, p, takes in hostile.write_routes() if takes]
    assert len(routes) >= 15
    for method, path in routes:
        role = "admin" if path.startswith("/v1/tokens") else "operator"
        problem = hostile.refused(422, method, path, role, content=b"[" * 100_000 + b"]" * 100_000,
                                  headers=JSON, kind="document-too-deep")
        assert "100000 levels" in problem["detail"], (method, path, problem)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_wide_documents_past_the_value_bound_are_413(hostile: Hostile, fmt: str) -> None:
    n = NODES + 10
    body = (b"[" + b"0," * n + b"0]") if fmt == "json" else b"".join(b"- 0\n" for _ in range(n))
    assert len(body) < DOCUMENT_LIMIT
    problem = hostile.refused(413, "PUT", "/v1/intent", content=body,
                              headers=JSON if fmt == "json" else YAML,
                              kind="document-too-large")
    assert str(NODES) in problem["detail"]


def test_wide_but_bounded_is_an_invalid_intent_not_a_crash(hostile: Hostile) -> None:
    doc = example(hostile)
    doc["demands"] = doc["demands"] * 1000  # duplicates: refused whole, every one located
    hostile.refused(422, "PUT", "/v1/intent", json=doc, kind="invalid-intent")


# -- size ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("route,limit", [(("POST", "/v1/devices"), BODY_LIMIT),
                                         (("PATCH", "/v1/links/leaf-0-0:eth1"), BODY_LIMIT),
                                         (("PUT", "/v1/intent"), DOCUMENT_LIMIT),
                                         (("POST", "/v1/changes"), DOCUMENT_LIMIT)])
def test_a_body_over_the_route_limit_is_413_declared_or_chunked(hostile: Hostile, route: tuple[str, str],
                                                                limit: int) -> None:
    method, path = route
    body = b'{"name": "' + b"x" * limit + b'"}'
    problem = hostile.refused(413, method, path, content=body, headers=JSON,
                              kind="body-too-large")
    assert str(limit) in problem["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        yield b'{"name": "'
        for _ in range(4 * limit // 65536):
            yield b"x" * 65536
        yield b'"}'
    hostile.refused(413, method, path, content=chunks(), headers=JSON, kind="body-too-large")


def test_a_whole_intent_fits_where_an_object_would_not(hostile: Hostile) -> None:
    doc = example(hostile)
    doc["name"] = "dc1"
    padded = json.dumps(doc, indent=1).encode() + b" " * BODY_LIMIT  # over an object route's limit
    assert BODY_LIMIT < len(padded) < DOCUMENT_LIMIT
    r = hostile.request("PUT", "/v1/intent", content=padded, headers=JSON)
    assert r.status_code == 200, r.text  # the same document: no new revision
    hostile.alive()


def test_an_unauthenticated_200_mb_upload_is_answered_before_it_is_sent(hostile: Hostile) -> None:
    rss, peak = hostile.rss_mb()
    head = (b"POST /v1/devices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 209715200\r\n\r\n")
    status, answer, seconds = raw_exchange(hostile, head, b'{"name": "' + b"x" * 65536)
    assert status == 401 and b"connection: close" in answer and b"www-authenticate: bearer" in answer
    assert seconds < 10  # answered with 64 KB of 200 MB sent: nothing waited for the rest
    # the same upload sent whole (httpx writes it all, then reads): 401, and nothing of it kept
    before = hostile.stored()
    r = httpx.post(hostile.server.url + "/v1/devices", content=b"[" * (200 * 2**20), headers=JSON, timeout=120)
    assert r.status_code == 401 and r.headers["connection"] == "close"
    hostile.alive()
    assert hostile.stored() == before
    after_rss, after_peak = hostile.rss_mb()
    assert after_peak - peak < 64 and after_rss - rss < 64, (rss, peak, after_rss, after_peak)


def test_a_viewer_cannot_make_the_server_read_either(hostile: Hostile) -> None:
    token = hostile.tokens["viewer"].encode()
    head = (b"PUT /v1/intent HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + token + b"\r\nContent-Length: 209715200\r\n\r\n")
    status, answer, _ = raw_exchange(hostile, head, b"[" * 1024)
    assert status == 403 and b"connection: close" in answer
    hostile.alive()


# -- encodings -----------------------------------------------------------------------------------

BAD_UTF8 = {
    "invalid byte": b'{"name": "x\xff"}',
    "overlong": b'{"name": "\xc0\xaf"}',
    "cesu surrogate": b'{"name": "\xed\xa0\x80"}',
    "truncated": b'{"name": "\xe2\x82"}',
    "utf-16": '{"name": "x"}'.encode("utf-16"),
}


@pytest.mark.parametrize("name", list(BAD_UTF8))
def test_bytes_that_are_not_utf8_are_400_on_every_route_that_takes_a_body(hostile: Hostile, name: str) -> None:
    for method, path, takes in hostile.write_routes():
        if not takes:
            continue
        role = "admin" if path.startswith("/v1/tokens") else "operator"
        problem = hostile.refused(400, method, path, role, content=BAD_UTF8[name],
                                  headers=JSON, kind="invalid-encoding")
        assert "not UTF-8" in problem["detail"], (method, path, problem)


def test_a_yaml_intent_that_is_not_utf8_is_400(hostile: Hostile) -> None:
    hostile.refused(400, "PUT", "/v1/intent", content=b"name: dc\xff\n", headers=YAML,
                    kind="invalid-encoding")


def test_lone_surrogate_escapes_are_refused_where_they_are(hostile: Hostile) -> None:
    doc = json.dumps(example(hostile)).replace('"tor-0-0"', '"tor-0-0\\ud800"', 1).encode()
    problem = hostile.refused(400, "PUT", "/v1/intent", content=doc, headers=JSON,
                              kind="invalid-encoding")
    assert problem["errors"][0]["loc"] == "devices[0].name"
    for body in (b'{"name": "r\\ud800"}', b'{"name": "r\\udfff"}', b'{"name": "\\udc00\\ud800"}'):
        problem = hostile.refused(400, "POST", "/v1/devices", content=body, headers=JSON,
                                  kind="invalid-encoding")
        assert problem["errors"][0]["loc"] == "body.name"
    hostile.refused(422, "POST", "/v1/jobs/what-if", content=b'name: "j\\ud800"\n',
                    headers=YAML)  # libyaml's own refusal of the escape


def test_a_surrogate_pair_is_text(hostile: Hostile) -> None:
    r = hostile.request("PATCH", "/v1/failure-domains/plane-0-power", json={"kind": "power \U0001f50c"})
    assert r.status_code == 200 and r.json()["kind"] == "power \U0001f50c"
    assert hostile.request("PATCH", "/v1/failure-domains/plane-0-power", json={"kind": "power"}).status_code == 200


# -- numbers -------------------------------------------------------------------------------------

#: JSON literals past every bound, by what they are
BEYOND = {"nan": b"NaN", "infinity": b"Infinity", "-infinity": b"-Infinity", "1e308": b"1e308",
          "1e400": b"1e400", "1e-320": b"1e-320", "5e-324": b"5e-324", "10^100": b"1" + b"0" * 100,
          "-10^100": b"-1" + b"0" * 100, "5000 digits": b"9" * 5000, "true": b"true", "text": b'"many"'}
#: (PATCH path, field, values at its bounds that are taken, JSON literals just past them)
NUMBERS = [
    ("/v1/links/leaf-0-0:eth1", "capacity_gbps", [0.001, 1e6], [b"0.0009", b"1000001", b"0"]),
    ("/v1/links/leaf-0-0:eth1", "metric", [1, 16777214], [b"0", b"16777215", b"1.5"]),
    # a pod or a plane is a group: one device's alone never changes validly (test_input_bounds
    # renumbers whole groups to the bounds); here only the values past them
    ("/v1/devices/leaf-0-0", "pod", [], [b"-1", b"2147483648"]),
    ("/v1/devices/leaf-0-0", "plane", [], [b"-1", b"2147483648"]),
    ("/v1/devices/spine-0-0", "max_ecmp_entries", [1, 65536], [b"0", b"65537"]),
    ("/v1/devices/spine-0-0", "asn", [], [b"0", b"4294967296", b"23456"]),
    ("/v1/demands/tor-0-0,10.0.1.0_24", "gbps", [0, 1e-6, 1e6], [b"-1", b"1e-7", b"1000001"]),
    ("/v1/policies/utilization_limit", "max", [0.001, 10], [b"0.0009", b"10.01", b"0"]),
    ("/v1/policies/failure_tolerance", "max_utilization", [0.001, 10], [b"0.0009", b"10.01"]),
]


@pytest.mark.parametrize("path,field,good,bad", NUMBERS, ids=[n[1] for n in NUMBERS])
def test_numbers_at_their_bounds_are_taken_and_beyond_them_refused(hostile: Hostile, path: str, field: str,
                                                                  good: list[float], bad: list[bytes]) -> None:
    original = hostile.request("GET", path, "viewer").json().get(field)
    for literal in [*bad, *BEYOND.values()]:
        body = b'{"' + field.encode() + b'": ' + literal + b"}"
        problem = hostile.refused(422, "PATCH", path, content=body, headers=JSON)
        assert problem["errors"][0]["loc"] in (f"body.{field}", "body", f"{field}") or \
            any(e["loc"].endswith(f".{field}") for e in problem["errors"]), (literal[:20], problem)
    for value in good:
        r = hostile.request("PATCH", path, json={field: value})
        assert r.status_code == 200 and r.json()[field] == value, (value, r.text)
    assert hostile.request("PATCH", path, json={field: original}).status_code == 200


@pytest.mark.parametrize("field", ["bytes_per_iter", "iter_s"])
def test_a_job_s_numbers_are_bounded_before_any_plan(hostile: Hostile, field: str) -> None:
    job = {"name": "llm", "tors": ["tor-0-0", "tor-1-1"], "collective": "ring_allreduce", "bytes_per_iter": 1e9,
           "iter_s": 1.0}
    for literal in [b"0", b"1e-7", b"1e16", b"1e6", *BEYOND.values()]:
        text = json.dumps({**job, field: "@"}).encode().replace(b'"@"', literal)
        if literal == b"1e6" and field == "bytes_per_iter":
            continue  # a megabyte per iteration is a job
        problem = hostile.refused(422, "POST", "/v1/jobs/what-if", content=text,
                                  headers=JSON)
        assert all(e["loc"] == "" or e["loc"].startswith("job") for e in problem["errors"]), problem


def test_an_intent_with_absurd_numbers_is_refused_whole_every_one_located(hostile: Hostile) -> None:
    doc = example(hostile)
    doc["links"][3]["capacity_gbps"] = 1e308
    doc["links"][4]["capacity_gbps"] = "@subnormal"
    doc["devices"][0]["plane"] = "@plane"
    doc["demands"][0]["gbps"] = 5e-324
    text = (json.dumps(doc).replace('"@subnormal"', "1e-320").replace('"@plane"', "1" + "0" * 100)).encode()
    problem = hostile.refused(422, "PUT", "/v1/intent", content=text, headers=JSON,
                              kind="invalid-intent")
    locs = {e["loc"] for e in problem["errors"]}
    assert {"links[3].capacity_gbps", "links[4].capacity_gbps", "devices[0].plane", "demands[0].gbps"} <= locs


# -- nobody, and a viewer, on every write route ------------------------------------------------------

HOSTILE_BODIES = {
    "malformed": (b'{"name": ', JSON),
    "deep": (b"[" * 100_000, JSON),
    "not utf-8": (b'{"name": "\xff"}', JSON),
    "over the limit": (b"x" * (DOCUMENT_LIMIT + 1), JSON),
    "yaml bomb": (b"a: &a [x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b]\n", YAML),
}


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_nobody_and_viewers_are_refused_before_any_body_is_read(hostile: Hostile, name: str) -> None:
    body, headers = HOSTILE_BODIES[name]
    routes = hostile.write_routes()
    assert len(routes) >= 25
    for method, path, _ in routes:
        hostile.refused(401, method, path, None, content=body, headers=headers,
                        kind="unauthorized")
        hostile.refused(403, method, path, "viewer", content=body, headers=headers,
                        kind="forbidden")
        if path.startswith("/v1/tokens"):
            hostile.refused(403, method, path, "operator", content=body, headers=headers,
                            kind="forbidden")


# -- HTTP ------------------------------------------------------------------------------------------

def test_a_405_lists_every_method_of_the_path(hostile: Hostile) -> None:
    for path, allow in (("/v1/intent", "GET, PUT"), ("/v1/devices", "GET, POST"),
                        ("/v1/links/leaf-0-0:eth1", "DELETE, GET, PATCH")):
        problem = hostile.refused(405, "POST" if "PUT" in allow else "PUT", path, None,
                                  content=b"[" * 100_000, headers=JSON)
        assert allow in problem["detail"]
        r = hostile.request("POST" if "PUT" in allow else "PUT", path, None)
        assert r.headers["allow"] == allow


def test_every_status_answered_is_documented_for_its_operation(hostile: Hostile) -> None:
    assert len(ANSWERED) > 500, "run with the rest of the module"
    undocumented = sorted({(m, p, s) for m, p, s in ANSWERED
                           if str(s) not in hostile.spec["paths"][p][m.lower()]["responses"]})
    assert not undocumented, undocumented


@pytest.mark.parametrize("role,method,path,size,status", [
    (None, "POST", "/v1/devices", 64 << 20, 401),              # unauthenticated: refused before a byte is read
    ("operator", "PUT", "/v1/intent", 256 << 20, 413)])        # over the document limit (64 MiB)
def test_a_client_that_sends_its_whole_body_first_reads_the_early_answer(hostile: Hostile, role: str | None,
                                                                         method: str, path: str, size: int,
                                                                         status: int) -> None:
    """Issue 31.7: urllib sends the whole body, then reads, without ``Expect: 100-continue``. The server
    answers early and closes lingering (reads and drops the rest for a bounded time), so the client reads
    the 401 or 413 instead of a connection reset."""
    headers = {"Content-Type": "application/json"}
    if role is not None:
        headers["Authorization"] = f"Bearer {hostile.tokens[role]}"
    req = urllib.request.Request(hostile.server.url + path, data=b"[" * size, method=method, headers=headers)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=120)
    assert err.value.code == status and json.loads(err.value.read())["status"] == status
    hostile.alive()
