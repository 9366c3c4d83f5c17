"""Object-store prefixes through fsspec: `s3://bucket/prefix/` (s3fs, `pip install
'situate[s3]'`), `gs://bucket/prefix/` (gcsfs, `situate[gcs]`), `az://container/prefix/`
(adlfs, `situate[azure]`).

Credentials are each provider's usual ones, read by its own library, or the fields of a Prefect
block (`--credentials-block`, `situate.tasks.sources.base.SourceCredentials`):

- S3 (botocore): `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE`,
  the shared files (`~/.aws/credentials`), an instance role; `AWS_ENDPOINT_URL` points it at
  another S3 (MinIO, a test server). A block's `aws_access_key_id`, `aws_secret_access_key`,
  `aws_session_token`, `profile_name`, `region_name` (prefect-aws' `AwsCredentials`).
- GCS (google-auth): `GOOGLE_APPLICATION_CREDENTIALS` (a service account's JSON file), gcloud's
  application-default credentials, a metadata server; `STORAGE_EMULATOR_HOST` points it at an
  emulator, which is then spoken to without credentials unless some are given. A block's
  `service_account_info` (or a Secret block holding that JSON) and `project` (prefect-gcp's
  `GcpCredentials`).
- Azure Blob (adlfs): `AZURE_STORAGE_CONNECTION_STRING`, or `AZURE_STORAGE_ACCOUNT_NAME` with
  `AZURE_STORAGE_ACCOUNT_KEY` or `AZURE_STORAGE_SAS_TOKEN`, or a service principal
  (`AZURE_STORAGE_CLIENT_ID`, `..._CLIENT_SECRET`, `..._TENANT_ID`). A block's
  `connection_string` (prefect-azure's `AzureBlobStorageCredentials`, or a Secret block holding
  it), `account_name`, `account_key`, `sas_token`; its `account_url` alone: the account, read
  with Azure's default credential chain (azure-identity's `DefaultAzureCredential`).

The listing is read a page (1,000 keys; Azure's 5,000) at a time and streamed into the mirror's
SQLite, so a prefix of a million keys is never held in memory. Each object's change marker is
what the store says changes with its bytes: S3's and Azure's ETag, GCS's generation. An object
whose marker is the one recorded is not downloaded again. An object is read with a ranged GET up
to the byte limit and no further. A listing that fails is one line naming the bucket (no
credential in it), and the sync then deletes nothing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from situate.core.errors import InputError
from situate.core.secrets import remember, secret_lines
from situate.tasks.sources.base import Entry, FetchFailed, Previous, TooLarge, shown

# The variables whose values are credentials: masked in every message from now on.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                        "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_KEY",
                        "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CLIENT_SECRET")


class _Bucket:
    """What every object store shares: the URL's bucket and prefix, the listing as a stream of
    pages turned into entries, the bounded read, and errors as one line. A store says how to
    connect (`_connect`), how to list one page after another (`_objects`: key, marker, size) and
    which exceptions mean "refused" (`_refused`)."""

    scheme = ""
    extra = ""
    where = ""  # where credentials come from, for the "access refused" line

    def __init__(self, url: str, workdir: Path,
                 credentials: Mapping[str, Any] | None = None) -> None:
        self.url, self.shown, self.complete = url, shown(url), True
        parts = urlsplit(url)
        self.bucket = parts.netloc.rpartition("@")[2]
        if not self.bucket:
            raise InputError(f"{self.shown}: no bucket; give {self.scheme}://bucket/prefix/")
        prefix = parts.path.lstrip("/")
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        remember(*(os.environ.get(v, "") for v in CREDENTIAL_VARIABLES))
        remember(*_connection_string_secrets(os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")))
        try:
            self.fs: Any = self._connect(dict(credentials or {}))
        except ImportError:
            raise InputError(f"{self.shown}: {self.scheme}:// needs its fsspec file system: "
                             f"pip install 'situate[{self.extra}]'") from None
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - a client that refuses its credentials
            raise self._error(e) from None

    def _connect(self, credentials: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _objects(self) -> AsyncIterator[tuple[str, str, int]]:
        raise NotImplementedError

    def _refused(self, e: BaseException) -> bool:
        return isinstance(e, PermissionError)

    def _missing(self, e: BaseException) -> bool:
        return isinstance(e, FileNotFoundError)

    def _error(self, e: BaseException) -> InputError:
        """What went wrong with the bucket as one line, with no credential in it."""
        lines = [line for line in str(e).splitlines() if line.strip()]
        text = " ".join((lines[0] if lines else "").split())[:300]
        if self._missing(e):
            return InputError(f"{self.shown}: bucket {self.bucket!r} not found (or not visible "
                              "to these credentials)")
        if self._refused(e):
            return InputError(f"{self.shown}: access refused ({shown(text)}); check "
                              f"{self.where}")
        return InputError(f"{self.shown}: cannot be listed ({type(e).__name__}: {shown(text)})")

    def entries(self, previous: Previous) -> Iterator[Entry]:
        from fsspec.asyn import sync

        pages = self._objects()
        while True:
            try:
                key, marker, size = sync(self.fs.loop, pages.__anext__)
            except StopAsyncIteration:
                return
            except Exception as e:  # noqa: BLE001 - each provider's client raises many kinds
                raise self._error(e) from None
            if not key.startswith(self.prefix) or key.endswith("/"):
                continue  # a folder marker
            yield Entry(key[len(self.prefix):], marker, size)

    def _path(self, doc_id: str) -> str:
        return f"{self.bucket}/{self.prefix}{doc_id}"

    def fetch(self, entry: Entry, limit: int) -> bytes:
        if entry.size is not None and entry.size > limit:
            raise TooLarge
        try:
            data: bytes = self.fs.cat_file(self._path(entry.id), start=0, end=limit + 1)
        except Exception as e:  # noqa: BLE001 - one object's failure is that object's
            first = (str(e).splitlines() or [""])[0]
            raise FetchFailed(f"{type(e).__name__}: {shown(' '.join(first.split())[:200])}") from None
        if len(data) > limit:
            raise TooLarge
        return data

    def close(self) -> None:
        pass


class S3Source(_Bucket):
    """The objects under an S3 prefix (see the module's docstring)."""

    scheme, extra = "s3", "s3"
    where = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"

    def _connect(self, credentials: dict[str, Any]) -> Any:
        import s3fs

        if credentials.get("secret"):
            raise InputError(f"{self.shown}: the Secret block {_named(credentials)} holds one "
                             "value; for s3:// store a JSON object with aws_access_key_id and "
                             "aws_secret_access_key (or use an aws-credentials block)")
        given = {"key": credentials.get("aws_access_key_id"),
                 "secret": credentials.get("aws_secret_access_key"),
                 "token": credentials.get("aws_session_token"),
                 "profile": credentials.get("profile_name")}
        kwargs: dict[str, Any] = {k: v for k, v in given.items() if v}
        client = {k: v for k, v in (("region_name", credentials.get("region_name")),
                                    ("endpoint_url", _endpoint(credentials))) if v}
        if client:
            kwargs["client_kwargs"] = client
        if credentials:
            self.where = f"the fields of the credentials block ({_named(credentials)})"
        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **kwargs)

    async def _objects(self) -> AsyncIterator[tuple[str, str, int]]:
        async for info in self.fs._iterdir(self.bucket, delimiter="", prefix=self.prefix):
            if info.get("type") != "file":
                continue
            key = str(info.get("name", "")).removeprefix(f"{self.bucket}/")  # bucket/key
            yield key, f"etag:{str(info.get('ETag', '')).strip(chr(34))}", int(info.get("size", 0))


class GCSSource(_Bucket):
    """The objects under a Google Cloud Storage prefix (see the module's docstring). gcsfs's
    plain JSON-API file system, not its gRPC one for zonal buckets: a listing and ranged reads
    are all a sync needs, and the gRPC one first asks a control service for each bucket's
    layout (a minute's timeout against an emulator)."""

    scheme, extra, page = "gs", "gcs", 1000
    where = "GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default credentials"

    def _connect(self, credentials: dict[str, Any]) -> Any:
        with warnings.catch_warnings():
            # google-api-core's notice that grpcio < 1.83 lacks post-quantum TLS (grpcio is held
            # below 1.80: pyproject.toml says why), printed at import; its gRPC is not used here.
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*grpcio")
            from gcsfs.core import GCSFileSystem

        info = credentials.get("service_account_info") or credentials.get("secret")
        if "private_key" in credentials:  # a Secret block holding the key file's JSON
            info = {k: v for k, v in credentials.items() if k != "_block"}
        if isinstance(info, str):
            info = _json(info, self.shown)
        token: Any = None
        if info:
            if not isinstance(info, dict):
                raise InputError(f"{self.shown}: the credentials block's service_account_info is "
                                 "no JSON object: store the service account's key file as it is")
            remember(*secret_lines(str(info.get("private_key", ""))))
            from google.oauth2 import service_account

            accounts: Any = service_account.Credentials  # google-auth is untyped here
            token = accounts.from_service_account_info(
                info, scopes=["https://www.googleapis.com/auth/devstorage.read_only"])
            self.where = f"the service account in the credentials block ({_named(credentials)})"
        elif credentials.get("service_account_file"):
            token = str(credentials["service_account_file"])
        elif os.environ.get("STORAGE_EMULATOR_HOST") and not os.environ.get(
                "GOOGLE_APPLICATION_CREDENTIALS"):
            token = "anon"  # an emulator takes no credentials (as google-cloud-storage does)
        with warnings.catch_warnings():  # "project not set": only listing buckets needs one
            warnings.filterwarnings("ignore", message="GCS project not set")
            fs = GCSFileSystem(token=token, project=credentials.get("project") or None,
                               skip_instance_cache=True, use_listings_cache=False)
        # Credentials refused are said now, once: inside a request gcsfs would retry the refusal
        # with backoff for half a minute, then log it with a traceback.
        fs.credentials.maybe_refresh()
        return fs

    def _error(self, e: BaseException) -> InputError:
        cause = e.__cause__
        if type(cause).__name__ == "RefreshError" and cause is not None and cause.args:
            e = PermissionError(str(cause.args[0]))  # the token endpoint's own words
        return super()._error(e)

    def _refused(self, e: BaseException) -> bool:
        name = type(e).__name__
        return (isinstance(e, PermissionError) or name in ("RefreshError", "DefaultCredentialsError",
                                                           "TransportError")
                or getattr(e, "code", None) in (401, 403) or str(e).startswith("Forbidden"))

    async def _objects(self) -> AsyncIterator[tuple[str, str, int]]:
        token: str | None = None
        while True:
            page = await self.fs._call("GET", "b/{}/o", self.bucket, json_out=True,
                                       prefix=self.prefix or None, maxResults=self.page,
                                       pageToken=token)
            for item in page.get("items", []):
                yield str(item["name"]), f"generation:{item.get('generation', '')}", int(
                    item.get("size", 0))
            token = page.get("nextPageToken")
            if not token:
                return


class AzureSource(_Bucket):
    """The blobs under an Azure Blob Storage prefix, `az://container/prefix/` (see the module's
    docstring): listed through the container client adlfs connects, a page at a time."""

    scheme, extra, page = "az", "azure", 5000
    where = ("AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with "
             "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN")

    def _connect(self, credentials: dict[str, Any]) -> Any:
        import adlfs

        fields = ("connection_string", "account_name", "account_key", "sas_token", "client_id",
                  "client_secret", "tenant_id")
        kwargs: dict[str, Any] = {k: str(credentials[k]) for k in fields if credentials.get(k)}
        if credentials.get("secret"):  # a Secret block holding a connection string
            kwargs["connection_string"] = str(credentials["secret"])
        url = str(credentials.get("account_url") or "")
        if url and not kwargs:  # prefect-azure's account URL alone: Azure's default credential
            kwargs = {"account_name": (urlsplit(url).hostname or "").split(".")[0],
                      "anon": False}
        remember(*(kwargs.get(k, "") for k in ("account_key", "sas_token", "client_secret")),
                 *_connection_string_secrets(kwargs.get("connection_string", "")))
        if credentials:
            self.where = f"the fields of the credentials block ({_named(credentials)})"
        elif not (os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
                  or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")):
            raise InputError(f"{self.shown}: no Azure storage account: set "
                             "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME with "
                             "a key or SAS token), or name a --credentials-block")
        return adlfs.AzureBlobFileSystem(skip_instance_cache=True, use_listings_cache=False,
                                         **kwargs)

    def _missing(self, e: BaseException) -> bool:
        return isinstance(e, FileNotFoundError) or type(e).__name__ == "ResourceNotFoundError"

    def _refused(self, e: BaseException) -> bool:
        return (isinstance(e, PermissionError) or type(e).__name__ in (
            "ClientAuthenticationError", "CredentialUnavailableError")
                or getattr(e, "status_code", None) in (401, 403))

    async def _objects(self) -> AsyncIterator[tuple[str, str, int]]:
        container = self.fs.service_client.get_container_client(self.bucket)
        blobs = container.list_blobs(name_starts_with=self.prefix or None,
                                     results_per_page=self.page)
        async for blob in blobs:
            yield str(blob.name), f"etag:{str(blob.etag or '').strip(chr(34))}", int(blob.size or 0)


def _endpoint(credentials: Mapping[str, Any]) -> str | None:
    """prefect-aws keeps an endpoint among its client parameters."""
    params = credentials.get("aws_client_parameters")
    value = params.get("endpoint_url") if isinstance(params, Mapping) else None
    return str(value) if value else None


def _named(credentials: Mapping[str, Any]) -> str:
    return str(credentials.get("_block", "")) or "--credentials-block"


def _json(text: str, where: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        raise InputError(f"{where}: the credentials block holds no JSON service account key "
                         "(store the key file's JSON as it is)") from None


def _connection_string_secrets(text: str) -> list[str]:
    """An Azure connection string and the key or signature inside it."""
    if not text:
        return []
    parts = dict(p.split("=", 1) for p in text.split(";") if "=" in p)
    return [text, *(parts.get(k, "") for k in ("AccountKey", "SharedAccessSignature"))]
