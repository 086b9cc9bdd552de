"""How to reach lakeFS: endpoint, credentials and timeouts, resolved the way lakectl does.

Operators already have lakectl configured, so we read the same sources in the same order
(explicit value > ``LAKECTL_*`` environment variable > ``~/.lakectl.yaml``). The environment is
*passed in*: nothing below an entry point reads ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from lakefs_gc.errors import ConfigError

API_PREFIX = "/api/v1"

ENV_ENDPOINT = "LAKECTL_SERVER_ENDPOINT_URL"
ENV_ACCESS_KEY_ID = "LAKECTL_CREDENTIALS_ACCESS_KEY_ID"
ENV_SECRET_ACCESS_KEY = "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY"

#: (section, key) in ``.lakectl.yaml`` for each connection field
_YAML_KEYS: dict[str, tuple[str, str]] = {
    "endpoint": ("server", "endpoint_url"),
    "access_key_id": ("credentials", "access_key_id"),
    "secret_access_key": ("credentials", "secret_access_key"),
}
_ENV_KEYS: dict[str, str] = {
    "endpoint": ENV_ENDPOINT,
    "access_key_id": ENV_ACCESS_KEY_ID,
    "secret_access_key": ENV_SECRET_ACCESS_KEY,
}


def normalize_endpoint(endpoint: str) -> str:
    """Return ``endpoint`` ending in ``/api/v1`` exactly once, without a trailing ``/``.

    lakectl accepts the server URL with or without the API prefix; the SDK needs it with.
    """
    url = endpoint.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"lakeFS endpoint must be an http(s) URL, got {endpoint!r}")
    if not url.endswith(API_PREFIX):
        url += API_PREFIX
    return url


class LakeFSConnection(BaseModel):
    """Validated connection settings for the lakeFS API."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str = Field(description="API base URL, normalised to end in /api/v1")
    access_key_id: str = Field(min_length=1)
    secret_access_key: SecretStr
    connect_timeout: float = Field(
        default=10.0, gt=0, description="Seconds to establish a TCP/TLS connection to lakeFS."
    )
    read_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds to wait for an ordinary API answer. The blocking prepare-commits "
        "fallback uses the overall prepare timeout instead, since it can legitimately run minutes.",
    )
    verify_ssl: bool = Field(default=True, description="Verify the server's TLS certificate.")
    max_attempts: int = Field(
        default=5,
        ge=1,
        description="Attempts per API call on connection errors, 5xx and 429 (never on other 4xx).",
    )
    retry_base_delay: float = Field(
        default=1.0, ge=0, description="Seconds before the first retry; doubles per attempt (full jitter)."
    )
    retry_max_delay: float = Field(default=20.0, ge=0, description="Cap of the delay between retries.")

    @field_validator("endpoint")
    @classmethod
    def _normalize(cls, value: str) -> str:
        return normalize_endpoint(value)

    @field_validator("secret_access_key")
    @classmethod
    def _secret_not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("secret_access_key must not be empty")
        return value


def default_lakectl_config_path(environ: Mapping[str, str]) -> Path | None:
    """lakectl's default config file, ``$HOME/.lakectl.yaml``; ``None`` without a HOME."""
    home = environ.get("HOME")
    return Path(home) / ".lakectl.yaml" if home else None


@dataclass(frozen=True)
class _LakectlFile:
    path: Path | None
    values: Mapping[str, str]
    state: str  # "read", "not found", "not given"


def _read_lakectl_yaml(path: Path | None) -> _LakectlFile:
    if path is None:
        return _LakectlFile(None, {}, "not given")
    if not path.is_file():
        return _LakectlFile(path, {}, "not found")
    try:
        doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read lakectl config {path}: {e}") from e
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"lakectl config {path} is not a YAML mapping")
    values: dict[str, str] = {}
    for field, (section, key) in _YAML_KEYS.items():
        block = doc.get(section)
        value = block.get(key) if isinstance(block, dict) else None
        if value is not None and str(value).strip():
            values[field] = str(value).strip()
    return _LakectlFile(path, values, "read")


def resolve_connection(
    *,
    endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    environ: Mapping[str, str],
    lakectl_config_path: Path | None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> LakeFSConnection:
    """Resolve each field independently: explicit > environment > lakectl YAML.

    Raises :class:`ConfigError` naming every missing field and every place it was looked for.
    """
    explicit = {
        "endpoint": endpoint,
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
    }
    lakectl = _read_lakectl_yaml(lakectl_config_path)
    resolved: dict[str, str] = {}
    missing: list[str] = []
    for field, env_key in _ENV_KEYS.items():
        value = _first_non_blank(explicit[field], environ.get(env_key), lakectl.values.get(field))
        if value is None:
            missing.append(_describe_sources(field, env_key, lakectl))
        else:
            resolved[field] = value
    if missing:
        raise ConfigError("lakeFS connection incomplete: " + "; ".join(missing))
    fields: dict[str, object] = dict(resolved)
    if connect_timeout is not None:
        fields["connect_timeout"] = connect_timeout
    if read_timeout is not None:
        fields["read_timeout"] = read_timeout
    fields.update(extra or {})  # other LakeFSConnection fields (retries, TLS), validated below
    try:
        return LakeFSConnection.model_validate(fields)
    except ValidationError as e:
        problems = "; ".join(f"lakefs.{'.'.join(map(str, i['loc']))}: {i['msg']}" for i in e.errors())
        raise ConfigError(f"invalid lakeFS connection settings: {problems}") from e


def _first_non_blank(*values: str | None) -> str | None:
    for value in values:
        if value is not None and value.strip():
            return value.strip()
    return None


def _describe_sources(field: str, env_key: str, lakectl: _LakectlFile) -> str:
    section, key = _YAML_KEYS[field]
    if lakectl.path is None:
        where_file = "no lakectl config file (HOME unset)"
    else:
        where_file = f"{section}.{key} in {lakectl.path} ({lakectl.state})"
    return f"missing {field} (looked at: explicit option, ${env_key}, {where_file})"
