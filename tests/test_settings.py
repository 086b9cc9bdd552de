"""GcSettings: config file < LAKEFS_GC_* environment < flags, lakectl fallback, clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from lakefs_gc.cli.gc import gc_settings, validate_run_mode
from lakefs_gc.cli.main import build_parser, main
from lakefs_gc.errors import ConfigError
from lakefs_gc.settings import load_settings

LAKEFS = {"endpoint": "http://lakefs:8000", "access_key_id": "AKIA", "secret_access_key": "secret"}


def write(path: Path, doc: object) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = write(
        tmp_path / "gc.yaml",
        {
            "lakefs": {**LAKEFS, "max_attempts": 3},
            "storage": {
                "s3": {"endpoint_url": "http://file:9000", "region": "eu-west-1"},
                "local_root": "/data",
            },
            "gc": {"min_age": "48h"},
            "spark": {"conf": {"spark.executor.memory": "4g"}, "parallelism": 16},
            "repositories": ["a", "b"],
        },
    )
    environ = {
        "LAKEFS_GC_STORAGE__S3__REGION": "us-east-2",
        "LAKEFS_GC_GC__MIN_AGE": "72h",
        "LAKEFS_GC_REPOSITORIES": "c, d",
        "UNRELATED": "x",
    }
    settings = load_settings(
        environ=environ,
        config_file=config,
        overrides={"gc": {"min_age": None}, "storage": {"local_root": "/flag"}},
    )
    assert settings.lakefs.endpoint == "http://lakefs:8000/api/v1"
    assert settings.lakefs.max_attempts == 3
    assert settings.storage.s3.endpoint_url == "http://file:9000"  # file
    assert settings.storage.s3.region == "us-east-2"  # environment beats file
    assert settings.storage.local_root == "/flag"  # flag beats file
    assert settings.gc.min_age == timedelta(hours=72)  # None flag = not given
    assert settings.repositories == ("c", "d")
    assert settings.spark.conf == {"spark.executor.memory": "4g"} and settings.spark.parallelism == 16


def test_lakefs_connection_falls_back_to_lakectl(tmp_path: Path) -> None:
    lakectl = write(
        tmp_path / ".lakectl.yaml",
        {"server": {"endpoint_url": "https://lakefs.example.com"}, "credentials": {"access_key_id": "K"}},
    )
    environ = {"HOME": str(tmp_path), "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": "S"}
    settings = load_settings(environ=environ)
    assert settings.lakefs.endpoint == "https://lakefs.example.com/api/v1"
    assert (settings.lakefs.access_key_id, settings.lakefs.secret_access_key.get_secret_value()) == ("K", "S")
    assert lakectl.exists()


def test_secrets_do_not_leak_into_repr(tmp_path: Path) -> None:
    config = write(
        tmp_path / "gc.yaml", {"lakefs": LAKEFS, "storage": {"azure": {"account_key": "very-secret"}}}
    )
    settings = load_settings(environ={}, config_file=config)
    assert "very-secret" not in repr(settings) and "secret'" not in repr(settings.lakefs)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"lakefs": LAKEFS, "gc": {"min_age": "soon"}}, "invalid duration 'soon'"),
        ({"lakefs": LAKEFS, "storage": {"s3": {"endpint_url": "x"}}}, "storage.s3.endpint_url"),
        ({"lakefs": LAKEFS, "sparks": {}}, "unknown section(s) ['sparks']"),
        ({"lakefs": {**LAKEFS, "retries": 3}}, "retries"),
        (
            {"lakefs": {"endpoint": "lakefs:8000", "access_key_id": "a", "secret_access_key": "b"}},
            "http(s) URL",
        ),
        (
            {"lakefs": LAKEFS, "gc": {"max_inventory_age": "0s"}},
            "gc.max_inventory_age: Value error, must be positive",
        ),
        (
            {"lakefs": LAKEFS, "gc": {"inventory": "inventory-bucket/prefix"}},
            "gc.inventory: Value error, unsupported",
        ),
        ({"gc": {}}, "missing endpoint"),
        ([1, 2], "must be a YAML mapping"),
    ],
)
def test_bad_settings_name_the_field(tmp_path: Path, doc: object, message: str) -> None:
    config = write(tmp_path / "gc.yaml", doc)
    with pytest.raises(ConfigError) as error:
        load_settings(environ={}, config_file=config, use_lakectl_defaults=False)
    assert message in str(error.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope.yaml does not exist"):
        load_settings(environ={}, config_file=tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("command", "repos", "marks", "message"),
    [
        ("mark", [], [], "no repository given"),
        ("mark", ["r"], ["m"], "Can't provide mark ID for mark mode"),
        ("run", ["r"], ["m"], "Can't provide mark ID for mark mode"),
        ("sweep", ["r"], [], "Please provide a mark ID (--mark-id) for sweep-only mode"),
        ("sweep", ["r", "s"], ["m"], "one --mark-id per --repo"),
    ],
)
def test_run_mode_checks(command: str, repos: list[str], marks: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        validate_run_mode(command, repos, marks)
    assert message in str(error.value)


def test_mode_errors_exit_before_spark(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "gc.yaml", {"lakefs": LAKEFS})
    assert main(["sweep", "--repo", "r", "--config", str(config)]) == 3
    assert "Please provide a mark ID" in capsys.readouterr().err


def test_run_refuses_without_terminal_or_yes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "gc.yaml", {"lakefs": LAKEFS})
    assert main(["run", "--repo", "r", "--config", str(config)]) == 3  # pytest's stdin is not a terminal
    assert "pass --yes" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["mark", "sweep", "run"])
def test_help_explains(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    for needle in ("--repo", "--min-age", "LAKEFS_GC_", "success=false", "_lakefs/retention/gc/unified"):
        assert needle in out


def test_inventory_settings(tmp_path: Path) -> None:
    """--inventory/--max-inventory-age on mark and run, from flags, environment or file; default 8 days."""
    config = write(tmp_path / "gc.yaml", {"lakefs": LAKEFS, "gc": {"inventory": "s3://inv/file"}})
    assert load_settings(environ={}, config_file=config).gc.max_inventory_age == timedelta(days=8)
    environ = {"LAKEFS_GC_GC__MAX_INVENTORY_AGE": "36h"}
    for command in ("mark", "run"):
        args = build_parser().parse_args([command, "--config", str(config)])
        settings = gc_settings(args, environ)
        assert (settings.gc.inventory, settings.gc.max_inventory_age) == (
            "s3://inv/file",
            timedelta(hours=36),
        )
        flags = ["--inventory", "https://acct.blob.core.windows.net/inventory", "--max-inventory-age", "2d"]
        settings = gc_settings(build_parser().parse_args([command, "--config", str(config), *flags]), environ)
        assert settings.gc.inventory == "https://acct.blob.core.windows.net/inventory"
        assert settings.gc.max_inventory_age == timedelta(days=2)
    sweep = build_parser().parse_args(["sweep", "--config", str(config)])
    assert gc_settings(sweep, {}).gc.inventory == "s3://inv/file"  # the file's, harmless: sweep never lists


def test_sweep_takes_no_inventory_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--inventory", "s3://inv/prefix"])
    assert "unrecognized arguments: --inventory" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["mark", "run"])
def test_help_explains_inventory(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for needle in (
        "--inventory DEST",
        "S3 Inventory destination prefix",
        "Azure Blob inventory container",
        "newest complete, verified inventory snapshot",
        "Objects created after the snapshot are simply not candidates this time",
        "--max-inventory-age DURATION",
        "(default 8d)",
        "exit code 7",
    ):
        assert needle in out


def test_sweep_safety_settings(tmp_path: Path) -> None:
    """Revalidation on, 7-day marks, half the namespace by default; file < environment < flags."""
    config = write(tmp_path / "gc.yaml", {"lakefs": LAKEFS, "gc": {"max_mark_age": "3d"}})
    defaults = load_settings(environ={}, config_file=write(tmp_path / "empty.yaml", {"lakefs": LAKEFS})).gc
    assert (defaults.revalidate, defaults.max_mark_age, defaults.max_delete_fraction) == (
        True,
        timedelta(days=7),
        0.5,
    )
    environ = {"LAKEFS_GC_GC__REVALIDATE": "false", "LAKEFS_GC_GC__MAX_DELETE_FRACTION": "0.8"}
    for command in ("sweep", "run"):
        args = build_parser().parse_args([command, "--config", str(config)])
        gc = gc_settings(args, environ).gc
        assert (gc.revalidate, gc.max_mark_age, gc.max_delete_fraction) == (False, timedelta(days=3), 0.8)
        assert args.force is False
        assert gc_settings(args, {}).gc.revalidate is True  # the flag's absence is not --no-revalidate
        flags = ["--no-revalidate", "--max-mark-age", "12h", "--max-delete-fraction", "1", "--force"]
        args = build_parser().parse_args([command, "--config", str(config), *flags])
        gc = gc_settings(args, {}).gc
        assert (gc.revalidate, gc.max_mark_age, gc.max_delete_fraction) == (False, timedelta(hours=12), 1.0)
        assert args.force is True
    for bad in (["--max-delete-fraction", "0"], ["--max-delete-fraction", "1.01"], ["--max-mark-age", "0s"]):
        args = build_parser().parse_args(["sweep", "--config", str(config), *bad])
        with pytest.raises(ConfigError, match=r"max_delete_fraction|max_mark_age"):
            gc_settings(args, {})


def test_mark_takes_no_sweep_safety_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mark", "--force"])
    assert "unrecognized arguments: --force" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["sweep", "run"])
def test_help_explains_sweep_safety(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for needle in (
        "--no-revalidate",
        "--max-mark-age DURATION",
        "(default 7d)",
        "--max-delete-fraction FRACTION",
        "(default 0.5)",
        "--force",
        "branch created from an expired commit",
        "exit with code 10",
    ):
        assert needle in out
