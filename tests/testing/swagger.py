"""The lakeFS OpenAPI spec as a test oracle: is a response one that lakeFS documents?

``lakefs_spec().check(operation_id, status, body, content_type)`` fails unless ``status`` is listed
for the operation (``default`` does not count), the content type is one the spec lists for it, and a
JSON body validates against the response schema. OpenAPI 3.0 schemas are converted to JSON Schema
2020-12 once: ``nullable`` becomes a ``null`` type, and objects reject undocumented properties (lakeFS
serialises generated structs, so it cannot send a field its spec does not name). Nothing passes by
default: an operation, status or media type that the spec does not document is an assertion error.

The spec is ``$LAKEFS_GC_SWAGGER`` or ``tests/fixtures/lakefs-api/lakefs-swagger.yml`` (lakeFS's, Apache-2.0).
"""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.conftest import REPO_ROOT

SPEC_URI = "urn:lakefs:swagger"
_COMPONENT_SCHEMAS = "#/components/schemas/"
_INT_RANGES = {"int32": 2**31, "int64": 2**63}


def spec_path() -> Path:
    env = os.environ.get("LAKEFS_GC_SWAGGER")
    path = Path(env) if env else REPO_ROOT / "tests" / "fixtures" / "lakefs-api" / "lakefs-swagger.yml"
    if not path.is_file():  # an error, never a skip: the conformance tests need the real spec
        raise RuntimeError(f"lakeFS OpenAPI spec not found at {path}: set LAKEFS_GC_SWAGGER")
    return path


@functools.cache
def lakefs_spec() -> LakeFSSpec:
    return LakeFSSpec(yaml.safe_load(spec_path().read_text()))


class LakeFSSpec:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = to_json_schema(document)
        resource = DRAFT202012.create_resource(self.document)
        self._registry: Registry[Any] = Registry().with_resource(SPEC_URI, resource)
        self._operations: dict[str, dict[str, Any]] = {}
        for path, item in document["paths"].items():
            for method, op in item.items():
                if isinstance(op, dict) and "operationId" in op:
                    self._operations[op["operationId"]] = {"path": path, "method": method}
        self._format_checker = _format_checker()

    def response(self, operation_id: str, status: int) -> tuple[str, dict[str, Any]]:
        """JSON pointer (into the converted document) and object of a documented response."""
        op = self._operations.get(operation_id)
        assert op is not None, f"operationId {operation_id!r} is not in the lakeFS spec"
        pointer = f"/paths/{_escape(op['path'])}/{op['method']}/responses/{status}"
        responses = self.document["paths"][op["path"]][op["method"]]["responses"]
        response = responses.get(str(status))
        assert response is not None, (
            f"{operation_id}: status {status} is not documented (documented: {sorted(responses)})"
        )
        while "$ref" in response:
            ref = response["$ref"]
            assert ref.startswith("#/components/responses/"), f"unexpected response $ref {ref}"
            pointer = ref[1:]
            response = self.document["components"]["responses"][ref.rsplit("/", 1)[1]]
        return pointer, response

    def check(
        self, operation_id: str, status: int, body: bytes | str | None, content_type: str | None
    ) -> Any:
        """Assert the response is documented and conforms; returns the parsed JSON body (or the raw body)."""
        pointer, response = self.response(operation_id, status)
        raw = body.encode() if isinstance(body, str) else (body or b"")
        content = response.get("content")
        if not content:
            assert not raw, f"{operation_id} {status}: spec documents no body, got {raw[:200]!r}"
            return None
        media = (content_type or "").split(";")[0].strip().lower()
        assert media in content, f"{operation_id} {status}: content type {media!r} not in {sorted(content)}"
        assert "schema" in content[media], f"{operation_id} {status} {media}: no schema in the spec"
        if media != "application/json":
            assert content[media]["schema"].get("type") == "string", (
                f"{operation_id} {status}: non-string {media}"
            )
            return raw
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise AssertionError(f"{operation_id} {status}: body is not JSON: {raw[:200]!r}") from e
        self.validate(f"{pointer}/content/{_escape(media)}/schema", value, f"{operation_id} {status}")
        return value

    def check_schema(self, name: str, value: Any) -> None:
        """Validate ``value`` against ``#/components/schemas/<name>``."""
        assert name in self.document["components"]["schemas"], f"schema {name!r} is not in the lakeFS spec"
        self.validate(f"/components/schemas/{name}", value, name)

    def validate(self, pointer: str, value: Any, what: str) -> None:
        validator = Draft202012Validator(
            {"$ref": f"{SPEC_URI}#{pointer}"}, registry=self._registry, format_checker=self._format_checker
        )
        error = best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "<body>"
            raise AssertionError(
                f"{what}: body does not match the spec at {where}: {error.message}\n{value!r}"
            )


def to_json_schema(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the OpenAPI 3.0 document whose schemas are JSON Schema 2020-12."""
    out = copy.deepcopy(document)
    for item in out["paths"].values():  # YAML reads `201:` as an int; JSON pointers need strings
        for op in item.values():
            if isinstance(op, dict) and "responses" in op:
                op["responses"] = {str(k): v for k, v in op["responses"].items()}
    schemas: dict[str, Any] = out["components"]["schemas"]
    open_names = {  # allOf members are combined, so they cannot forbid the other members' properties
        ref["$ref"][len(_COMPONENT_SCHEMAS) :]
        for schema in _walk(out)
        for ref in schema.get("allOf", [])
        if "$ref" in ref
    }
    for name, schema in schemas.items():
        _convert(schema, strict=name not in open_names)
    for schema in _response_schemas(out):
        _convert(schema, strict=True)
    return out


def _convert(schema: Any, *, strict: bool) -> None:
    if not isinstance(schema, dict):
        return
    if schema.pop("nullable", False):
        if "type" in schema:
            schema["type"] = [schema["type"], "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
        else:
            inner = {k: schema.pop(k) for k in list(schema)}
            schema["anyOf"] = [inner, {"type": "null"}]
    if strict and "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for key in ("properties", "patternProperties"):
        for sub in (schema.get(key) or {}).values():
            _convert(sub, strict=True)
    for key in ("items", "additionalProperties", "not"):
        _convert(schema.get(key), strict=True)
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            _convert(sub, strict=True)
    for sub in schema.get("allOf") or []:
        _convert(sub, strict=False)


def _response_schemas(document: dict[str, Any]) -> list[dict[str, Any]]:
    responses = list(document["components"].get("responses", {}).values())
    for item in document["paths"].values():
        for op in item.values():
            if isinstance(op, dict):
                responses.extend(op.get("responses", {}).values())
    return [
        media["schema"]
        for response in responses
        for media in (response.get("content") or {}).values()
        if isinstance(media.get("schema"), dict) and "$ref" not in media["schema"]
    ]


def _walk(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    for fmt, bound in _INT_RANGES.items():

        def in_range(value: object, bound: int = bound) -> bool:
            return not isinstance(value, int) or -bound <= value < bound

        checker.checks(fmt)(in_range)
    return checker


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")
