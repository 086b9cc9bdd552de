"""Connection resolution: explicit > LAKECTL_* environment > ~/.lakectl.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from lakefs_gc.errors import ConfigError
from lakefs_gc.lakefs.settings import (
    LakeFSConnection,
    default_lakectl_config_path,
    normalize_endpoint,
    resolve_connection,
)

ENV = {
    "LAKECTL_SERVER_ENDPOINT_URL": "http://env:8000",
    "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": "env-key",
    "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": "env-secret",
}


def write_lakectl(tmp_path: Path, endpoint: str = "https://yaml.example.com/api/v1") -> Path:
    path = tmp_path / ".lakectl.yaml"
    path.write_text(
        "credentials:\n"
        "  access_key_id: yaml-key\n"
        "  secret_access_key: yaml-secret\n"
        "server:\n"
        f"  endpoint_url: {endpoint}\n"
        "  retries:\n    enabled: true\n"
    )
    return path


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://localhost:8000", "http://localhost:8000/api/v1"),
        ("http://localhost:8000/", "http://localhost:8000/api/v1"),
        ("http://localhost:8000/api/v1", "http://localhost:8000/api/v1"),
        ("http://localhost:8000/api/v1/", "http://localhost:8000/api/v1"),
        (" https://lakefs.example.com/prefix// ", "https://lakefs.example.com/prefix/api/v1"),
    ],
)
def test_endpoint_gets_api_prefix_exactly_once(given: str, expected: str) -> None:
    assert normalize_endpoint(given) == expected


def test_endpoint_must_be_http() -> None:
    with pytest.raises(ValidationError):
        LakeFSConnection(endpoint="lakefs.local:8000", access_key_id="k", secret_access_key="s")  # type: ignore[arg-type]


def test_from_environment(tmp_path: Path) -> None:
    conn = resolve_connection(environ=ENV, lakectl_config_path=tmp_path / "missing.yaml")
    assert conn.endpoint == "http://env:8000/api/v1"
    assert conn.access_key_id == "env-key"
    assert conn.secret_access_key.get_secret_value() == "env-secret"
    assert "env-secret" not in repr(conn)


def test_from_lakectl_yaml(tmp_path: Path) -> None:
    conn = resolve_connection(environ={}, lakectl_config_path=write_lakectl(tmp_path))
    assert conn.endpoint == "https://yaml.example.com/api/v1"
    assert conn.access_key_id == "yaml-key"
    assert conn.secret_access_key.get_secret_value() == "yaml-secret"


def test_precedence_is_per_field(tmp_path: Path) -> None:
    env = {"LAKECTL_CREDENTIALS_ACCESS_KEY_ID": "env-key"}
    conn = resolve_connection(
        endpoint="http://explicit:1234/",
        environ=env,
        lakectl_config_path=write_lakectl(tmp_path),
        read_timeout=99,
    )
    assert conn.endpoint == "http://explicit:1234/api/v1"  # explicit beats env and yaml
    assert conn.access_key_id == "env-key"  # env beats yaml
    assert conn.secret_access_key.get_secret_value() == "yaml-secret"  # yaml fills the rest
    assert conn.read_timeout == 99


def test_explicit_beats_environment(tmp_path: Path) -> None:
    conn = resolve_connection(
        endpoint="http://x",
        access_key_id="k",
        secret_access_key="s",
        environ=ENV,
        lakectl_config_path=None,
    )
    assert (conn.endpoint, conn.access_key_id) == ("http://x/api/v1", "k")


def test_missing_values_name_every_place_looked_at(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as e:
        resolve_connection(environ={"LAKECTL_SERVER_ENDPOINT_URL": "http://e"}, lakectl_config_path=missing)
    message = str(e.value)
    assert "missing access_key_id" in message and "missing secret_access_key" in message
    assert "missing endpoint" not in message
    assert "$LAKECTL_CREDENTIALS_ACCESS_KEY_ID" in message
    assert f"credentials.access_key_id in {missing} (not found)" in message


def test_blank_values_count_as_missing(tmp_path: Path) -> None:
    env = {**ENV, "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": "  "}
    with pytest.raises(ConfigError, match="missing secret_access_key"):
        resolve_connection(environ=env, lakectl_config_path=None)


def test_malformed_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / ".lakectl.yaml"
    path.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match=str(path)):
        resolve_connection(environ=ENV, lakectl_config_path=path)


def test_invalid_endpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid lakeFS connection settings"):
        resolve_connection(endpoint="ftp://x", environ=ENV, lakectl_config_path=None)


def test_default_lakectl_path() -> None:
    assert default_lakectl_config_path({"HOME": "/home/u"}) == Path("/home/u/.lakectl.yaml")
    assert default_lakectl_config_path({}) is None
