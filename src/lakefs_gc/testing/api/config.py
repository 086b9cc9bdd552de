"""``/config``, ``/config/storage``, ``/config/garbage-collection``, ``/healthcheck``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakefs_gc.testing.http import Request, Response, Router, json_response

if TYPE_CHECKING:
    from lakefs_gc.testing.api import Services

#: blockstore id, type and the namespace it serves; the id is what repositories carry as storage_id
STORAGES = {
    "local": ("local", "local://path/to/repo", r"^local://"),
    "s3": ("s3", "s3://example-bucket/", r"^s3://"),
    "azure": ("azure", "https://mystorageaccount.blob.core.windows.net/mycontainer/", r"^https?://"),
}


def storage_config(blockstore_id: str, *, listed: bool) -> dict[str, Any]:
    kind, example, regex = STORAGES[blockstore_id]
    config: dict[str, Any] = {
        "blockstore_type": kind,
        "blockstore_namespace_example": example,
        "blockstore_namespace_ValidityRegex": regex,
        "default_namespace_prefix": "",
        "pre_sign_support": False,
        "pre_sign_support_ui": False,
        "import_support": kind != "local",
        "import_validity_regex": regex,
        "pre_sign_multipart_upload": False,
    }
    if listed:
        config["blockstore_id"] = blockstore_id
        config["blockstore_description"] = f"{kind} blockstore of the lakefs-gc test server"
    return config


def register(router: Router, services: Services) -> None:
    ctx = services.ctx

    def enabled() -> list[str]:
        return list(ctx.settings.blockstores)

    def get_config(_: Request) -> Response:
        ids = enabled()
        body: dict[str, Any] = {
            "version_config": {"version": ctx.settings.version},
            "storage_config": storage_config(ids[0], listed=len(ids) > 1),
        }
        # lakeFS empties the list for a single default blockstore (lakefs-gc-api.md, "The calls")
        body["storage_config_list"] = [storage_config(i, listed=True) for i in ids] if len(ids) > 1 else []
        return json_response(body)

    def get_storage_config(_: Request) -> Response:
        return json_response(storage_config(enabled()[0], listed=False))

    def get_gc_config(_: Request) -> Response:
        return json_response({"grace_period": int(ctx.settings.grace_period.total_seconds())})

    def get_version(_: Request) -> Response:
        return json_response({"version": ctx.settings.version})

    def health(_: Request) -> Response:
        return Response(204)

    router.add("GET", "/config", get_config)
    router.add("GET", "/config/storage", get_storage_config)
    router.add("GET", "/config/garbage-collection", get_gc_config)
    router.add("GET", "/config/version", get_version)
    router.add("GET", "/healthcheck", health)
