"""Fixtures of the component tier that several modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ha_fixture import HA, ha_cluster


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[HA]:
    """Replicas behind HAProxy on PostgreSQL with a dry fleet, one cluster per module (:mod:`tests.ha_fixture`)."""
    with ha_cluster(tmp_path_factory.mktemp("ha"), postgres_url) as cluster:
        yield cluster
