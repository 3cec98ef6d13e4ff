"""Loom's ground layer: the types every other layer speaks, and nothing else.

It holds the fabric domain model (:mod:`controller.model.domain`), the intent
document with its validation (:mod:`controller.model.intent`), the error
taxonomy (:mod:`controller.model.errors`), the forwarding plan
(:mod:`controller.model.plan`) and the typed answer documents
(:mod:`controller.model.documents`). It imports nothing else of Loom, so the
solver, safety, southbound and labs libraries depend on it alone; an
import-linter contract in ``pyproject.toml`` holds that line.

The domain types are re-exported here (``from controller.model import Intent``).
"""

from __future__ import annotations

from controller.model.domain import (
    ASN_MAX,
    DEFAULT_CAPACITY_GBPS,
    DEFAULT_MAX_ECMP_ENTRIES,
    DEFAULT_METRIC,
    LINK_STATE,
    MAX_GBPS,
    MAX_INDEX,
    MAX_METRIC,
    MAX_OSPF_COST,
    MAX_UTILIZATION,
    MIN_CAPACITY_GBPS,
    MIN_DEMAND_GBPS,
    MIN_UTILIZATION,
    POLICY_KINDS,
    TIER,
    AutoTePolicy,
    Collective,
    Defaults,
    Demand,
    Device,
    DrainPolicy,
    FailureDomain,
    FailureReactionPolicy,
    FailureTolerancePolicy,
    FailureToleranceScope,
    InsightPolicy,
    Intent,
    Job,
    Link,
    LinkEnd,
    PathsPolicy,
    Policy,
    Prefix,
    Role,
    Routing,
    UtilizationLimitPolicy,
    WcmpPolicy,
    WcmpRealization,
    canonical_prefix,
    parse_link_end,
)

__all__ = [
    "AutoTePolicy",
    "FailureReactionPolicy",
    "InsightPolicy",
    "ASN_MAX",
    "DEFAULT_CAPACITY_GBPS",
    "DEFAULT_MAX_ECMP_ENTRIES",
    "DEFAULT_METRIC",
    "MAX_GBPS",
    "MAX_INDEX",
    "LINK_STATE",
    "MAX_METRIC",
    "MAX_OSPF_COST",
    "MAX_UTILIZATION",
    "MIN_CAPACITY_GBPS",
    "MIN_DEMAND_GBPS",
    "MIN_UTILIZATION",
    "POLICY_KINDS",
    "TIER",
    "Collective",
    "Defaults",
    "Demand",
    "Device",
    "DrainPolicy",
    "FailureDomain",
    "FailureTolerancePolicy",
    "FailureToleranceScope",
    "Intent",
    "Job",
    "Link",
    "LinkEnd",
    "PathsPolicy",
    "Policy",
    "Prefix",
    "Role",
    "Routing",
    "UtilizationLimitPolicy",
    "WcmpPolicy",
    "WcmpRealization",
    "canonical_prefix",
    "parse_link_end",
]
