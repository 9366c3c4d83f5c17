"""Google Cloud Storage (gs://) and Azure Blob Storage (az://) prefixes as corpora, against
emulators on 127.0.0.1 (tests/fakes/object_stores.py): a first sync fetches every object; a
re-run with nothing changed fetches no body (generation, ETag); 1 edit, 1 add and 1 delete touch
exactly those; a missing bucket and a wrong credential are one line that shows no secret."""

from __future__ import annotations

import json
from typing import Any

import pytest

from situate.core.errors import InputError
from tests.fakes import object_stores
from tests.fakes.object_stores import change, page, publish

pytest.importorskip("gcsfs")
pytest.importorskip("adlfs")
pytest.importorskip("gcp_storage_emulator")


class GCS:
    """A bucket of the GCS emulator, written through gcsfs (the source's own client)."""

    scheme = "gs"

    def __init__(self, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        from gcsfs.core import GCSFileSystem

        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        self.fs = GCSFileSystem(token="anon", skip_instance_cache=True, use_listings_cache=False)

    def create(self, bucket: str) -> None:
        self.fs.mkdir(bucket)

    def put(self, key: str, text: str, bucket: str = "docs") -> None:
        self.fs.pipe_file(f"{bucket}/{key}", text.encode())

    def delete(self, key: str, bucket: str = "docs") -> None:
        self.fs.rm_file(f"{bucket}/{key}")

    def clear(self) -> None:
        for bucket in self.fs.ls(""):
            self.fs.rm(bucket.rstrip("/"), recursive=True)


class Azure:
    """A container of Azurite, written through azure-storage-blob."""

    scheme = "az"

    def __init__(self, connection: str, monkeypatch: pytest.MonkeyPatch) -> None:
        from azure.storage.blob import BlobServiceClient

        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection)
        for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
                     "AZURE_STORAGE_SAS_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        self.connection = connection
        self.client = BlobServiceClient.from_connection_string(connection)

    def create(self, bucket: str) -> None:
        self.client.create_container(bucket)

    def put(self, key: str, text: str, bucket: str = "docs") -> None:
        self.client.get_container_client(bucket).upload_blob(key, text.encode(), overwrite=True)

    def delete(self, key: str, bucket: str = "docs") -> None:
        self.client.get_container_client(bucket).delete_blob(key)

    def clear(self) -> None:
        for container in self.client.list_containers():
            self.client.delete_container(container.name)


@pytest.fixture(scope="module")
def gcs_server():
    with object_stores.gcs_emulator() as url:
        yield url


@pytest.fixture(scope="module")
def azure_server():
    with object_stores.azurite() as connection:
        yield connection


# Azurite is an npm install (about 45 s, once) and a Node process (6 s to start): its tests are in
# the soak tier (`make test-soak`), the GCS emulator's (in process, milliseconds) in `make test`.
AZURE = pytest.param("az", marks=pytest.mark.soak)


@pytest.fixture(params=["gs", AZURE])
def store(request, monkeypatch):
    """Each provider's emulator, cleared after the test, and the environment a source reads."""
    if request.param == "gs":
        bucket: Any = GCS(request.getfixturevalue("gcs_server"), monkeypatch)
    else:
        bucket = Azure(request.getfixturevalue("azure_server"), monkeypatch)
    yield bucket
    bucket.clear()


def test_sync_by_generation_or_etag(store, tmp_path, monkeypatch):
    """First run: every object; unchanged re-run: no body fetched; 1 edit + 1 add + 1 delete:
    exactly those fetched or removed. Azure's listing is read 2 blobs a page here, so that the
    run crosses pages."""
    from situate.tasks.sources import objects
    from situate.tasks.sources.mirror import mirror_root, sync

    monkeypatch.setattr(objects.AzureSource, "page", 2)
    publish(store)
    url, cache = f"{store.scheme}://docs/reports/", tmp_path / "cache"
    first = sync(url, cache, 10**7)
    assert (first.listed, first.fetched, first.complete) == (5, 5, True)

    fetched: list[str] = []
    real_fetch = objects._Bucket.fetch

    def counted(self, entry, limit):
        fetched.append(entry.id)
        return real_fetch(self, entry, limit)

    monkeypatch.setattr(objects._Bucket, "fetch", counted)
    again = sync(url, cache, 10**7)
    assert (again.listed, again.unchanged, again.fetched, again.deleted, fetched) == (5, 5, 0, 0, [])

    change(store)
    third = sync(url, cache, 10**7)
    assert (third.fetched, third.unchanged, third.deleted) == (2, 3, 1)
    assert sorted(fetched) == ["r1.md", "r7.md"]
    tree = mirror_root(url, cache) / "tree"
    assert sorted(p.name for p in tree.iterdir()) == ["r0.md", "r1.md", "r3.md", "r4.md", "r7.md"]
    assert "Edited." in (tree / "r1.md").read_text()


def test_dry_run_lists_without_downloading(store, tmp_path, monkeypatch):
    """A dry run prices the prefix from its listing (names, sizes, generations or ETags) against
    the mirror's markers: new, changed, unchanged, gone, and the bytes a sync would fetch; no
    object's body is fetched and the mirror is left as it was (as test_sources_s3's)."""
    from situate.tasks.sources import objects
    from situate.tasks.sources.mirror import mirror_root, sync
    from situate.tasks.sources.preview import preview

    publish(store)
    url, cache = f"{store.scheme}://docs/reports/", tmp_path / "cache"
    sync(url, cache, 10**7)
    change(store)

    def no_download(*args, **kwargs):
        raise AssertionError("a dry run fetched an object")

    monkeypatch.setattr(objects._Bucket, "fetch", no_download)
    root = mirror_root(url, cache)
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    seen = preview(url, cache, 10**7)
    assert (seen.listed, seen.new, seen.changed, seen.unchanged, seen.gone) == (5, 1, 1, 3, 1)
    assert (seen.bytes_to_fetch, seen.sizes_unknown, seen.complete) == (
        len(page(1, "Edited.")) + len(page(7)), 0, True)
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_missing_bucket_is_one_line(store, tmp_path):
    from situate.tasks.sources.mirror import sync

    url = f"{store.scheme}://absent-bucket/x/"
    with pytest.raises(InputError) as e:
        sync(url, tmp_path / "cache", 10**7)
    assert str(e.value) == (f"{url}: bucket 'absent-bucket' not found (or not visible to these "
                            "credentials)")


def test_a_wrong_gcs_key_is_one_line_without_the_key(gcs_server, tmp_path, monkeypatch, caplog):
    """A service account key the token endpoint refuses (GOOGLE_APPLICATION_CREDENTIALS): one
    line, said at once (not after gcsfs's half minute of retries), and no line of the private
    key in it or in the log."""
    from situate.tasks.sources.mirror import sync

    store = GCS(gcs_server, monkeypatch)
    store.create("docs")
    store.put("reports/r0.md", page(0))
    with object_stores.RefusingTokenEndpoint() as endpoint:
        key = object_stores.service_account(endpoint.url)
        (tmp_path / "key.json").write_text(json.dumps(key))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
        with pytest.raises(InputError) as e:
            sync("gs://docs/reports/", tmp_path / "cache", 10**7)
    store.clear()
    said = str(e.value)
    assert said == ("gs://docs/reports/: access refused (invalid_grant: Invalid JWT Signature.); "
                    "check GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default "
                    "credentials")
    body = key["private_key"].splitlines()[1]
    assert body not in said and body not in caplog.text and "Traceback" not in caplog.text


@pytest.mark.soak
def test_a_wrong_azure_key_is_one_line_without_the_key(azure_server, tmp_path, monkeypatch,
                                                       caplog):
    """A connection string whose account key Azurite refuses: one line, no key in it or the log."""
    from situate.tasks.sources.mirror import sync

    store = Azure(azure_server, monkeypatch)
    store.create("docs")
    store.put("reports/r0.md", page(0))
    wrong = "V3JvbmdXcm9uZ1dyb25nV3JvbmdXcm9uZ1dyb25nV3JvbmdXcm9uZ1dyb25nV3Jvbmc="
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",
                       azure_server.replace(object_stores.AZURE_KEY, wrong))
    try:
        with pytest.raises(InputError) as e:
            sync("az://docs/reports/", tmp_path / "cache", 10**7)
    finally:
        store.clear()
    said = str(e.value)
    assert said.startswith("az://docs/reports/: access refused (Server failed to authenticate")
    assert said.endswith("check AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME "
                         "with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN")
    assert "\n" not in said
    assert wrong not in said and wrong not in caplog.text


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.soak
def test_ingest_from_a_bucket(prefect_harness, state, store, counting):
    """The S3 source's end-to-end test (tests/test_sources_s3.py, in `make test`) on gs:// and
    az://."""
    publish(store)
    object_stores.ingest_rounds(store, state, counting)


def test_a_gcs_listing_is_read_page_by_page(tmp_path, monkeypatch):
    """The listing follows nextPageToken a page at a time (2 objects a page here), and yields
    each object under the prefix with its generation as its marker."""
    from situate.tasks.sources import objects

    names = {f"reports/r{n}.md": 100 + n for n in range(5)} | {"reports/": 1, "other/x.md": 9}
    with object_stores.PagingGCS(names) as fake:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake.base_url)
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        monkeypatch.setattr(objects.GCSSource, "page", 2)
        source = objects.GCSSource("gs://docs/reports/", tmp_path)
        listed = [(e.id, e.marker) for e in source.entries(None)]  # type: ignore[arg-type]
    assert listed == [(f"r{n}.md", f"generation:{100 + n}") for n in range(5)]
    assert [r.get("pageToken") for r in fake.requests] == [None, "2", "4"]
    assert {r["maxResults"] for r in fake.requests} == {"2"}
