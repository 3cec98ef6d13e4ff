"""The fabric domain model: frozen, strict types for one intent document.

This module owns the vocabulary every other layer speaks: devices (with their
role in an RFC 7938 Clos), links (undirected, capacity per direction), failure
domains, originated prefixes, policies and demands, gathered in one
:class:`Intent`. It is pure: no I/O, no validation across objects (that is
:mod:`controller.model.intent`), only the shape of each object and small derived
views (device and link indexes) that the solver and safety layers use.

Unknown keys are errors and every object is immutable once built. Every number
a solver or a switch will see has bounds that a real fabric never leaves
(:data:`MAX_GBPS`, :data:`MIN_CAPACITY_GBPS`, ...): finite, never a boolean, and
far from the subnormal floats that make an LP backend refuse its model.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
from collections.abc import Mapping
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from controller.model.collectives import Registry
from controller.model.collectives_builtin import BUILTINS
from controller.model.documents.base import JsonObject
from controller.model.fields import NUMBER as _Number
from controller.model.fields import Frozen as _Frozen
from controller.model.fields import IpAddress, IpInterface
from controller.model.forms import BgpForm, HostPort, IsisForm, OspfForm
from controller.model.jobs import job_matrix

__all__ = [
    "AutoTePolicy",
    "BgpForm",
    "HostPort",
    "IsisForm",
    "OspfForm",
    "InsightPolicy",
    "ASN_MAX",
    "MAX_GBPS",
    "MAX_INDEX",
    "LINK_STATE",
    "MAX_METRIC",
    "MAX_OSPF_COST",
    "MAX_UTILIZATION",
    "MIN_CAPACITY_GBPS",
    "MIN_DEMAND_GBPS",
    "MIN_UTILIZATION",
    "Defaults",
    "Demand",
    "Device",
    "DrainPolicy",
    "FailureDomain",
    "FailureToleranceScope",
    "FailureTolerancePolicy",
    "Collective",
    "Intent",
    "Job",
    "Link",
    "LinkEnd",
    "PathsPolicy",
    "Policy",
    "Prefix",
    "Role",
    "Routing",
    "Underlay",
    "UtilizationLimitPolicy",
    "WcmpPolicy",
    "WcmpRealization",
    "canonical_prefix",
    "parse_link_end",
    "prefix_order",
    "prefix_version",
]

ASN_MAX = 4_294_967_295
DEFAULT_MAX_ECMP_ENTRIES = 128
DEFAULT_CAPACITY_GBPS = 100.0
DEFAULT_METRIC = 10

#: A petabit per second: no link, demand or job of a real fabric carries more.
MAX_GBPS = 1e6
#: A megabit per second: the slowest link capacity (lab links run at 50 Mb/s).
MIN_CAPACITY_GBPS = 1e-3
#: A kilobit per second: the smallest demand that is not 0 (telemetry's capture rounds to it);
#: checked on declared demands by :func:`controller.model.intent.validate_intent`.
MIN_DEMAND_GBPS = 1e-6
#: Utilization limits, as fractions of capacity: 0.1 % to 1,000 %.
MIN_UTILIZATION = 1e-3
MAX_UTILIZATION = 10.0
#: The largest pod or plane number. They are labels, not indexes (pods may be numbered a billion apart),
#: so the bound is only what a 32-bit signed integer holds, as the API's pod and plane filters take.
MAX_INDEX = 2**31 - 1
#: The largest usable IS-IS wide metric: 2^24 - 1 takes a link out of SPF (RFC 5305 section 3.7).
MAX_METRIC = 16_777_214


EcmpEntries = Annotated[int, Field(ge=1, le=65536), _Number]
Index = Annotated[int, Field(ge=0, le=MAX_INDEX), _Number]
CapacityGbps = Annotated[float, Field(ge=MIN_CAPACITY_GBPS, le=MAX_GBPS, allow_inf_nan=False), _Number]
Gbps = Annotated[float, Field(ge=0, le=MAX_GBPS, allow_inf_nan=False), _Number]


def _zero_or_measurable(gbps: float) -> float:
    """A demand is 0 or at least a kilobit per second: less is no traffic a counter can tell from noise,
    and only makes the programs' coefficients span more orders of magnitude than they resolve."""
    if 0 < gbps < MIN_DEMAND_GBPS:
        raise ValueError(f"{gbps:g} gbps is under {MIN_DEMAND_GBPS:g} gbps (a kilobit per second): "
                         "write 0 or at least that")
    return gbps


#: a demand's rate: 0, or between a kilobit per second and MAX_GBPS (a rule of the object itself, so
#: that an edit of the rate alone is held to it as surely as a whole document)
DemandGbps = Annotated[Gbps, AfterValidator(_zero_or_measurable)]
Metric = Annotated[int, Field(ge=1, le=MAX_METRIC), _Number]
Utilization = Annotated[float, Field(ge=MIN_UTILIZATION, le=MAX_UTILIZATION, allow_inf_nan=False), _Number]
#: a device named elsewhere (its own name has at most 64 characters), and a device or a link end ``device:port``
DeviceRef = Annotated[str, Field(min_length=1, max_length=64)]
TargetRef = Annotated[str, Field(min_length=1, max_length=80)]
PrefixText = Annotated[str, Field(max_length=64)]


class Role(StrEnum):
    """A device's tier. ``router`` is for non-Clos (``routing: isis`` or ``ospf``) fabrics."""

    TOR = "tor"
    LEAF = "leaf"
    SPINE = "spine"
    SUPERSPINE = "superspine"
    ROUTER = "router"


#: Tier of each Clos role, bottom up; links must join adjacent tiers.
TIER: dict[Role, int] = {Role.TOR: 0, Role.LEAF: 1, Role.SPINE: 2, Role.SUPERSPINE: 3}


class Routing(StrEnum):
    BGP = "bgp"
    ISIS = "isis"
    OSPF = "ospf"


#: The link-state routings: shortest paths by link metric (the IS-IS metric, the OSPF interface cost),
#: every equal-cost next hop; what ``routing: bgp`` is not.
LINK_STATE: frozenset[Routing] = frozenset({Routing.ISIS, Routing.OSPF})
#: The largest OSPF interface cost (16 bits, RFC 2328 appendix A.4.2); a stub router (RFC 6987) gives its
#: transit links this cost, which is how a drained device is rendered for OSPF.
MAX_OSPF_COST = 65_535


class WcmpRealization(StrEnum):
    LINK_BANDWIDTH = "link-bandwidth"
    FIB = "fib"


class FailureToleranceScope(StrEnum):
    DOMAINS = "domains"
    ALL_SINGLE = "all_single"
    K2 = "k2"


class Underlay(StrEnum):
    """How fabric links are numbered and BGP sessions run (DESIGN.md "Underlay"):
    ``ipv4-numbered`` (a /31 per link, sessions to the peer's IPv4 address; the default),
    ``unnumbered`` (no link addresses: BGP on the interfaces over IPv6 link-local, IPv4 and IPv6
    routes over IPv6 next hops, RFC 8950) or ``ipv6-numbered`` (a /127 per link, sessions to the
    peer's IPv6 address, IPv4 routes over IPv6 next hops)."""

    IPV4_NUMBERED = "ipv4-numbered"
    UNNUMBERED = "unnumbered"
    IPV6_NUMBERED = "ipv6-numbered"


class Defaults(_Frozen):
    """Fabric-wide defaults. ``max_ecmp_entries``: hardware budget per nexthop
    group, the largest sum of integer weights a group may have (default 128);
    ``underlay``: how links are numbered (:class:`Underlay`, default ``ipv4-numbered``)."""

    max_ecmp_entries: EcmpEntries = DEFAULT_MAX_ECMP_ENTRIES
    underlay: Underlay = Underlay.IPV4_NUMBERED


class Device(_Frozen):
    """A switch. ``pod`` groups ToRs and leaves, ``plane`` groups leaves and
    spines; ``asn`` is required for ``routing: bgp``; ``loopback`` is the router
    id and the address the device's own services answer on. ``router_id`` pins
    the router id (BGP router-id, IS-IS system id) a running device has, which
    then also holds the loopback address unless ``loopback`` names another one
    (DESIGN.md "Adoption"); absent, it is the IPv4 loopback or allocated. ``loopback``
    takes either family; ``loopback6`` gives an IPv4-looped device its IPv6 loopback too
    (dual stack); a device has at most one loopback of each family. ``bgp`` keeps the form its sessions
    run in (:class:`BgpForm`), ``ospf`` and ``isis`` its IGP's (:class:`OspfForm`, :class:`IsisForm`),
    ``host_ports`` the ports its subnets are on (:class:`HostPort`)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    role: Role = Role.ROUTER
    pod: Index | None = None
    plane: Index | None = None
    asn: Annotated[int, _Number] | None = None
    loopback: IpAddress | None = None
    loopback6: ipaddress.IPv6Address | None = None
    router_id: ipaddress.IPv4Address | None = None
    max_ecmp_entries: EcmpEntries | None = None
    bgp: BgpForm | None = None
    host_ports: tuple[HostPort, ...] | None = Field(default=None, max_length=1024)
    ospf: OspfForm | None = None
    isis: IsisForm | None = None

    @field_validator("loopback6")
    @classmethod
    def _one_loopback_per_family(cls, v: ipaddress.IPv6Address | None, info: ValidationInfo
                                 ) -> ipaddress.IPv6Address | None:
        if v is not None and isinstance(info.data.get("loopback"), ipaddress.IPv6Address):
            raise ValueError(f"loopback {info.data['loopback']} is IPv6 already: a device has at most one loopback "
                             "per family (give loopback the IPv4 one)")
        return v

    @property
    def loopback_v4(self) -> ipaddress.IPv4Address | None:
        """The device's IPv4 loopback, if it has one."""
        return self.loopback if isinstance(self.loopback, ipaddress.IPv4Address) else None

    @property
    def loopback_v6(self) -> ipaddress.IPv6Address | None:
        """The device's IPv6 loopback (``loopback`` when IPv6, else ``loopback6``), if it has one."""
        return self.loopback if isinstance(self.loopback, ipaddress.IPv6Address) else self.loopback6

    @field_validator("asn")
    @classmethod
    def _asn_range(cls, v: int | None) -> int | None:
        if v is not None and not (1 <= v <= ASN_MAX):
            raise ValueError(f"ASN {v} out of range 1..{ASN_MAX}")
        if v == 23456:
            raise ValueError("ASN 23456 is AS_TRANS (RFC 6793) and cannot be assigned")
        return v


class Link(_Frozen):
    """An undirected link between ``a:a_port`` and ``b:b_port``. ``capacity_gbps``
    is per direction (default 100); ``metric`` is the IS-IS metric or OSPF interface cost (default 10).
    ``a_address`` and ``b_address`` pin the ends' interface addresses with their
    length (``192.168.1.1/30``), both or neither, as a running fabric has them;
    absent, Loom allocates a /31 (:mod:`controller.model.addressing`)."""

    a: DeviceRef
    a_port: str = Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:-]+$")
    b: DeviceRef
    b_port: str = Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:-]+$")
    capacity_gbps: CapacityGbps = DEFAULT_CAPACITY_GBPS
    metric: Metric = DEFAULT_METRIC
    a_address: IpInterface | None = None
    b_address: IpInterface | None = None

    @property
    def pinned(self) -> bool:
        """Whether the link's addresses are pinned (both ends; validation refuses one alone)."""
        return self.a_address is not None and self.b_address is not None

    @property
    def end_a(self) -> str:
        return f"{self.a}:{self.a_port}"

    @property
    def end_b(self) -> str:
        return f"{self.b}:{self.b_port}"

    @property
    def key(self) -> str:
        """Stable name of the link: its lower end by name, as safety names it."""
        return min(self.end_a, self.end_b)


LinkEnd = tuple[str, str]


def parse_link_end(text: str) -> LinkEnd:
    """Split ``"device:port"`` into ``(device, port)``; raises ``ValueError``."""
    device, sep, port = text.partition(":")
    if not sep or not device or not port:
        raise ValueError(f"'{text}' is not a link end: expected 'device:port'")
    return device, port


class FailureDomain(_Frozen):
    """Devices and link ends (``device:port``) that fail together. ``kind`` is
    free text for people (power, srlg, rack, ...; default ``other``)."""

    name: str = Field(min_length=1, max_length=128)
    kind: str = Field("other", max_length=64)
    devices: tuple[DeviceRef, ...] = ()
    links: tuple[TargetRef, ...] = ()


class Prefix(_Frozen):
    """An IPv4 or IPv6 prefix and the devices that originate it (several = anycast)."""

    prefix: PrefixText
    origins: tuple[DeviceRef, ...] = Field(min_length=1)

    @field_validator("prefix")
    @classmethod
    def _canonical(cls, v: str) -> str:
        return canonical_prefix(v)

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.prefix)

    @property
    def version(self) -> int:
        """The prefix's address family: 4 or 6."""
        return prefix_version(self.prefix)


def prefix_version(prefix: str) -> int:
    """4 or 6: the family of a canonical prefix (:func:`canonical_prefix`)."""
    return 6 if ":" in prefix else 4


def prefix_order(prefix: str) -> tuple[int, int, int]:
    """A sort key for canonical prefixes of either family: IPv4 first, then by address and length."""
    net = ipaddress.ip_network(prefix)
    return net.version, int(net.network_address), net.prefixlen


#: IPv6 space that is not a routable prefix of a fabric: IPv4-mapped addresses (IPv4 space, written in
#: IPv6: it would overlap the IPv4 prefixes), link-local and multicast.
_V6_RESERVED = ((ipaddress.IPv6Network("::ffff:0:0/96"), "the IPv4-mapped addresses (IPv4 space written in IPv6)"),
                (ipaddress.IPv6Network("fe80::/10"), "the link-local addresses (never routed)"),
                (ipaddress.IPv6Network("ff00::/8"), "the multicast addresses"))


def canonical_prefix(text: str) -> str:
    """Validate an IPv4 or IPv6 prefix and return its canonical text (IPv6 compressed, lower case);
    host bits set is an error naming the network meant."""
    if not isinstance(text, str):
        raise ValueError("expected a prefix string like '10.0.0.0/24' or '2001:db8::/64'")
    return _canonical_prefix(text)


@functools.lru_cache(maxsize=1 << 17)
def _canonical_prefix(text: str) -> str:
    """:func:`canonical_prefix` of a string, remembered: a fabric's demands name its prefixes over and
    over, and parsing each with :mod:`ipaddress` was most of validating a large intent (errors are
    raised, not remembered)."""
    if "/" not in text:
        example = "2001:db8::/64" if ":" in text else "10.0.0.0/24"
        raise ValueError(f"'{text}' has no prefix length: expected a prefix like '{example}'")
    family = ipaddress.IPv6Network if ":" in text else ipaddress.IPv4Network
    try:
        net = family(text, strict=False)
    except ValueError as exc:
        raise ValueError(f"'{text}' is not an IPv{6 if ':' in text else 4} prefix ({exc})") from None
    if str(net) != text:
        try:
            family(text, strict=True)
        except ValueError:
            raise ValueError(f"host bits set in '{text}': did you mean '{net}'?") from None
    if isinstance(net, ipaddress.IPv6Network):
        for space, what in _V6_RESERVED:
            if net.subnet_of(space):
                raise ValueError(f"'{text}' lies in {space}, {what}: not a fabric prefix")
    return str(net)


class DrainPolicy(_Frozen):
    """A drained device or link end carries no transit traffic."""

    kind: Literal["drain"]
    target: TargetRef


class UtilizationLimitPolicy(_Frozen):
    """Largest link utilization allowed in the baseline (no failure)."""

    kind: Literal["utilization_limit"]
    max: Utilization


class FailureTolerancePolicy(_Frozen):
    """Largest link utilization allowed under each failure scenario of ``scope``."""

    kind: Literal["failure_tolerance"]
    scope: FailureToleranceScope = FailureToleranceScope.DOMAINS
    max_utilization: Utilization = 1.0


class WcmpPolicy(_Frozen):
    """WCMP on (default) or plain ECMP. ``realization`` defaults to
    ``link-bandwidth`` for ``routing: bgp`` and ``fib`` for the link-state routings (``isis``, ``ospf``)."""

    kind: Literal["wcmp"]
    enabled: bool = True
    realization: WcmpRealization | None = None
    #: ``robust``: reviews and commits use the robust plan (every failure of the tolerance scope under its
    #: limit before any reaction); absent or ``mlu``: the plan of least maximum utilization
    objective: Literal["mlu", "robust"] | None = None


class PathsPolicy(_Frozen):
    """``shortest`` (default) or ``loop_free`` (isis and ospf only: TE may leave shortest paths)."""

    kind: Literal["paths"]
    mode: Literal["shortest", "loop_free"] = "shortest"


class AutoTePolicy(_Frozen):
    """Automatic re-tuning from measured traffic (DESIGN.md, Closed loop): every ``interval_s`` the
    leader plans on the measured demand (``stat`` of the per-interval rates over ``window_s``, times
    ``headroom``) and commits it, as a change by ``auto-te``, when it is safe and lowers the predicted
    maximum utilization under that demand by ``min_gain`` (utilization points: 0.05 = 5 points) or more.
    ``objective: jobs`` plans for the running jobs instead (the least worst slowdown, each job's weighted by
    its ``priority``, links under their limit: :mod:`controller.jobplan`), and the gain is then that worst
    weighted slowdown's drop (0.05 = 5 % of a job's idle communication time)."""

    kind: Literal["auto_te"]
    enabled: bool = True
    interval_s: float = Field(60.0, ge=1, le=86400, allow_inf_nan=False)
    window_s: float = Field(300.0, ge=1, le=86400, allow_inf_nan=False)
    stat: Literal["mean", "p95", "max"] = "p95"
    headroom: float = Field(1.1, ge=1, le=10, allow_inf_nan=False)
    min_gain: float = Field(0.05, ge=0, le=10, allow_inf_nan=False)
    objective: Literal["mlu", "jobs"] = "mlu"


class FailureReactionPolicy(_Frozen):
    """What the leader does when a link or device fails (DESIGN.md, Operational state and failure reaction):
    after ``detect_s`` of it down, plan the active revision without it (an overlay, not an edit) and commit
    that when it is no worse than the current plan under the same failure; after ``hold_down_s`` of health
    (doubled for each flap in the hour) the full plan returns. At most ``max_per_hour`` reactions an hour.
    In force with these defaults when absent; ``enabled: false`` turns it off."""

    kind: Literal["failure_reaction"]
    enabled: bool = True
    detect_s: float = Field(1.0, ge=0, le=3600, allow_inf_nan=False)
    hold_down_s: float = Field(30.0, ge=0, le=86400, allow_inf_nan=False)
    max_per_hour: int = Field(30, ge=1, le=3600)


class InsightPolicy(_Frozen):
    """Baselines and anomalies of the jobs and links (DESIGN.md, ML workloads): a job's and a link's baseline
    is learned over ``baseline_s``; ``job.slowdown`` fires when a job's predicted slowdown stays above
    ``slowdown_threshold`` for two telemetry intervals, or its measured period rises well past its baseline.
    In force with these defaults when absent; ``enabled: false`` turns it off."""

    kind: Literal["insight"]
    enabled: bool = True
    baseline_s: float = Field(300.0, ge=10, le=7 * 86400, allow_inf_nan=False)
    slowdown_threshold: float = Field(1.2, gt=1, le=100, allow_inf_nan=False)


Policy = Annotated[
    DrainPolicy | UtilizationLimitPolicy | FailureTolerancePolicy | WcmpPolicy | PathsPolicy | AutoTePolicy
    | FailureReactionPolicy | InsightPolicy,
    Field(discriminator="kind"),
]

POLICY_KINDS = ("drain", "utilization_limit", "failure_tolerance", "wcmp", "paths", "auto_te", "failure_reaction",
                "insight")


class Demand(_Frozen):
    """Traffic entering the fabric at ``from`` toward the prefix ``to``."""

    from_: DeviceRef = Field(alias="from")
    to: PrefixText
    gbps: DemandGbps

    @field_validator("to")
    @classmethod
    def _canonical(cls, v: str) -> str:
        return canonical_prefix(v)


class Collective(StrEnum):
    """The three collectives jobs had before collectives became data (DESIGN.md, ML workloads); every
    built-in now lives in :mod:`controller.model.collectives_builtin`, and an intent adds its own."""

    RING_ALLREDUCE = "ring_allreduce"
    ALL_TO_ALL = "all_to_all"
    PIPELINE = "pipeline"


#: Sane bounds of a job: a byte to a petabyte per iteration, a microsecond to a day per iteration, a kilobit to
#: a petabit per second per flow.
JOB_MAX_BYTES_PER_ITER = 1e15
JOB_MIN_ITER_S = 1e-6
JOB_MAX_ITER_S = 86_400.0
JOB_MAX_GBPS = MAX_GBPS
JOB_MIN_GBPS = MIN_DEMAND_GBPS


#: a collective's name (a built-in or a template of the intent's ``collectives:``)
CollectiveName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
#: a job parameter's value: a number, a list of numbers (one per member) or a matrix (a list of rows)
ParamValue = float | list[float] | list[list[float]]


#: names a job cannot take: ``GET /v1/jobs/NAME`` answers these routes, not a job of that name
RESERVED_JOB_NAMES = frozenset({"discovered"})


class Job(_Frozen):
    """An ML training job placed on ``tors`` (in ring or stage order, the template's members 0..n-1):
    every iteration of ``iter_s`` seconds moves ``bytes_per_iter`` bytes in the pattern of
    ``collective``, a template of the registry (built-ins and the intent's ``collectives:``) filled
    with ``params``. ``priority`` weighs the job against others (1 when absent). It compiles to
    demands (:mod:`controller.model.jobs`)."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    tors: tuple[DeviceRef, ...] = Field(min_length=2, max_length=4096)
    collective: CollectiveName
    bytes_per_iter: Annotated[float, Field(gt=0, le=JOB_MAX_BYTES_PER_ITER, allow_inf_nan=False), _Number]
    iter_s: Annotated[float, Field(ge=JOB_MIN_ITER_S, le=JOB_MAX_ITER_S, allow_inf_nan=False), _Number]
    priority: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False), _Number] | None = None
    params: dict[Annotated[str, Field(max_length=64)], ParamValue] | None = None

    @field_validator("name")
    @classmethod
    def _not_a_route(cls, v: str) -> str:
        if v in RESERVED_JOB_NAMES:
            raise ValueError(f"'{v}' is the name of a route under /v1/jobs (GET /v1/jobs/{v}): choose another")
        return v

    @model_validator(mode="after")
    def _rate_bound(self) -> Job:
        gbps = self.bytes_per_iter * 8 / 1e9 / self.iter_s
        if gbps > JOB_MAX_GBPS:
            raise ValueError(f"bytes_per_iter / iter_s is {gbps:.3g} gbps, above the bound of {JOB_MAX_GBPS:g} gbps")
        if gbps < JOB_MIN_GBPS:
            raise ValueError(f"bytes_per_iter / iter_s is {gbps:.3g} gbps, below the bound of {JOB_MIN_GBPS:g} gbps")
        return self


class Intent(_Frozen):
    """One whole intent document (DESIGN.md, contract 1).

    Build it through :func:`controller.model.intent.load_intent` or
    :func:`controller.model.intent.validate_intent` so that cross-object rules are
    checked; constructing it directly only checks each object's shape.
    """

    name: str = Field(min_length=1, max_length=128)
    routing: Routing = Routing.BGP
    defaults: Defaults = Field(default_factory=lambda: Defaults(max_ecmp_entries=DEFAULT_MAX_ECMP_ENTRIES))
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    failure_domains: tuple[FailureDomain, ...] = ()
    prefixes: tuple[Prefix, ...] = ()
    policies: tuple[Policy, ...] = ()
    demands: tuple[Demand, ...] = ()
    jobs: tuple[Job, ...] = ()
    #: the intent's own collective templates, by name, as written (checked by
    #: :func:`controller.model.intent.validate_intent`; see :mod:`controller.model.collectives`)
    collectives: dict[Annotated[str, Field(max_length=64)], dict[str, Any]] = Field(default_factory=dict)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Intent:
        """A copy with ``update`` applied, whose derived views below are computed again: pydantic copies
        the instance's ``__dict__``, where :func:`functools.cached_property` keeps them, so a copy with
        other demands would otherwise answer the original's ``effective_demands``."""
        copy = super().model_copy(update=update, deep=deep)
        for name, attr in type(self).__dict__.items():
            if isinstance(attr, cached_property):
                copy.__dict__.pop(name, None)
        return copy

    # -- derived views (cached; the object is immutable) -------------------
    @cached_property
    def registry(self) -> Registry:
        """The collectives jobs may name: the built-ins and this intent's ``collectives:``."""
        return BUILTINS.extended(self.collectives) if self.collectives else BUILTINS

    @cached_property
    def device_map(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}

    @cached_property
    def drained_devices(self) -> frozenset[str]:
        return frozenset(
            p.target for p in self.policies if isinstance(p, DrainPolicy) and ":" not in p.target
        )

    @cached_property
    def drained_link_ends(self) -> frozenset[str]:
        """Drained ``device:port`` ends; a drained end drains its whole link."""
        return frozenset(p.target for p in self.policies if isinstance(p, DrainPolicy) and ":" in p.target)

    @cached_property
    def link_by_end(self) -> dict[str, Link]:
        out: dict[str, Link] = {}
        for link in self.links:
            out[link.end_a] = link
            out[link.end_b] = link
        return out

    @cached_property
    def drained_links(self) -> frozenset[str]:
        """Keys (:attr:`Link.key`) of links drained directly or through an end."""
        return frozenset(self.link_by_end[e].key for e in self.drained_link_ends if e in self.link_by_end)

    @cached_property
    def effective_demands(self) -> tuple[Demand, ...]:
        """The demand every planner and safety check routes: the declared demands
        with the jobs' demands added (summed where a pair already has demand).

        Declared demands keep their place (``demands[i]`` is still element ``i``);
        pairs only jobs ask for follow, in job order. See :func:`merge_demands`.
        """
        if not self.jobs:
            return self.demands
        return merge_demands(self)

    def demand_loc(self, i: int) -> str:
        """Where element ``i`` of :attr:`effective_demands` comes from, for error messages:
        ``demands[i]``, or ``jobs[j]`` for a pair only a job asks for."""
        if i < len(self.demands):
            return f"demands[{i}]"
        return self.job_demand_sources[i - len(self.demands)]

    @cached_property
    def job_demand_sources(self) -> tuple[str, ...]:
        """``jobs[j]`` for each effective demand past the declared ones (see :meth:`demand_loc`)."""
        return tuple(job_sources(self))

    def policy(self, kind: str) -> Any | None:
        """The first policy of ``kind`` or ``None``."""
        for p in self.policies:
            if p.kind == kind:
                return p
        return None

    @property
    def wcmp_enabled(self) -> bool:
        p = self.policy("wcmp")
        return True if p is None else bool(p.enabled)

    @property
    def wcmp_realization(self) -> WcmpRealization:
        p = self.policy("wcmp")
        if p is not None and p.realization is not None:
            return WcmpRealization(p.realization)
        paths = self.policy("paths")
        if self.routing in LINK_STATE or (paths is not None and paths.mode == "loop_free"):
            return WcmpRealization.FIB
        return WcmpRealization.LINK_BANDWIDTH

    @property
    def paths_mode(self) -> str:
        p = self.policy("paths")
        return "shortest" if p is None else str(p.mode)

    def max_ecmp_entries(self, device: str) -> int:
        d = self.device_map[device]
        return d.max_ecmp_entries if d.max_ecmp_entries is not None else self.defaults.max_ecmp_entries

    # -- serialization ------------------------------------------------------
    def to_document(self) -> JsonObject:
        """The canonical document: every field, defaults included, ``None`` left out; ``jobs`` and
        ``collectives`` only when there are any, so that an intent without them reads, exports and hashes
        as it did before they existed (stored revisions keep their content hashes)."""
        doc = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not doc.get("jobs"):
            doc.pop("jobs", None)
        if not doc.get("collectives"):
            doc.pop("collectives", None)
        if doc.get("defaults", {}).get("underlay") == Underlay.IPV4_NUMBERED.value:
            doc["defaults"].pop("underlay")  # the default, as before underlays existed: the same hash
        for pol in doc.get("policies", ()):
            if pol.get("kind") == "auto_te" and pol.get("objective") == "mlu":
                del pol["objective"]  # likewise the default objective
        return doc

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of the canonical document; equal intents have equal hashes."""
        blob = json.dumps(self.to_document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def merge_demands(intent: Intent) -> tuple[Demand, ...]:
    """The declared demands with the jobs' added (:func:`controller.model.jobs.job_matrix`): a declared pair
    keeps its place with the job rate summed in; pairs only jobs ask for follow, in the order the jobs
    produce them."""
    extra, _ = job_matrix(intent)
    out: list[Demand] = []
    for d in intent.demands:
        add = extra.pop((d.from_, d.to), 0.0)
        out.append(d if add == 0.0 else d.model_copy(update={"gbps": d.gbps + add}))
    for (src, prefix), gbps in extra.items():
        # computed from validated jobs, not declared: a ring's share may pass the bound of one declared demand
        out.append(Demand.model_construct(from_=src, to=prefix, gbps=gbps))
    return tuple(out)


def job_sources(intent: Intent) -> list[str]:
    """For each effective demand past the declared ones, the job that asks for it (``jobs[j]``)."""
    extra, first = job_matrix(intent)
    declared = {(d.from_, d.to) for d in intent.demands}
    return [f"jobs[{first[key]}]" for key in extra if key not in declared]
