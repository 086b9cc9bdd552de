"""Committed address normalisation: lakeFS's CommittedAddressListerSpec vectors
(docs/formats/lakefs-ranges.md, "Committed addresses")."""

from __future__ import annotations

import pytest

from lakefs_gc.lakefs.addresses import normalize_committed_address
from lakefs_gc.sstable import AddressType

NS = "s3://test-bucket/lfs/"
SLICE_OBJECT = "data/gqv3epl4fd2o8m3men70/ce8co454fd2o8m3menag"

RELATIVE = AddressType.RELATIVE
FULL = AddressType.FULL
DEPRECATED = AddressType.BY_PREFIX_DEPRECATED


@pytest.mark.parametrize(
    ("address", "address_type", "expected"),
    [
        # FULL under the namespace: stripped to the namespace-relative key
        (f"s3://test-bucket/lfs/{SLICE_OBJECT}", FULL, SLICE_OBJECT),
        # FULL elsewhere (imports): dropped, never deleted
        ("s3://some-test/0.json", FULL, None),
        ("s3://test-bucket/lfs-other/data/x", FULL, None),  # exact prefix: lfs-other is not lfs/
        # another scheme's spelling is kept verbatim: it matches no listed key
        # (docs/formats/lakefs-gc-api.md, "Pitfalls of lakeFS's Scala client", 8)
        ("s3a://test-bucket/lfs/data/x", FULL, "s3a://test-bucket/lfs/data/x"),
        # RELATIVE: kept as is, whatever it looks like
        (SLICE_OBJECT, RELATIVE, SLICE_OBJECT),
        ("s3://test-bucket/lfs/data/x", RELATIVE, "s3://test-bucket/lfs/data/x"),
        # BY_PREFIX_DEPRECATED without scheme (old GUID objects): relative, kept
        ("4e068d1a46734113abd2218e87aace4c", DEPRECATED, "4e068d1a46734113abd2218e87aace4c"),
        # BY_PREFIX_DEPRECATED with the namespace: stripped; elsewhere: dropped
        ("s3://test-bucket/lfs/4e068d1a", DEPRECATED, "4e068d1a"),
        ("s3://other/4e068d1a", DEPRECATED, None),
        # FULL whose address has no scheme (or another scheme): kept verbatim
        ("some/schemeless/key", FULL, "some/schemeless/key"),
        ("gs://bucket/obj", FULL, "gs://bucket/obj"),
    ],
)
def test_vectors(address: str, address_type: AddressType, expected: str | None) -> None:
    assert normalize_committed_address(address, address_type, NS) == expected


def test_namespace_without_trailing_slash_gets_one() -> None:
    assert (
        normalize_committed_address(f"s3://test-bucket/lfs/{SLICE_OBJECT}", FULL, NS.rstrip("/"))
        == SLICE_OBJECT
    )
    assert normalize_committed_address("s3://test-bucket/lfsx/y", FULL, "s3://test-bucket/lfs") is None


def test_type_given_by_name_and_int() -> None:
    assert normalize_committed_address("s3://x/y", "RELATIVE", NS) == "s3://x/y"
    assert normalize_committed_address("s3://x/y", "FULL", NS) is None
    assert normalize_committed_address("s3://x/y", 2, NS) is None
    assert normalize_committed_address("s3://x/y", 1, NS) == "s3://x/y"


def test_azure_namespace() -> None:
    ns = "https://acct.blob.core.windows.net/container/repo"
    assert normalize_committed_address(f"{ns}/data/a/b", FULL, ns) == "data/a/b"
    assert normalize_committed_address("https://acct.blob.core.windows.net/other/x", FULL, ns) is None
