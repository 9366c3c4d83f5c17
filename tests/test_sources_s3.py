"""An S3 prefix as a corpus, against moto's S3 server on 127.0.0.1: synced by ETag (an unchanged
object is not downloaded again), edits, adds and deletes, a missing bucket and a wrong key in one
line that never shows the key."""

from __future__ import annotations

import pytest

from situate.core.errors import InputError

pytest.importorskip("s3fs")
pytest.importorskip("moto")

KEY_ID, SECRET = "AKIAEXAMPLEKEY000001", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY1"


@pytest.fixture(scope="module")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(moto_server, monkeypatch):
    """A client of the moto server, and the environment a source reads its credentials from."""
    import botocore.session

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=moto_server, region_name="us-east-1", aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET)
    yield client
    for bucket in client.list_buckets().get("Buckets", []):
        name = bucket["Name"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=obj["Key"])
        client.delete_bucket(Bucket=name)


def put(client, key: str, text: str, bucket: str = "docs") -> None:
    client.put_object(Bucket=bucket, Key=key, Body=text.encode())


def page(n: int, extra: str = "") -> str:
    return f"# Report {n}\n\nReport {n} covers quarter {n} in enough words to chunk. {extra}\n"


def test_sync_by_etag(s3, tmp_path):
    from situate.tasks.sources.mirror import mirror_root, sync

    s3.create_bucket(Bucket="docs")
    for n in range(5):
        put(s3, f"reports/r{n}.md", page(n))
    put(s3, "reports/", "")  # a folder marker: no document
    put(s3, "other/x.md", page(9))  # outside the prefix
    url, cache = "s3://docs/reports/", tmp_path / "cache"
    first = sync(url, cache, 10**7)
    assert (first.listed, first.fetched, first.complete) == (5, 5, True)
    assert sync(url, cache, 10**7).unchanged == 5

    put(s3, "reports/r1.md", page(1, "Edited."))
    put(s3, "reports/r7.md", page(7))
    s3.delete_object(Bucket="docs", Key="reports/r2.md")
    third = sync(url, cache, 10**7)
    assert (third.fetched, third.unchanged, third.deleted) == (2, 3, 1)
    tree = mirror_root(url, cache) / "tree"
    assert sorted(p.name for p in tree.iterdir()) == ["r0.md", "r1.md", "r3.md", "r4.md", "r7.md"]
    assert "Edited." in (tree / "r1.md").read_text()


def test_missing_bucket_is_one_line(s3, tmp_path):
    from situate.tasks.sources.mirror import sync

    with pytest.raises(InputError) as e:
        sync("s3://absent-bucket/x/", tmp_path / "cache", 10**7)
    assert str(e.value) == ("s3://absent-bucket/x/: bucket 'absent-bucket' not found (or not "
                            "visible to these credentials)")


def test_wrong_key_is_one_line_without_the_key(s3, tmp_path, monkeypatch, caplog):
    """With moto's authentication on, a wrong key is refused: one line, and neither the key id nor
    the secret appears in it or in the log."""
    from moto import settings

    from situate.tasks.sources.mirror import sync

    s3.create_bucket(Bucket="docs")
    put(s3, "reports/r0.md", page(0))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong/secret/wrong/secret/wrong/secret00")
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # moto checks every request's key from now on
    try:
        with pytest.raises(InputError) as e:
            sync("s3://docs/reports/", tmp_path / "cache", 10**7)
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
    said = str(e.value)
    assert said.startswith("s3://docs/reports/: access refused (") and "\n" not in said
    assert said.endswith("check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
    for secret in ("AKIAWRONGWRONGWRONG1", "wrong/secret/wrong/secret/wrong/secret00"):
        assert secret not in said and secret not in caplog.text


def test_the_cli_says_a_wrong_key_in_one_line_without_it(s3, tmp_path):
    """`situate ingest s3://...` (and its --dry-run) with a wrong key: exit 2, one line on stderr,
    nothing on stdout, and neither the key id nor the secret in its output or any file it left."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from moto import settings

    s3.create_bucket(Bucket="docs")
    put(s3, "reports/r0.md", page(0))
    key_id, secret = "AKIAWRONGWRONGWRONG2", "wrong/secret/wrong/secret/wrong/secret02"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "PREFECT_API"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "AWS_ACCESS_KEY_ID": key_id,
                "AWS_SECRET_ACCESS_KEY": secret})
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # moto checks every request's key from now on
    try:
        runs = [subprocess.run([str(Path(sys.executable).with_name("situate")), "ingest",
                                "s3://docs/reports/", "--collection", "c", "--milvus-uri",
                                str(tmp_path / "m.db"), "--cache-dir", str(tmp_path / "cache"),
                                *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=300) for extra in ([], ["--dry-run"])]
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    for out in runs:
        assert (out.returncode, out.stdout) == (2, ""), out.stderr[-3000:]
        [line] = out.stderr.splitlines()
        assert line.startswith("situate ingest: error: s3://docs/reports/: access refused (")
        assert line.endswith("check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
        for part in (key_id, secret):
            assert part not in out.stderr
            for path in files:
                assert part.encode() not in path.read_bytes(), path


@pytest.mark.e2e
@pytest.mark.slow
def test_ingest_from_s3(prefect_harness, state, s3, counting):
    """First run indexes every object; a re-run downloads none and writes nothing; 1 edit + 1 add
    + 1 delete touch exactly those and give a fresh ingest's rows (the rounds every bucket goes
    through: tests/test_sources_cloud.py)."""
    from tests.fakes.object_stores import ingest_rounds, publish

    bucket = Bucket(s3)
    publish(bucket)
    ingest_rounds(bucket, state, counting)


class Bucket:
    """The moto server's S3, as tests/test_sources_cloud.py writes a bucket."""

    scheme = "s3"

    def __init__(self, client) -> None:
        self.client = client

    def create(self, bucket: str) -> None:
        self.client.create_bucket(Bucket=bucket)

    def put(self, key: str, text: str, bucket: str = "docs") -> None:
        put(self.client, key, text, bucket)

    def delete(self, key: str, bucket: str = "docs") -> None:
        self.client.delete_object(Bucket=bucket, Key=key)


def test_dry_run_lists_without_downloading(s3, tmp_path, monkeypatch):
    """A dry run prices the prefix from its listing (keys, sizes, ETags) against the mirror's
    markers: new, changed, unchanged, gone, and the bytes a sync would download; no object is
    downloaded and the mirror is left as it was."""
    from situate.tasks.sources import objects
    from situate.tasks.sources.mirror import mirror_root, sync
    from situate.tasks.sources.preview import preview

    s3.create_bucket(Bucket="docs")
    for n in range(5):
        put(s3, f"reports/r{n}.md", page(n))
    url, cache = "s3://docs/reports/", tmp_path / "cache"
    sync(url, cache, 10**7)
    put(s3, "reports/r1.md", page(1, "Edited."))
    put(s3, "reports/r7.md", page(7))
    s3.delete_object(Bucket="docs", Key="reports/r2.md")

    def no_download(*args, **kwargs):
        raise AssertionError("a dry run downloaded an object")

    monkeypatch.setattr(objects.S3Source, "fetch", no_download)
    state = (mirror_root(url, cache) / "state.sqlite").read_bytes()
    seen = preview(url, cache, 10**7)
    assert (seen.listed, seen.new, seen.changed, seen.unchanged, seen.gone) == (5, 1, 1, 3, 1)
    assert seen.bytes_to_fetch == len(page(1, "Edited.")) + len(page(7))
    assert (mirror_root(url, cache) / "state.sqlite").read_bytes() == state


@pytest.mark.e2e
@pytest.mark.slow
def test_an_emptied_prefix_is_pruned_and_a_failed_listing_prunes_nothing(prefect_harness, state,
                                                                        s3, monkeypatch):
    """Every object of the prefix deleted: the listing, whole and empty, is an empty corpus, and
    --prune deletes the collection's documents (a folder says 'no documents' instead); without
    --prune they stay. A listing that fails (a missing bucket) deletes nothing."""
    from tests.fakes.milvus_server import snapshot
    from tests.helpers import ingest

    s3.create_bucket(Bucket="docs")
    for n in range(3):
        put(s3, f"reports/r{n}.md", page(n))
    params = {"corpus": "s3://docs/reports/", "collection": "emptied", "context": "structural",
              "embedder": "hash", "prune": True}
    assert ingest(**params).new == 3
    for n in range(3):
        s3.delete_object(Bucket="docs", Key=f"reports/r{n}.md")
    kept = ingest(**{**params, "prune": False})
    assert (kept.source["gone"], kept.deleted_documents) == (3, 0)
    assert len(snapshot(state["milvus_uri"], "emptied")) > 0

    s3.delete_bucket(Bucket="docs")
    with pytest.raises(InputError, match="bucket 'docs' not found"):
        ingest(**params)
    assert len(snapshot(state["milvus_uri"], "emptied")) > 0

    s3.create_bucket(Bucket="docs")
    emptied = ingest(**params)
    assert (emptied.new, emptied.deleted_documents) == (0, 3)
    assert len(snapshot(state["milvus_uri"], "emptied")) == 0
