"""Client CPU per 1000-key S3 ``DeleteObjects``: boto3 as a user calls it, against the sweep's
deleter (lakefs_gc.storage.s3_deleter). Numbers, not a test.

No server: each request is answered in the client by a canned ``<DeleteResult>`` listing every
key as deleted (botocore's ``before-send`` hook), so what is measured is the client alone:
building, signing and checksumming the request, reading the answer, and for the deleter its
safety re-check of every key and its outcomes. That is the CPU a sweep task spends per request
whatever the store's latency.

    python bench/s3_delete_cpu.py --requests 200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from lakefs_gc.storage.clients import S3_DELETE_RETRIES, s3_client  # noqa: E402
from lakefs_gc.storage.filesystems import S3Options  # noqa: E402
from lakefs_gc.storage.s3_deleter import S3BulkDeleter  # noqa: E402


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body

    def read(self, *_: Any) -> bytes:
        return self.body


def answering_client(body: bytes) -> Any:
    """A botocore S3 client, as the sweep builds it, whose every DeleteObjects gets ``body``."""
    from botocore.awsrequest import AWSResponse
    from pydantic import SecretStr

    options = S3Options(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        access_key_id="k",
        secret_access_key=SecretStr("s"),
    )
    client = s3_client(options, retries=S3_DELETE_RETRIES)

    def answer(request: Any, **_: Any) -> Any:
        return AWSResponse(request.url, 200, {"content-type": "application/xml"}, _Raw(body))

    client.meta.events.register("before-send.s3.DeleteObjects", answer)
    return client


def cpu_ms(call: Any, requests: int) -> float:
    call()  # warm: the service model, the endpoint rules
    started = time.process_time()
    for _ in range(requests):
        call()
    return (time.process_time() - started) / requests * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--keys", type=int, default=1000)
    args = parser.parse_args()
    addresses = [f"data/g{i // 100:04d}/c{i:020d}d5qm7cakf3h0" for i in range(args.keys)]
    keys = ["ns/" + a for a in addresses]
    entries = "".join(f"<Deleted><Key>{k}</Key></Deleted>" for k in keys)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"{entries}</DeleteResult>"
    ).encode()
    plain = answering_client(body)
    objects = {"Objects": [{"Key": k} for k in keys], "Quiet": False}
    boto = cpu_ms(lambda: plain.delete_objects(Bucket="bucket", Delete=objects), args.requests)
    deleter = S3BulkDeleter(answering_client(body), "bucket", "ns/")
    ours = cpu_ms(lambda: deleter.delete(addresses), args.requests)
    print(f"client CPU per {args.keys}-key DeleteObjects, mean of {args.requests}:")
    print(f"  boto3 delete_objects (botocore's serializer and parser): {boto:6.2f} ms")
    less = f"({boto / ours:.1f}x less)"
    print(f"  S3BulkDeleter.delete (key checks, outcomes, our wire):   {ours:6.2f} ms  {less}")


if __name__ == "__main__":
    main()
