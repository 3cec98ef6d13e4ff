"""Controller settings, read from the environment (prefix ``LOOM_``) by pydantic-settings.

``LOOM_DB_URL`` names the store (SQLite file ``./loom.db`` by default, or a
PostgreSQL URL); ``LOOM_ADMIN_TOKEN`` optionally names a bootstrap admin bearer
token. Insecure values are refused rather than accepted quietly: an admin token
shorter than 32 characters, or one that looks like a placeholder. Request bodies
are bounded (``LOOM_MAX_BODY_BYTES``, ``LOOM_MAX_DOCUMENT_BODY_BYTES`` for the
routes that take a whole intent) and so are the documents read from them
(``LOOM_MAX_DOCUMENT_DEPTH``, ``LOOM_MAX_DOCUMENT_NODES``: :mod:`controller.model.text`).
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from controller.model.text import TextLimits
from controller.store.db import DEFAULT_URL, normalize_url

__all__ = ["MIN_ADMIN_TOKEN_LENGTH", "Settings"]

MIN_ADMIN_TOKEN_LENGTH = 32
_PLACEHOLDERS = ("changethis", "changeme", "secret", "password", "token", "admin")


class Settings(BaseSettings):
    """Everything the controller process is configured with."""

    model_config = SettingsConfigDict(env_prefix="LOOM_", extra="ignore")

    db_url: str = Field(DEFAULT_URL, description="SQLAlchemy URL of the store (or a SQLite file path)")
    store_ack_standbys: int | None = Field(
        None, ge=0, le=16, description="standbys of a replicated PostgreSQL that must have flushed a write before "
                                       "it is acknowledged (default: 1 when db_url names several hosts, else 0)")
    admin_token: SecretStr | None = Field(
        None, description="a bootstrap admin bearer token (at least 32 characters); optional")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    title: str = "Loom"
    read_cache_s: float = Field(
        0.5, ge=0, le=1.0, description="how long reads may serve the head revision this process last saw without "
                                       "asking the store (s); its own writes count at once, other replicas' within it")
    token_cache_s: float = Field(
        0.5, ge=0, le=1.0, description="how long a checked bearer token is trusted without asking the store (s); "
                                       "a revocation counts on every replica within it")
    # -- the change workflow (controller.workflow) --
    agents: str | None = Field(None, description="device agents: a YAML/JSON file {device: 'unix:PATH' | 'HOST:PORT'}")
    agent_tls_cert: str | None = Field(None, description="client certificate for agents on TCP (mutual TLS)")
    agent_tls_key: str | None = Field(None, description="its key")
    agent_tls_ca: str | None = Field(None, description="the CA that signed the agents' certificates")
    agent_timeout: float = Field(10.0, gt=0, description="deadline of an agent call (s)")
    agent_commit_timeout: float = Field(
        120.0, gt=0, description="deadline of Prepare, Commit and Rollback, which run frr-reload.py (s)")
    agent_max_attempts: int = Field(3, ge=1, le=10, description="tries of an agent call that finds it UNAVAILABLE")
    confirm_within: float = Field(60.0, gt=0, description="agents roll a commit back unless confirmed within (s)")
    verify_timeout: float = Field(30.0, gt=0, description="how long a commit waits for kernels to match the plan (s)")
    telemetry_interval_s: float = Field(
        10.0, ge=0, description="the gNMI sample interval asked of every switch (s); 0: no telemetry stream")
    telemetry_keep_s: float = Field(
        3600.0, ge=60, le=86400, description="how long the collector keeps every counter's rates (s): the longest "
                                             "window the telemetry views and auto-TE accept")
    telemetry_archive_s: float = Field(
        60.0, ge=0, le=3600, description="how often the leader stores the collector's new rates (s), which a "
                                         "restarted replica reads back for its windows; 0: nothing stored")
    reaction_precompute_s: float = Field(
        300.0, ge=0, le=86400, description="the leader's planning time, after each commit, for the reaction plans "
                                           "of the failure-tolerance scope's scenarios (s); 0: solved on failure")
    review_reaction_s: float = Field(
        5.0, ge=0, le=3600, description="a review's planning time for the reaction plans of its failure scenarios "
                                        "that the reaction table does not hold (s); 0: table lookups only")
    reaction_push_s: float = Field(
        0.5, ge=0, le=600, description="what a reaction takes after detect_s, seeing the failure to the reaction "
                                       "plan in the kernels (s), as a review assumes it: measured on dry agents by "
                                       "tests/bench/reaction.py and on FRR by tests/lab/test_fib_failure_lab.py")
    drift_interval: float = Field(60.0, ge=0, description="seconds between drift checks (0: only after commits)")
    drift_repair: bool = Field(False, description="re-push the active revision when drift is found")
    settle_interval: float = Field(
        1.0, gt=0, le=3600, description="how often the leader drives devices that a final change left on another "
                                        "revision (an agent down when it should have been rolled back) (s)")
    auto_te_confirm: int = Field(
        2, ge=1, le=100, description="automatic re-tuning commits only after this many consecutive evaluations "
                                     "cleared min_gain (hysteresis against noise)")
    auto_te_backoff_max: int = Field(
        32, ge=1, le=10000, description="the longest back-off after refused or failed re-tunings, in intervals "
                                        "(it doubles from 2 with each consecutive one)")
    # -- the safety sweep of reviews and the commit gate (safety.sweep.check) --
    executor: str = Field(
        "local", pattern=r"^(local|ray|ray://\S+:\d+)$",
        description="where a review's safety sweep runs when it has at least executor_threshold scenarios: local "
                    "(this process), ray (a local Ray cluster, or the one RAY_ADDRESS names) or ray://HOST:PORT "
                    "(Ray Client); a cluster that cannot be reached falls back to local, with a warning logged")
    executor_threshold: int = Field(
        5_000, ge=1, description="scenarios from which a review's safety sweep goes to the executor (fewer: "
                                 "this process, one thread)")
    # -- the audit log of refused requests (401, 403, malformed 422) --
    audit_refusal_burst: int = Field(
        5, ge=1, le=10_000, description="refusals of one client and reason audited one by one at once")
    audit_refusal_refill_s: float = Field(
        60.0, gt=0, description="one more such entry per this many seconds; the rest are summarized as often")
    # -- high availability (controller.workflow.cluster) --
    replica_id: str | None = Field(
        None, max_length=128, description="this replica's name in the cluster (default: HOST:PORT:PID, unique)")
    lease_ttl: float = Field(10.0, gt=0, le=3600, description="the leader lease's time to live (s)")
    lease_renew: float | None = Field(
        None, gt=0, description="seconds between lease renewals (default: a third of lease_ttl)")
    commit_poll_interval: float = Field(
        0.5, gt=0, le=60, description="how often the leader looks for commits queued by any replica (s)")

    @property
    def lease_renew_interval(self) -> float:
        return self.lease_renew if self.lease_renew is not None else self.lease_ttl / 3

    @model_validator(mode="after")
    def _lease_timing(self) -> Settings:
        if self.lease_renew_interval >= self.lease_ttl:
            raise ValueError(f"LOOM_LEASE_RENEW ({self.lease_renew_interval:g} s) must be shorter than "
                             f"LOOM_LEASE_TTL ({self.lease_ttl:g} s): the lease would lapse between renewals")
        return self
    # -- bounded input (api.core.guard, controller.model.text) --
    max_body_bytes: int = Field(
        4 * 2**20, ge=1024, le=2**31, description="largest request body (bytes) of a route; 413 past it")
    max_document_body_bytes: int = Field(
        64 * 2**20, ge=1024, le=2**31,
        description="largest body (bytes) of the routes that take a whole intent (PUT /v1/intent, POST /v1/changes)")
    max_document_depth: int = Field(32, ge=4, le=256, description="nesting levels of arrays and objects read")
    max_document_nodes: int = Field(4_000_000, ge=1000, description="values (scalars, arrays, objects) read")

    def text_limits(self) -> TextLimits:
        """The bounds of every JSON or YAML document read from a request."""
        return TextLimits(max_depth=self.max_document_depth, max_nodes=self.max_document_nodes)

    @field_validator("db_url")
    @classmethod
    def _url(cls, v: str) -> str:
        return normalize_url(v)

    @field_validator("admin_token")
    @classmethod
    def _strong_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None or not v.get_secret_value():
            return None
        text = v.get_secret_value()
        if len(text) < MIN_ADMIN_TOKEN_LENGTH:
            raise ValueError(f"LOOM_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_LENGTH} characters "
                             "(try: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        if len(set(text)) < 8 or any(text.lower().startswith(p) for p in _PLACEHOLDERS):
            raise ValueError("LOOM_ADMIN_TOKEN looks like a placeholder: use a random secret")
        return v
