"""A real `situate ingest` of an S3 prefix (moto's server on 127.0.0.1) killed with SIGKILL while
its objects are downloaded into the mirror, and while the collection's rows are written; then the
same command. The killed run follows a change in the bucket (one object edited, one deleted, one
added), and the command run again leaves the collection's rows as a fresh ingest's."""

from __future__ import annotations

import signal

import pytest

from tests.test_sources_kills import _ingest, _rows
from tests.test_sources_s3 import moto_server, put, s3

pytest.importorskip("s3fs")
pytest.importorskip("moto")

# The same kills as the git source's, through the object store's listing: the soak tier.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.soak, pytest.mark.timeout(900)]
__all__ = ["moto_server", "s3"]  # fixtures shared with test_sources_s3


def _text(n: int, extra: str = "") -> str:
    return " ".join(f"Report {n}, section {i}: shard {i} of region {n} kept its replicas and "
                    f"retried its leases." for i in range(14)) + f" {extra}\n"


def _publish(client, bucket: str, before: bool) -> None:
    if before:
        for n in range(5):
            put(client, f"r/r{n}.md", _text(n), bucket)
        return
    put(client, "r/r1.md", _text(1, "Edited."), bucket)
    put(client, "r/r5.md", _text(5), bucket)
    client.delete_object(Bucket=bucket, Key="r/r2.md")


@pytest.mark.parametrize("point", ["during_fetch", "during_rows"])
def test_a_killed_s3_ingest_then_the_same_command(tmp_path, s3, point):
    s3.create_bucket(Bucket="fresh")
    _publish(s3, "fresh", True)
    _publish(s3, "fresh", False)
    (tmp_path / "fresh").mkdir()
    _ingest(tmp_path / "fresh", "s3://fresh/r/", str(tmp_path / "fresh" / "m.db"))
    fresh = _rows(str(tmp_path / "fresh" / "m.db"))

    s3.create_bucket(Bucket="docs")
    url, uri = "s3://docs/r/", str(tmp_path / "m.db")
    _publish(s3, "docs", True)
    _ingest(tmp_path, url, uri)
    _publish(s3, "docs", False)
    assert _ingest(tmp_path, url, uri, point) == -signal.SIGKILL
    _ingest(tmp_path, url, uri)
    assert _rows(uri) == fresh
