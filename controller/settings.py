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

from pydantic import Field, SecretStr, field_validator
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
    admin_token: SecretStr | None = Field(
        None, description="a bootstrap admin bearer token (at least 32 characters); optional")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    title: str = "Loom"
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
    drift_interval: float = Field(60.0, ge=0, description="seconds between drift checks (0: only after commits)")
    drift_repair: bool = Field(False, description="re-push the active revision when drift is found")
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
