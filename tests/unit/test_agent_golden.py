"""Golden files at the southbound boundary, for both WCMP realizations.

From a fixed plan fragment (``tests/golden/southbound/clos-2x2-plan.json``) on
the clos-2x2 intent, each realization's outputs are frozen per device: the
``DeviceConfig``, the agent's ``Prepare`` request on the wire, what the agent
applies (fib routes, the BGP peers it soft-clears) and the kernel weights the
transaction will expect to read back, plus the FRR text. Regenerate with
``LOOM_UPDATE_GOLDEN=1`` after a deliberate change and review the diff. FRR's
own parser (``vtysh -C``) checks each FRR text where FRR is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from controller.model.intent import validate_intent
from controller.model.plan import Plan
from southbound.grpc_adapter import config_from_proto, config_to_proto, prepare_request_document
from southbound.render import build_rendered, device_configs
from southbound.wcmp import expected_weights
from tests.golden_files import GOLDEN as GOLDEN_ROOT
from tests.golden_files import assert_golden

REPO = Path(__file__).resolve().parents[2]
GOLDEN = GOLDEN_ROOT / "southbound"
PLAN = Plan.from_document(json.loads((GOLDEN / "clos-2x2-plan.json").read_text()))


def _intent(realization: str):  # type: ignore[no-untyped-def]
    doc = yaml.safe_load((REPO / "labs" / "clos-2x2" / "intent.yaml").read_text())
    doc["policies"] = [{"kind": "wcmp", "enabled": True, "realization": realization}]
    return validate_intent(doc)


@pytest.mark.parametrize("realization", ["link-bandwidth", "fib"])
@pytest.mark.parametrize("device", ["leaf-0", "spine-0"])
def test_southbound_golden(realization: str, device: str) -> None:
    intent = _intent(realization)
    config = device_configs(intent, PLAN)[device]
    assert config_from_proto(config_to_proto(config)) == config
    rendered = build_rendered(config)
    dp = PLAN.devices[device]
    doc = {
        "plan": dp.to_document(),
        "device_config": config.to_document(),
        "prepare_request": prepare_request_document("chg-golden", config),
        "applied": {"fib": rendered.to_document()["fib"], "soft_clear_out": dict(rendered.lb_peers)},
        "expected_kernel_weights": {p: expected_weights(dp.groups[g], realization)
                                    for p, g in sorted(dp.routes.items())},
    }
    assert_golden(GOLDEN / f"{realization}-{device}.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert_golden(GOLDEN / f"{realization}-{device}.conf", rendered.frr_text)
    if shutil.which("vtysh"):
        conf = GOLDEN / f"{realization}-{device}.conf"
        proc = subprocess.run(["vtysh", "-C", "-f", str(conf)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_realizations_put_the_weights_where_frr_needs_them() -> None:
    """link-bandwidth: leaf-0's weights 3:1 toward 10.0.1.0/24 are set by spine-0 and spine-1 when they
    advertise it to leaf-0; fib: leaf-0 installs them itself."""
    lb = device_configs(_intent("link-bandwidth"), PLAN)
    assert [(b.port, b.prefix, b.mbps) for b in lb["spine-0"].link_bandwidth if b.prefix == "10.0.1.0/24"] == \
        [("eth1", "10.0.1.0/24", 3)]
    assert [(b.port, b.prefix, b.mbps) for b in lb["spine-1"].link_bandwidth if b.prefix == "10.0.1.0/24"] == \
        [("eth1", "10.0.1.0/24", 1)]
    assert lb["leaf-0"].fib_routes == ()
    fib = device_configs(_intent("fib"), PLAN)
    assert all(c.link_bandwidth == () for c in fib.values())
    (route,) = fib["leaf-0"].fib_routes
    assert [(h.port, h.weight) for h in route.nexthops] == [("eth1", 3), ("eth2", 1)]
    assert expected_weights(PLAN.devices["leaf-0"].groups["g1"], "link-bandwidth") == {"eth1": 75, "eth2": 25}
    assert expected_weights(PLAN.devices["leaf-0"].groups["g1"], "fib") == {"eth1": 3, "eth2": 1}
