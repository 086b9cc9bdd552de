"""Settings of a GC job: one validated, frozen value built once at the edge and passed down.

Three sources, each field resolved independently, later ones winning:

1. a YAML config file (``--config gc.yaml``), sections ``lakefs``, ``storage``, ``gc``, ``spark``
   and a ``repositories`` list;
2. environment variables ``LAKEFS_GC_<SECTION>__<KEY>`` (``LAKEFS_GC_STORAGE__S3__ENDPOINT_URL``,
   ``LAKEFS_GC_GC__MIN_AGE``, ...), so secrets can come from a Kubernetes secret;
3. command-line flags.

The lakeFS connection then falls back to lakectl's own sources (``LAKECTL_*``, ``~/.lakectl.yaml``),
because operators already have lakectl configured. Object-store credentials that are not given
fall back to each SDK's default chain (boto3's for S3, pyarrow's for Azure/S3 reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from lakefs_gc.durations import duration_field
from lakefs_gc.errors import ConfigError, StorageError
from lakefs_gc.gc.cutoff import DEFAULT_MIN_AGE
from lakefs_gc.gc.params import MarkParams, SweepParams
from lakefs_gc.lakefs.settings import LakeFSConnection, default_lakectl_config_path, resolve_connection
from lakefs_gc.storage.filesystems import StorageOptions
from lakefs_gc.storage.locations import parse_location
from lakefs_gc.storage.throttle import DEFAULT_MAX_RETRIES

ENV_PREFIX = "LAKEFS_GC_"
_SECTIONS = ("lakefs", "storage", "gc", "spark", "repositories", "service")
_DURATIONS = ("min_age", "unsafe_min_age", "prepare_commits_timeout", "max_inventory_age", "max_mark_age")


class GcOptions(BaseModel):
    """How conservative a mark is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_age: timedelta = Field(
        default=DEFAULT_MIN_AGE,
        description="Objects modified less than this long ago are never deleted. Raised to lakeFS's "
        "grace period (GET /config/garbage-collection) when lower: a younger object may still be linked.",
    )
    unsafe_min_age: timedelta | None = Field(
        default=None,
        description="Force a min age even below lakeFS's grace period. For tests only: it can delete "
        "objects that are about to be committed.",
    )
    prepare_commits_timeout: timedelta = Field(
        default=timedelta(seconds=1200),
        description="How long lakeFS may take to compute the active commits (large repositories: minutes).",
    )

    inventory: str | None = Field(
        default=None,
        description="Inventory destination (an S3 Inventory destination prefix such as "
        "s3://inventory-bucket/prefix, or an Azure inventory container) whose newest complete, verified "
        "snapshot is the mark's candidate listing instead of listing the namespace. Listing a large "
        "bucket costs hours and millions of requests; a daily inventory already holds the listing. "
        "Objects created after the snapshot are simply not candidates this time (never deleted by it).",
    )
    prices: dict[str, str] = Field(
        default_factory=dict,
        description="Storage prices per GiB-month ('<blockstore>/<class>': decimal string, e.g. "
        "'s3/STANDARD': '0.023') over the approximate defaults of the mark's cost estimate.",
    )
    trust_checksums: bool = Field(
        default=False,
        description="Let the twin guard rule out pairs whose bytes an S3 inventory proves different, "
        "trusting lakeFS's checksums (docs/formats/lakefs-export-hazards.md); only then are ETags kept.",
    )
    max_inventory_age: timedelta = Field(
        default=timedelta(days=8),
        description="The newest inventory snapshot must be younger than this when the mark starts, or "
        "the mark is refused: a stalled inventory configuration must not go unnoticed behind marks that "
        "keep collecting less and less. 8 days covers a weekly schedule with a day of slack.",
    )
    sweep_concurrency: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Bulk-delete requests in flight per Spark task, at most. Stores answer in tens to "
        "hundreds of milliseconds, so a few requests per task keep the sweep from waiting. The sweep "
        "adapts below it by itself: each throttling answer (S3 SlowDown/503, Azure ServerBusy/503) halves "
        "a task's requests in flight, a run of good answers adds one back.",
    )
    sweep_max_retries: int = Field(
        default=DEFAULT_MAX_RETRIES,
        ge=0,
        le=100,
        description="Retries of a throttled or transiently failed bulk-delete request (only of the keys it "
        "did not settle), with exponential backoff and full jitter (0.2 s doubling, at most 20 s per "
        "wait). A key still throttled after them is reported failed, with the store's reason, in swept/ "
        "(a later sweep of the same mark deletes it): a throttling store must slow a sweep down, not "
        "stall it forever.",
    )
    max_deletes_per_second: float | None = Field(
        default=None,
        gt=0,
        description="A ceiling on the objects the sweep deletes per second, over all Spark tasks (default: "
        "none, only the store's throttling slows it). Protects other users of a shared bucket or account. "
        "Each task gets an equal share of it: the ceiling divided by the tasks that can run at once "
        "(partitions, at most Spark's default parallelism), so the sweep stays at or below it and gets "
        "slower near its end, when fewer tasks are left.",
    )

    revalidate: bool = Field(
        default=True,
        description="Before a sweep deletes anything, ask lakeFS again what is referenced (a fresh "
        "uncommitted dump and fresh active commits; only ranges the mark did not read are read) and "
        "keep every marked object referenced now. Between a mark and its sweep, a branch created from "
        "an expired commit, a tag or a revert can reference a marked object again; without this check "
        "the sweep deletes it. It costs little (ranges are content-addressed) and fails the sweep, "
        "deleting nothing, when lakeFS cannot answer.",
    )
    max_mark_age: timedelta = Field(
        default=timedelta(days=7),
        description="A mark older than this (from its summary's start_time; a mark whose age cannot be "
        "read counts as older) is swept only with revalidation: the older a mark, the more likely lakeFS "
        "references some of its objects again. Without revalidation such a sweep is refused.",
    )
    max_delete_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="A sweep that would delete more than this share of the namespace's objects (those "
        "the mark listed, outside _lakefs/) is refused, deleting nothing, unless forced (--force): a "
        "mark that wants most of a repository is more likely a mistake (missing branch, wrong retention "
        "rules, a half-read listing) than garbage. A mark that does not say how many objects it listed "
        "(lakeFS's Scala job) cannot be checked and needs --force.",
    )

    @field_validator(*_DURATIONS, mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_field(value)

    @field_validator("max_inventory_age", "max_mark_age")
    @classmethod
    def _positive_age(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive")
        return value

    def mark_params(self, repository: str, *, parallelism: int | None = None) -> MarkParams:
        """What one mark of ``repository`` is asked to do, from these options."""
        return MarkParams(
            repository=repository,
            min_age=self.min_age,
            unsafe_min_age=self.unsafe_min_age,
            prepare_commits_timeout=self.prepare_commits_timeout,
            inventory=self.inventory,
            max_inventory_age=self.max_inventory_age,
            trust_checksums=self.trust_checksums,
            parallelism=parallelism,
            prices=dict(self.prices),
        )

    def sweep_params(
        self, repository: str, *, force: bool = False, dry_run: bool = False, parallelism: int | None = None
    ) -> SweepParams:
        """What one sweep of ``repository`` is asked to do, from these options and the flags."""
        return SweepParams(
            repository=repository,
            revalidate=self.revalidate,
            max_mark_age=self.max_mark_age,
            max_delete_fraction=self.max_delete_fraction,
            prepare_commits_timeout=self.prepare_commits_timeout,
            concurrency=self.sweep_concurrency,
            max_retries=self.sweep_max_retries,
            max_deletes_per_second=self.max_deletes_per_second,
            force=force,
            dry_run=dry_run,
            parallelism=parallelism,
        )

    @field_validator("inventory")
    @classmethod
    def _destination(cls, value: str | None) -> str | None:
        """Checked here, so a typo fails before Spark starts and before lakeFS prepares anything."""
        if value is not None:
            try:
                parse_location(value)
            except StorageError as e:
                raise ValueError(str(e)) from e
        return value


class SparkOptions(BaseModel):
    """Where the job runs. Under spark-submit the master comes from spark-submit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str | None = Field(default=None, description="e.g. local[4]; None: spark-submit's or local[2]")
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")
    parallelism: int | None = Field(
        default=None,
        gt=0,
        description="Partitions for listing, range reading and sweeping (default: Spark's default "
        "parallelism). Raise it on large clusters, as lakeFS's range_read_parallelism.",
    )


class StorageSettings(BaseModel):
    """Everything but the lakeFS connection: for commands that only read and write storage.

    ``inventory show | generate`` and an ingest for explicitly given namespaces never talk to
    lakeFS, so they must not demand (or fall back to lakectl for) a connection they do not use.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage: StorageOptions = StorageOptions()
    gc: GcOptions = GcOptions()
    spark: SparkOptions = SparkOptions()
    repositories: tuple[str, ...] = ()


class GcSettings(StorageSettings):
    """Everything a mark or sweep needs, validated."""

    lakefs: LakeFSConnection

    def mark_params(self, repository: str) -> MarkParams:
        return self.gc.mark_params(repository, parallelism=self.spark.parallelism)

    def sweep_params(self, repository: str, *, force: bool = False, dry_run: bool = False) -> SweepParams:
        return self.gc.sweep_params(
            repository, force=force, dry_run=dry_run, parallelism=self.spark.parallelism
        )


G = TypeVar("G", bound="GcSettings")


def load_settings(
    *,
    environ: Mapping[str, str],
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    lakectl_config_path: Path | None = None,
    use_lakectl_defaults: bool = True,
    model: type[G] = GcSettings,  # type: ignore[assignment]  # the default is a G
) -> G:
    """Merge file < environment < ``overrides`` (nested dicts, ``None`` values ignored) and validate.

    Raises :class:`ConfigError` naming the offending source and field. ``model``: the settings
    class (the service's adds a ``service`` section, which the batch commands ignore, so one
    config file serves both).
    """
    merged = _merged_sources(environ, config_file, overrides)
    if "service" not in model.model_fields:
        merged.pop("service", None)
    lakefs_section = merged.pop("lakefs", {}) or {}
    if not isinstance(lakefs_section, dict):
        raise ConfigError("settings: 'lakefs' must be a mapping")
    lakectl_path = lakectl_config_path
    if lakectl_path is None and use_lakectl_defaults:
        lakectl_path = default_lakectl_config_path(environ)
    # Every problem at once, the whole file's before the credentials': an unknown key or a bad
    # duration must not wait for the operator to fix the connection first.
    problems: list[str] = []
    try:
        model.model_validate({"lakefs": _PLACEHOLDER_CONNECTION, **merged})
    except ValidationError as e:
        problems.append(_describe(e))
    try:
        connection = resolve_connection(
            endpoint=lakefs_section.pop("endpoint", None),
            access_key_id=lakefs_section.pop("access_key_id", None),
            secret_access_key=lakefs_section.pop("secret_access_key", None),
            connect_timeout=lakefs_section.pop("connect_timeout", None),
            read_timeout=lakefs_section.pop("read_timeout", None),
            environ=environ,
            lakectl_config_path=lakectl_path,
            extra=lakefs_section,
        )
    except ConfigError as e:
        problems.append(str(e))
    if problems:
        raise ConfigError("invalid settings: " + "; ".join(problems))
    try:
        return model.model_validate({"lakefs": connection, **merged})
    except ValidationError as e:  # pragma: no cover - validated above with a placeholder connection
        raise ConfigError(f"invalid settings: {_describe(e)}") from e


#: stands in for the lakeFS connection while the other sections are validated
_PLACEHOLDER_CONNECTION = LakeFSConnection.model_construct(
    endpoint="http://placeholder/api/v1", access_key_id="placeholder", secret_access_key=SecretStr("x")
)


def load_storage_settings(
    *,
    environ: Mapping[str, str],
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> StorageSettings:
    """As :func:`load_settings`, without the lakeFS connection (a ``lakefs`` section is ignored)."""
    merged = _merged_sources(environ, config_file, overrides)
    merged.pop("lakefs", None)
    merged.pop("service", None)
    try:
        return StorageSettings.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(f"invalid settings: {_describe(e)}") from e


def _merged_sources(
    environ: Mapping[str, str], config_file: Path | None, overrides: Mapping[str, Any] | None
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    if config_file is not None:
        _merge(merged, _read_config_file(config_file))
    _merge(merged, _from_environment(environ))
    _merge(merged, _drop_none(dict(overrides or {})))
    return merged


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist") from e
    except yaml.MarkedYAMLError as e:
        raise ConfigError(f"config file {path}: {_yaml_problem(e)}") from e
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {path} must be a YAML mapping")
    unknown = sorted(set(doc) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"config file {path}: unknown section(s) {unknown}; expected {list(_SECTIONS)}")
    return doc


def _yaml_problem(error: yaml.MarkedYAMLError) -> str:
    """``line 3, column 7: mapping values are not allowed here``: PyYAML's text is several lines
    about a ``"<unicode string>"``; an operator needs where, in the file they edit, and what."""
    mark = error.problem_mark or error.context_mark
    problem = error.problem or error.context or "not valid YAML"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def _from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """``LAKEFS_GC_STORAGE__S3__REGION=x`` → ``{"storage": {"s3": {"region": "x"}}}``."""
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or not value:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if path[0] not in _SECTIONS:
            continue
        parsed: Any = (
            [r.strip() for r in value.split(",") if r.strip()] if path == ["repositories"] else value
        )
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = parsed
    return out


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            item = _drop_none(item)
            if item:
                out[key] = item
        elif item is not None:
            out[key] = item
    return out


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"])
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
        parts.append(f"{where}: {message}")
    return "; ".join(parts)
