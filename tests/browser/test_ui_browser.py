"""The web UI in a real headless browser: Debian's chromium driven by Playwright.

One ``loom serve --example`` process (SQLite in a temp dir) on a free loopback
port, with twelve real device agents (``loom agent --dry-frr``, one per switch
of the example fabric dc1, on unix sockets), so a commit goes through the
southbound transaction and the review page shows per-device progress. The
example revision is committed first, through the API, so the fabric has an
active plan. The tests then log in through the form, look at the fabric, open
a link's details and a switch's page, review a drain of ``spine-0-0`` created
through the API, commit it with the button, and see the drained spine marked;
viewers get no Commit button; revisions, audit and the offline API docs
render; no page asks anything of another origin. Screenshots of each page go
to ``artifacts/screenshots/``. Processes are killed by pid in the finalizers.
Where chromium or playwright is missing the tests skip (``tests/conftest.py``
decides), except in CI, where that skip is a failure.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller import service
from controller.model.documents import AutoTeTrigger
from controller.model.intent import load_intent
from tests.serving import LOOM, LoomServer, settled_change, stop_processes

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
EXAMPLE = load_intent(service.EXAMPLE_INTENT)
DRAINED = "spine-0-0"


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect(target)


class Loom:
    """The running controller: its URL, tokens by role, and a small API client."""

    def __init__(self, url: str, tokens: dict[str, str], base: Path):
        self.url, self.tokens, self.base = url, tokens, base
        self.http = httpx.Client(base_url=url, timeout=60)
        self.agents: dict[str, subprocess.Popen[bytes]] = {}  # device -> its agent process

    def __call__(self, method: str, path: str, role: str = "operator", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[role]}", **kw.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kw)

    def wait_change(self, change_id: int, timeout: float = 90) -> dict[str, Any]:
        return settled_change(lambda path: self("GET", path, "viewer").json(), change_id, timeout=timeout,
                              interval=0.2)


@contextmanager
def _serving(base: Path, agents: str) -> Iterator[Loom]:
    """``loom serve --example`` (SQLite in ``base``) with ``LOOM_AGENTS`` = ``agents``, an admin token, once ready."""
    server = LoomServer(base, ["--example", "--db", f"sqlite:///{base / 'loom.db'}", "--host", "127.0.0.1"],
                        secrets.token_urlsafe(32), env={"LOOM_AGENTS": agents, "LOOM_TELEMETRY_INTERVAL_S": "1"})
    try:
        server.start()
        lm = Loom(server.url, {"admin": server.token}, base)
        yield lm
        lm.http.close()
    finally:
        server.stop(10)


@pytest.fixture(scope="module")
def loom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loom]:
    base = tmp_path_factory.mktemp("ui")
    agents: list[subprocess.Popen[bytes]] = []
    try:
        endpoints = {}
        for d in EXAMPLE.devices:
            run = base / d.name
            run.mkdir()
            endpoints[d.name] = f"unix:{run / 'agent.sock'}"
            with open(base / f"{d.name}.log", "wb") as log:
                agents.append(subprocess.Popen(
                    [*LOOM, "agent", "--frr-dir", str(run), "--hostname", d.name,
                     "--listen", endpoints[d.name], "--dry-frr", "--dry-apply-delay", "0.4"],
                    stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120  # generous: the box may be busy
        for d in EXAMPLE.devices:
            while not (base / d.name / "agent.sock").exists():
                assert time.monotonic() < deadline, (base / f"{d.name}.log").read_text()[-2000:]
                time.sleep(0.05)
        with _serving(base, json.dumps(endpoints)) as lm:
            lm.agents = {d.name: a for d, a in zip(EXAMPLE.devices, agents, strict=True)}
            for role in ("operator", "viewer"):
                r = lm("POST", "/v1/tokens", "admin", json={"name": f"ui-{role}", "role": role})
                assert r.status_code == 201, r.text
                lm.tokens[role] = r.json()["token"]
            # make the example revision active, so the fabric has a plan to colour
            ch = lm("POST", "/v1/revisions/1/rollback", json={"message": "activate the example fabric"}).json()
            assert lm("POST", f"/v1/changes/{ch['id']}/review").json()["verdict"] == "safe"
            assert lm("POST", f"/v1/changes/{ch['id']}/commit", json={}).status_code == 202
            done = lm.wait_change(ch["id"])
            assert done["state"] == "committed", done
            yield lm
    finally:
        stop_processes(agents[::-1])


@pytest.fixture(scope="module")
def browser(loom: Loom) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


class Page:
    """A fresh browser context per test. A request that leaves the controller's origin (one the
    page's Content-Security-Policy did not already stop) is recorded and aborted."""

    def __init__(self, browser: Any, loom: Loom):
        self.loom = loom
        self.context = browser.new_context(viewport={"width": 1440, "height": 900})
        self.foreign: list[str] = []
        self.errors: list[str] = []

        def refuse(route: Any) -> None:
            self.foreign.append(route.request.url)
            route.abort()

        self.context.route(lambda url: not url.startswith((loom.url, "data:", "blob:")), refuse)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.set_default_timeout(20_000)

    def login(self, role: str) -> Any:
        p = self.page
        p.goto(self.loom.url + "/")
        p.fill("#token", self.loom.tokens[role])
        p.click("#login-submit")
        p.wait_for_selector("#who")
        return p

    def shot(self, name: str, full_page: bool = True) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)

    def close(self) -> None:
        self.context.close()
        assert not self.foreign, f"the page asked another origin: {self.foreign[:5]}"
        assert not self.errors, f"JavaScript errors: {self.errors}"


@pytest.fixture
def ui(browser: Any, loom: Loom) -> Iterator[Page]:
    pg = Page(browser, loom)
    try:
        yield pg
    finally:
        pg.close()


def test_login_then_the_example_fabric(ui: Page, loom: Loom) -> None:
    p = ui.page
    p.goto(loom.url + "/")
    ui.shot("login")
    p.fill("#token", "loom_nope_nope")
    p.click("#login-submit")
    expect(p.locator("#login-error")).to_contain_text("unknown")
    p.fill("#token", loom.tokens["viewer"])
    p.click("#login-submit")
    p.wait_for_selector("svg#fabric g.node")
    assert p.inner_text("#who") == "ui-viewer (viewer)"
    assert p.locator("svg#fabric g.node").count() == len(EXAMPLE.devices)
    assert p.locator("svg#fabric g.link").count() == len(EXAMPLE.links)
    names = set(p.eval_on_selector_all("svg#fabric g.node", "els => els.map(e => e.dataset.device)"))
    assert names == {d.name for d in EXAMPLE.devices}
    utils = p.eval_on_selector_all("svg#fabric g.link", "els => els.map(e => e.dataset.utilization)")
    plan = loom("GET", "/v1/plans/active", "viewer").json()
    assert sorted(float(u) for u in utils) == pytest.approx(sorted(x["utilization"] for x in plan["links"]), abs=1e-6)
    assert "active plan of revision r1" in p.inner_text("#fabric-revision")
    # tiers: spines above leaves above ToRs
    ys = {d: p.eval_on_selector(f"g.node[data-device='{d}']", "e => e.getBoundingClientRect().y")
          for d in ("spine-0-0", "leaf-0-0", "tor-0-0")}
    assert ys["spine-0-0"] < ys["leaf-0-0"] < ys["tor-0-0"]
    ui.shot("fabric")


def test_a_link_shows_its_load_and_groups(ui: Page, loom: Loom) -> None:
    p = ui.login("viewer")
    p.wait_for_selector("svg#fabric g.node")
    plan = loom("GET", "/v1/plans/active", "viewer").json()
    busiest = max(plan["links"], key=lambda x: x["utilization"])
    link = p.locator(f"svg#fabric g.link[data-link='{busiest['a']}:{busiest['a_port']}'], "
                     f"svg#fabric g.link[data-link='{busiest['b']}:{busiest['b_port']}']")
    # a point 30% along the link (in a Clos, links cross at their middles)
    x, y = link.locator("line.hit").evaluate(
        "l => { const m = l.getScreenCTM(), a = (k) => +l.getAttribute(k), t = 0.3;"
        " const x = a('x1') + t * (a('x2') - a('x1')), y = a('y1') + t * (a('y2') - a('y1'));"
        " return [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]; }")
    p.mouse.move(x, y)
    p.wait_for_selector("#tooltip:not([hidden])")
    assert "Gb/s" in p.inner_text("#tooltip")
    ui.shot("fabric-hover")
    p.mouse.click(x, y)
    expect(link).to_have_class("link selected")
    details = p.inner_text("#details")
    assert "100 Gb/s each way" in details
    assert f"{busiest['utilization'] * 100:.1f}%" in details
    def gbps(v: float) -> str:  # the UI's fmt(): whole numbers as they are, others to two places
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"

    assert f"{gbps(busiest['gbps_ab'])} Gb/s" in details and f"{gbps(busiest['gbps_ba'])} Gb/s" in details
    ends = ((busiest["a"], busiest["a_port"]), (busiest["b"], busiest["b_port"]))
    users = [d for d, dp in plan["devices"].items() for hops in dp["groups"].values()
             for nh in hops if (d, nh["port"]) in ends]
    assert users, "the busiest link carries traffic, so some group uses it"
    assert "nexthop groups using it" in details and users[0] in details


def test_a_switch_page_shows_routes_weights_state_and_drift(ui: Page, loom: Loom) -> None:
    p = ui.login("viewer")
    p.click("svg#fabric g.node[data-device='tor-0-0']")
    p.wait_for_selector("#device-name")
    assert p.inner_text("#device-name") == "tor-0-0"
    plan = loom("GET", "/v1/plans/active", "viewer").json()["devices"]["tor-0-0"]
    routes = p.inner_text("#routes")
    for prefix in plan["routes"]:
        assert prefix in routes
    assert "leaf-0-0 via eth1" in routes
    p.wait_for_selector("#state")
    assert "running config hash" in p.inner_text("#state")
    assert p.locator("#drift .badge").count() == 1
    ui.shot("device")


def _drain_change(loom: Loom, target: str, message: str) -> dict[str, Any]:
    active = loom("GET", "/v1/status", "viewer").json()["active_revision"]
    r = loom("POST", "/v1/changes", json={"base_revision": active, "message": message,
                                          "patch": [{"op": "add", "path": "/policies/-",
                                                     "value": {"kind": "drain", "target": target}}]})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_viewer_gets_no_commit_button(ui: Page, loom: Loom) -> None:
    ch = _drain_change(loom, "leaf-1-1", "viewer cannot commit this")
    assert loom("POST", f"/v1/changes/{ch['id']}/review").status_code == 200
    p = ui.login("viewer")
    p.goto(f"{loom.url}/#/changes/{ch['id']}")
    p.wait_for_selector("#verdict")
    assert p.locator("#commit, #force, #review, #rollback").count() == 0
    assert "Read-only" in p.inner_text("#actions")
    assert loom("POST", f"/v1/changes/{ch['id']}/commit", "viewer", json={}).status_code == 403


def test_review_and_commit_a_drain_with_the_button(ui: Page, loom: Loom) -> None:
    before = loom("GET", "/v1/status", "viewer").json()["active_revision"]
    ch = _drain_change(loom, DRAINED, f"drain {DRAINED} for maintenance")
    p = ui.login("operator")
    p.goto(f"{loom.url}/#/changes")
    p.wait_for_selector(f"#changes tr[data-change='{ch['id']}']")
    ui.shot("changes")
    p.click(f"#changes tr[data-change='{ch['id']}'] a")
    p.wait_for_selector("#review")
    p.click("#review")
    p.wait_for_selector("#verdict")
    review = loom("GET", f"/v1/changes/{ch['id']}", "viewer").json()["review"]
    assert p.inner_text("#verdict .big") == review["verdict"].upper()
    assert p.locator("#histogram rect.bar").count() > 0
    assert DRAINED in p.inner_text("#config-diff")
    assert p.locator("#hottest tbody tr").count() == min(10, len(review["links"]))
    ui.shot("review")
    ui.shot("review-top", full_page=False)  # what the README shows
    if review["verdict"] == "safe":
        p.click("#commit")
    else:
        p.fill("#force-reason", "maintenance window, failure headroom accepted")
        p.click("#force")
    p.wait_for_selector("#progress")
    ui.shot("commit-progress")
    expect(p.locator("#change-state")).to_have_text("committed", timeout=90_000)
    expect(p.locator("#active-revision")).to_have_text(f"active r{ch['proposed_revision']}")
    rows = p.locator("#progress-devices tbody tr")
    assert rows.count() == len(EXAMPLE.devices)
    assert set(rows.locator("td:nth-child(3)").all_inner_texts()) == {"ok"}
    steps = rows.locator("td:nth-child(2)").all_inner_texts()  # each device's finished steps, all ticked
    assert all("✓" in x and "✗" not in x and "…" not in x for x in steps), steps
    ui.shot("committed")
    status = loom("GET", "/v1/status", "viewer").json()
    assert status["active_revision"] == ch["proposed_revision"] != before
    # the fabric now shows the drained spine
    p.click("header nav a[href='#/fabric']")
    p.wait_for_selector(f"svg#fabric g.node[data-device='{DRAINED}']")
    node = p.locator(f"svg#fabric g.node[data-device='{DRAINED}']")
    assert "drained" in (node.get_attribute("class") or "").split()
    assert node.locator("text.drain-label").text_content() == "drained"
    assert DRAINED in p.inner_text("#drained-list")
    assert f"active plan of revision r{ch['proposed_revision']}" in p.inner_text("#fabric-revision")
    touching = [f"{x.a}:{x.a_port}" for x in EXAMPLE.links if DRAINED in (x.a, x.b)]
    for key in touching:  # a drained spine carries no transit traffic
        assert float(p.get_attribute(f"g.link[data-link='{key}']", "data-utilization") or 0) == 0.0
    ui.shot("fabric-drained")


def test_rollback_button_proposes_the_previous_revision(ui: Page, loom: Loom) -> None:
    committed = [c for c in loom("GET", "/v1/changes?state=committed", "viewer").json()["items"]
                 if c["message"].startswith("drain")]
    assert committed, "runs after the drain was committed"
    ch = committed[0]
    p = ui.login("operator")
    p.goto(f"{loom.url}/#/changes/{ch['id']}")
    p.click("#rollback")
    expect(p).not_to_have_url(f"{loom.url}/#/changes/{ch['id']}")
    p.wait_for_selector("#review")
    new_id = int(p.url.rsplit("/", 1)[1])
    back = loom("GET", f"/v1/changes/{new_id}", "viewer").json()
    assert back["state"] == "draft" and back["kind"] == "rollback"


def test_revisions_diff_and_audit(ui: Page, loom: Loom) -> None:
    p = ui.login("viewer")
    p.goto(f"{loom.url}/#/revisions")
    p.wait_for_selector("#revisions tbody tr")
    total = loom("GET", "/v1/revisions", "viewer").json()["total"]
    assert p.locator("#revisions tbody tr").count() == min(total, 50)
    p.check("#revisions tr[data-revision='1'] input[name='a']")
    drained_rev = loom("GET", "/v1/status", "viewer").json()["active_revision"]
    p.check(f"#revisions tr[data-revision='{drained_rev}'] input[name='b']")
    p.click("#show-diff")
    p.wait_for_selector("#diff-table")
    diff = loom("GET", f"/v1/revisions/1/diff/{drained_rev}", "viewer").json()
    text = p.inner_text("#revision-diff")
    assert f"r1 → r{drained_rev}" in text
    for e in diff["added"]:
        assert e["name"] in text
    ui.shot("revisions")
    before = loom("GET", "/v1/audit?limit=50", "viewer").json()["items"]
    p.click("header nav a[href='#/audit']")
    p.wait_for_selector("#audit tbody tr")
    after = loom("GET", "/v1/audit?limit=50", "viewer").json()["items"]
    # the workflow audits on its own too (a commit's drain check): the page shows what was there when it loaded
    assert len(before) <= p.locator("#audit tbody tr").count() <= len(after)
    assert "POST /v1/changes" in p.inner_text("#audit")
    ui.shot("audit")


def test_api_docs_are_served_offline(ui: Page, loom: Loom) -> None:
    p = ui.page
    p.goto(loom.url + "/docs")
    p.wait_for_selector(".swagger-ui .opblock-tag")
    assert p.locator(".swagger-ui .opblock").count() >= 25
    ui.shot("docs")
    p.goto(loom.url + "/redoc")
    p.wait_for_selector("redoc, [role='navigation'], .menu-content", state="attached")


def test_the_serving_process_counts_commits_and_device_pushes(loom: Loom) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        text = httpx.get(f"{loom.url}/metrics").text
        return {(s.name, frozenset(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    before = scrape()
    ch = _drain_change(loom, "leaf-0-1", "drain leaf-0-1 (metrics)")
    safe = loom("POST", f"/v1/changes/{ch['id']}/review").json()["verdict"] == "safe"
    r = loom("POST", f"/v1/changes/{ch['id']}/commit", headers={"X-Request-ID": f"ui-commit-{ch['id']}"},
             json={} if safe else {"force": True, "reason": "metrics test: headroom accepted"})
    assert r.status_code == 202, r.text
    assert loom.wait_change(ch["id"])["state"] == "committed"
    after = scrape()
    committed = ("loom_commits_total", frozenset({("outcome", "committed")}))
    assert after[committed] == before.get(committed, 0) + 1
    assert after[("loom_active_revision", frozenset())] == ch["proposed_revision"]
    pushed = {dict(lbl)["device"] for (name, lbl), v in after.items()
              if name == "loom_device_push_duration_seconds_count" and v > 0}
    assert pushed == {d.name for d in EXAMPLE.devices}
    # loom serve's JSON log: the southbound steps of this commit, each with the commit call's request id
    lines = [json.loads(x) for x in (loom.base / "serve.log").read_text().splitlines() if x.startswith("{")]
    steps = [x for x in lines if x.get("logger") == "loom.workflow" and x.get("change") == ch["id"] and "device" in x]
    assert {x["device"] for x in steps} == {d.name for d in EXAMPLE.devices}
    assert {x["request_id"] for x in steps} == {f"ui-commit-{ch['id']}"}


def test_an_unsafe_change_is_forced_only_with_a_reason(ui: Page, loom: Loom) -> None:
    found = None
    for target in ("leaf-1-1", "spine-1-1", "spine-1-0"):  # the first drain the safety replay refuses
        ch = _drain_change(loom, target, f"drain {target} (unsafe)")
        r = loom("POST", f"/v1/changes/{ch['id']}/review")
        if r.status_code == 200 and r.json()["verdict"] == "unsafe":
            found, review = ch, r.json()
            break
    assert found is not None, "one of the drains leaves too little headroom under failure"
    ch = found
    p = ui.login("operator")
    p.goto(f"{loom.url}/#/changes/{ch['id']}")
    p.wait_for_selector("#verdict.unsafe")
    assert p.inner_text("#verdict .big") == "UNSAFE"
    assert p.locator("#failing tbody tr").count() == min(200, len(review["safety"]["failing"]))
    shown = [r for r in review["reaction"]["scenarios"] if r["lost_gbps"] > 0 or r["safe"] is False]
    assert p.locator("#reaction").count() == 1  # each failure until the reaction (issue 30.5)
    assert p.locator("#reaction tbody tr").count() == min(50, len(shown))
    assert p.locator("#commit").is_disabled()
    p.click("#force")
    expect(p.locator("#action-error")).to_contain_text("needs a reason")
    assert loom("GET", f"/v1/changes/{ch['id']}", "viewer").json()["state"] == "reviewed"
    reason = "maintenance window: headroom under failure accepted"
    p.fill("#force-reason", reason)
    p.click("#force")
    expect(p.locator("#change-state")).to_have_text("committed", timeout=90_000)
    assert f"forced: {reason}" in p.inner_text("main")
    assert loom("GET", f"/v1/changes/{ch['id']}", "viewer").json()["force_reason"] == reason
    ui.shot("forced")


def test_an_operator_drains_a_switch_from_its_page(ui: Page, loom: Loom) -> None:
    p = ui.login("operator")
    p.goto(loom.url + "/#/device/spine-0-1")
    p.click("button.drain-action")
    p.wait_for_url("**/#/changes/*")
    cid = int(p.url.rsplit("/", 1)[1])
    ch = loom("GET", f"/v1/changes/{cid}", "viewer").json()
    assert ch["state"] == "draft" and ch["message"] == "drain spine-0-1 (web UI)"
    proposed = loom("GET", f"/v1/revisions/{ch['proposed_revision']}/intent", "viewer").json()
    assert {"kind": "drain", "target": "spine-0-1"} in proposed["policies"]
    viewer = ui.context.new_page()  # a viewer is offered no drain
    viewer.goto(loom.url + "/")
    viewer.fill("#token", loom.tokens["viewer"])
    viewer.click("#login-submit")
    viewer.wait_for_selector("#who")
    viewer.goto(loom.url + "/#/device/spine-0-1")
    viewer.wait_for_selector("#device-name")
    assert viewer.locator("button.drain-action").count() == 0


def test_auto_te_changes_show_their_trigger_and_operators_can_pause_it(ui: Page, loom: Loom) -> None:
    from controller.store.db import Database
    from controller.workflow import changes
    from controller.workflow.autote import AUTHOR

    # the policy, committed (min_gain out of reach: the loop evaluates but never re-tunes this fabric)
    active = loom("GET", "/v1/status", "viewer").json()["active_revision"]
    policy = {"kind": "auto_te", "interval_s": 5, "window_s": 10, "stat": "p95", "headroom": 1.1, "min_gain": 9}
    r = loom("POST", "/v1/changes", json={"base_revision": active, "message": "enable auto-te",
                                          "patch": [{"op": "add", "path": "/policies/-", "value": policy}]})
    cid = r.json()["id"]
    assert loom("POST", f"/v1/changes/{cid}/review").status_code == 200  # unsafe where an earlier test forced one
    assert loom("POST", f"/v1/changes/{cid}/commit", json={"force": True, "reason": "ui test"}).status_code == 202
    done = loom.wait_change(cid)
    assert done["state"] == "committed"
    # a change as the loop writes one (author auto-te, its trigger), straight into the server's store
    trigger = AutoTeTrigger.model_validate({
        "window_s": 10.0, "stat": "p95", "headroom": 1.1, "method": "aft", "demands": 6, "measured_gbps": 42.0,
        "active_revision": done["proposed_revision"], "active_predicted": 0.9, "candidate_predicted": 0.6,
        "gain": 0.3, "min_gain": 0.05, "observed": 0.81})
    db = Database(f"sqlite:///{loom.base / 'loom.db'}")
    try:
        with db.session() as s:
            doc = loom("GET", "/v1/intent", "viewer").json()
            ctx = service.WriteContext(actor=service.Actor(AUTHOR, "operator"), method="SYSTEM", path="auto-te")
            auto = changes.create_change(session=s, ctx=ctx, base_revision=done["proposed_revision"], patch=None,
                                         intent=doc,
                                         message="auto-te: re-tuned for the measured demand", trigger=trigger)
    finally:
        db.dispose()
    p = ui.login("operator")
    p.goto(loom.url + "/#/changes")
    p.wait_for_selector("#auto-te")
    assert "running" in p.inner_text("#auto-te-state")
    row = p.locator(f"tr[data-change='{auto.id}'] td.author")
    expect(row).to_contain_text("auto-te")
    expect(row).to_contain_text("90.0% → 60.0%")
    ui.shot("changes-auto-te")
    p.click("#auto-te-toggle")
    expect(p.locator("#auto-te-state")).to_contain_text("paused by ui-operator")
    status = loom("GET", "/v1/auto-te", "viewer").json()
    assert status["paused"] and status["paused_by"] == "ui-operator"
    p.click("#auto-te-toggle")
    expect(p.locator("#auto-te-state")).to_contain_text("running")
    assert loom("GET", "/v1/auto-te", "viewer").json()["paused"] is False
    p.goto(loom.url + f"/#/changes/{auto.id}")
    p.wait_for_selector("#trigger")
    text = p.inner_text("#trigger")
    assert "90.0%" in text and "60.0%" in text and "30.0 pt" in text and "81.0%" in text
    ui.shot("change-auto-te")


def test_the_jobs_view_marks_a_jobs_members_and_links_and_charts_its_history(ui: Page, loom: Loom) -> None:
    tors = sorted(d.name for d in EXAMPLE.devices if d.role == "tor")
    job = {"name": "llm-ui", "tors": [tors[0], tors[-1]], "collective": "ring_allreduce", "bytes_per_iter": 1e9,
           "iter_s": 10.0}
    r = loom("POST", "/v1/jobs", json=job)
    assert r.status_code == 201, r.text
    head = loom("GET", "/v1/status", "viewer").json()["head_revision"]
    ch = loom("POST", f"/v1/revisions/{head}/rollback", json={"message": "the job ui test"}).json()
    review = loom("POST", f"/v1/changes/{ch['id']}/review").json()
    # the module's earlier tests leave a forced (unsafe) revision active: a change on it is as unsafe, and is
    # forced the same way; the view, not the verdict, is what this test is about
    body = {} if review["verdict"] == "safe" else {"force": True, "reason": "the jobs view test, on a forced revision"}
    assert loom("POST", f"/v1/changes/{ch['id']}/commit", json=body).status_code == 202
    assert loom.wait_change(ch["id"])["state"] == "committed"
    perf = loom("GET", "/v1/jobs/llm-ui/performance?window_s=300", "viewer").json()
    p = ui.login("viewer")
    p.goto(loom.url + "/#/fabric?view=jobs")
    row = p.locator("#jobs tr.job[data-job='llm-ui']")
    expect(row).to_be_visible()
    expect(p.locator("#view-jobs")).to_have_class("toggle on")
    row.click()
    expect(row).to_have_class("job selected")
    members = set(p.eval_on_selector_all("svg#fabric g.node.job-member", "els => els.map(e => e.dataset.device)"))
    assert members == set(job["tors"])
    marked = set(p.eval_on_selector_all("svg#fabric g.link.job-path", "els => els.map(e => e.dataset.key)"))
    assert marked == {b["link"] for b in perf["bottlenecks"]} and marked
    assert "llm-ui" in p.inner_text("#job-info") and "ring_allreduce over 2 ToRs" in p.inner_text("#job-info")
    p.wait_for_selector("#job-info #job-events")
    # the dry switches count only the prefixes their own configs name (a ToR's own), not a job's remote member's:
    # no per-pair rate, so no rate history, and the page says so (the chart is drawn from the same document)
    hist = loom("GET", "/v1/jobs/llm-ui/history", "viewer").json()
    assert hist["method"] is None and hist["points"] == []
    assert "no per-prefix counters from its members" in p.inner_text("#job-info")
    assert "no insight event" in p.inner_text("#job-events")
    ui.shot("fabric-jobs")


def test_the_observed_view_colours_links_by_their_counters_and_marks_stale_ones(ui: Page, loom: Loom) -> None:
    def observed() -> list[dict[str, Any]]:
        return list(loom("GET", "/v1/telemetry/links?window_s=60", "viewer").json()["links"])

    deadline = time.monotonic() + 60
    while not all(not x["stale"] and x["utilization"] is not None for x in observed()):
        assert time.monotonic() < deadline, observed()[:3]
        time.sleep(0.5)
    p = ui.login("viewer")
    p.goto(loom.url + "/#/fabric?view=observed")
    p.wait_for_selector("#observed-summary")
    expect(p.locator("#view-observed")).to_have_class("toggle on")
    assert "links measured" in p.inner_text("#observed-summary")
    utils = p.eval_on_selector_all("svg#fabric g.link", "els => els.map(e => e.dataset.utilization)")
    assert sorted(float(u) for u in utils) == pytest.approx(sorted(x["utilization"] for x in observed()), abs=0.02)
    # a link's last hour, charted under its details from the stored history
    first = EXAMPLE.links[0]
    key = min(f"{first.a}:{first.a_port}", f"{first.b}:{first.b_port}")
    p.click(f"svg#fabric g.link[data-link='{first.a}:{first.a_port}'] line.hit", force=True)
    p.wait_for_selector("#details svg#link-history")
    hist = loom("GET", f"/v1/telemetry/links/{key}/history?window_s=3600", "viewer").json()
    known = sum(1 for pt in hist["points"] for d in ("gbps_ab", "gbps_ba") if pt[d] is not None)
    drawn = int(p.get_attribute("svg#link-history", "data-points") or 0)  # read a moment before ours
    assert known > 0 and drawn > 0 and abs(drawn - known) <= max(4, known // 5)
    assert p.locator("svg#link-history polyline").count() >= 2
    ui.shot("fabric-observed")
    # a switch whose agent stops: its links are marked stale, not drawn as idle (the last module test on `loom`)
    stop_processes([loom.agents["leaf-1-1"]])
    deadline = time.monotonic() + 60
    while not any(x["stale"] for x in observed()):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    p.goto(loom.url + "/#/fabric")
    p.goto(loom.url + "/#/fabric?view=observed")
    p.wait_for_selector("svg#fabric g.link.stale")
    stale = set(p.eval_on_selector_all("svg#fabric g.link.stale", "els => els.map(e => e.dataset.link)"))
    touching = {f"{lk.a}:{lk.a_port}" for lk in EXAMPLE.links if "leaf-1-1" in (lk.a, lk.b)}
    assert stale == touching
    p.click(f"svg#fabric g.link[data-link='{sorted(touching)[0]}'] line.hit", force=True)
    assert "no fresh counters" in p.inner_text("#details")
    ui.shot("fabric-observed-stale")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loom]:
    """What ``make run`` starts: ``loom serve --example``, no agents, nothing committed yet."""
    with _serving(tmp_path_factory.mktemp("fresh"), "") as lm:
        yield lm


def test_make_run_shows_the_example_fabric_before_any_commit(browser: Any, fresh: Loom) -> None:
    pg = Page(browser, fresh)
    try:
        p = pg.login("admin")
        p.wait_for_selector("svg#fabric g.node")
        assert p.locator("svg#fabric g.node").count() == len(EXAMPLE.devices)
        assert p.inner_text("#no-plan") == "no active plan"
        utils = p.eval_on_selector_all("svg#fabric g.link", "els => els.map(e => e.dataset.utilization)")
        assert utils == [""] * len(EXAMPLE.links)
        pg.shot("fabric-no-plan")
        p.click("#preview-plan")
        p.wait_for_selector("#preview")
        assert "plan of head revision r1 (compiled, not committed)" in p.inner_text("#fabric-revision")
        plan = fresh("GET", "/v1/plans/1", "admin").json()
        utils = p.eval_on_selector_all("svg#fabric g.link", "els => els.map(e => e.dataset.utilization)")
        assert sorted(float(u) for u in utils) == pytest.approx(sorted(x["utilization"] for x in plan["links"]),
                                                                 abs=1e-6)
        assert fresh("GET", "/v1/status", "admin").json()["active_revision"] is None  # a preview commits nothing
    finally:
        pg.close()
