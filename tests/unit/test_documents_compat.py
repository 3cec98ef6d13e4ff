"""An older client reads a newer server's answers: fields the server added are dropped at every level by
``read_newer``, while the server's own documents stay closed (an unknown field there is a bug)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.model.documents import LinkStatesDocument, read_newer

LINK = {"id": "a:eth1", "a": "a", "a_port": "eth1", "b": "b", "b_port": "eth1", "oper": "up", "since": None,
        "flaps_1h": 0}


def test_fields_a_newer_server_added_are_dropped_at_every_level() -> None:
    doc = {"links": [{**LINK, "carrier_changes": 3}], "generated_at": "2026-11-28T06:00:00Z"}
    got = read_newer(LinkStatesDocument, doc)
    assert got.links[0].id == "a:eth1" and got.links[0].oper == "up"
    assert "carrier_changes" not in got.links[0].model_dump()


def test_the_server_side_model_still_refuses_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="carrier_changes"):
        LinkStatesDocument.model_validate({"links": [{**LINK, "carrier_changes": 3}]})


def test_a_changed_or_missing_field_still_fails_for_the_client() -> None:
    with pytest.raises(ValidationError, match="oper"):
        read_newer(LinkStatesDocument, {"links": [{**LINK, "oper": "flapping"}]})
    with pytest.raises(ValidationError, match="flaps_1h"):
        read_newer(LinkStatesDocument, {"links": [{k: v for k, v in LINK.items() if k != "flaps_1h"}]})
