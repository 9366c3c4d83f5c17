"""`--credentials-block`: a source's credentials read from a Prefect block where the run runs, so
that a run's (or a deployment's) parameters hold the block's name and never a secret.

Against moto's S3 server with its authentication on: the environment's AWS keys are wrong, so a
sync that lists the bucket got the block's key. The key then appears in no output, summary, log,
artifact, flow or task run parameter, cache file or (soak: the CLI) Prefect database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from situate.core.errors import InputError
from tests.test_sources_s3 import moto_server, page, put, s3

pytest.importorskip("s3fs")
pytest.importorskip("moto")
__all__ = ["moto_server", "s3"]  # fixtures shared with test_sources_s3

SITUATE = Path(sys.executable).with_name("situate")
POLICY = json.dumps({"Version": "2012-10-17",
                     "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


@pytest.fixture
def reader(s3, moto_server, monkeypatch):
    """A bucket of 3 pages readable only with the key of IAM user `reader` (moto checks every
    request's key), and wrong AWS keys in the environment. Yields (key id, secret)."""
    import botocore.session
    from moto import settings

    iam = botocore.session.get_session().create_client(
        "iam", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=POLICY)
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    s3.create_bucket(Bucket="docs")
    for n in range(3):
        put(s3, f"reports/r{n}.md", page(n))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong/secret/wrong/secret/wrong/secret00")
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
        iam.delete_user_policy(UserName="reader", PolicyName="all")
        iam.delete_access_key(UserName="reader", AccessKeyId=key["AccessKeyId"])
        iam.delete_user(UserName="reader")


def _aws_credentials_block():
    """prefect-aws's `AwsCredentials` as Prefect stores it (its type slug and field names),
    without installing prefect-aws: situate reads a block as a document, not through its class."""
    from prefect.blocks.core import Block
    from pydantic import SecretStr

    class AwsCredentials(Block):
        _block_type_name = "AWS Credentials"
        _block_type_slug = "aws-credentials"
        aws_access_key_id: str | None = None
        aws_secret_access_key: SecretStr | None = None
        region_name: str | None = None

    return AwsCredentials


def _save(kind: str, key_id: str, secret: str) -> str:
    """The key saved in a block of `kind`; returns the name `--credentials-block` takes."""
    if kind == "aws-credentials":
        _aws_credentials_block()(aws_access_key_id=key_id, aws_secret_access_key=secret,
                                 region_name="us-east-1").save("reader", overwrite=True)
        return "aws-credentials/reader"
    from prefect.blocks.system import Secret

    Secret(value=json.dumps({"aws_access_key_id": key_id, "aws_secret_access_key": secret})).save(
        "s3-reader", overwrite=True)
    return "s3-reader"


def _recorded(flow_run_id) -> str:
    """Everything Prefect recorded of a flow run, as text: its parameters, its task runs'
    parameters and inputs, its logs and artifacts (what the UI shows)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(
            any_=[flow_run_id])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
            any_=[flow_run_id])))
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    parts = [run.model_dump_json(), *(t.model_dump_json() for t in tasks),
             *(log.message for log in logs), *(a.model_dump_json() for a in artifacts)]
    return "\n".join(parts)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["aws-credentials", "secret"])
def test_a_block_s_key_reaches_the_source_and_nothing_else(prefect_harness, state, reader, kind,
                                                           tmp_path, capsys, caplog):
    """The ingest flow, given only the block's name, lists and fetches the bucket with the
    block's key (the environment's is wrong); the key is in no summary, log, record or file."""
    from prefect.context import get_run_context  # noqa: F401 - Prefect imported before flows

    from situate.flows.ingest import ingest_flow
    from situate.pipeline.options import IngestOptions

    key_id, secret = reader
    name = _save(kind, key_id, secret)
    options = IngestOptions.build(corpus="s3://docs/reports/", collection="blocked",
                                  context="structural", embedder="hash", credentials_block=name,
                                  json_out=str(tmp_path / "summary.json"))
    state_ = ingest_flow(options, return_state=True)
    summary = state_.result()
    assert (summary.new, summary.source["fetched"]) == (3, 3)
    said = capsys.readouterr()
    texts = [said.out, said.err, caplog.text, (tmp_path / "summary.json").read_text(),
             _recorded(state_.state_details.flow_run_id)]
    assert name in texts[-1]  # the run's parameters name the block
    files = [p for p in Path(state["cache_dir"]).rglob("*") if p.is_file()]
    assert any(p.name == "state.sqlite" for p in files)
    for secret_part in (secret, key_id):
        for text in texts:
            assert secret_part not in text
        for path in files:
            assert secret_part.encode() not in path.read_bytes(), path


def test_a_block_that_does_not_exist_is_one_line(prefect_harness):
    from situate.core.secrets import block_credentials
    from situate.flows import read_block  # noqa: F401 - registers the block loader

    with pytest.raises(InputError) as e:
        block_credentials("aws-credentials/absent")
    said = str(e.value)
    assert said.startswith("--credentials-block aws-credentials/absent: no aws-credentials "
                           "block named 'absent' in ")
    assert said.endswith("create it (`prefect block create aws-credentials`, or the block "
                         "class's .save) or check the name (`prefect block ls`)")


BAD_NAME = ("--credentials-block 'Prod Keys': not a Prefect block name: give TYPE/NAME as "
            "`prefect block ls` shows it (aws-credentials/prod), or the NAME of a Secret block; "
            "lowercase letters, digits and dashes")


def test_the_name_is_checked_alike_on_every_face(tmp_path):
    """The CLI flag, the Python API's options and `situate serve`'s: one check, one line; a
    deployment's parameters hold the name, and `serve` refuses a token in the corpus URL."""
    from situate.flows.deploy import build_deployments
    from situate.pipeline.options import IngestOptions, ServeOptions

    for model in (IngestOptions, ServeOptions):
        with pytest.raises(InputError) as e:
            model.build(corpus="s3://docs/reports/", collection="c", credentials_block="Prod Keys")
        assert str(e.value) == BAD_NAME
    out = subprocess.run([str(SITUATE), "ingest", "s3://docs/reports/", "--collection", "c",
                          "--credentials-block", "Prod Keys"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode != 0 and out.stderr.strip().splitlines()[-1].endswith(BAD_NAME)
    assert "Traceback" not in out.stderr

    with pytest.raises(InputError) as e:
        ServeOptions.build(corpus="git+https://user:ghp_TOKEN0123456789@git.example.com/org/r.git",
                           collection="c")
    said = str(e.value)
    assert "ghp_TOKEN0123456789" not in said and said.endswith(
        "give the URL without user:token@ and the token in a Prefect Secret block named by "
        "--credentials-block, read where the runs run")
    serve = ServeOptions.build(corpus="s3://docs/reports/", collection="c",
                               milvus_uri=str(tmp_path / "m.db"),
                               credentials_block="aws-credentials/prod")
    [deployment] = build_deployments(serve)
    assert deployment.parameters["options"]["credentials_block"] == "aws-credentials/prod"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.soak
def test_the_cli_with_a_block_leaves_the_key_nowhere(reader, tmp_path):
    """`situate ingest s3://... --credentials-block NAME` in a process of its own, the block in
    its PREFECT_HOME's database (read through its temporary server), first priced (--dry-run:
    the listing, made with the block's key), then run: the key is in none of the commands'
    output, its JSON summary, the cache directory or the Prefect database's bytes (the block's
    own fields are stored encrypted there)."""
    key_id, secret = reader
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "SITUATE_", "ANTHROPIC_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect")})
    saved = subprocess.run(
        [sys.executable, "-c", "import json, sys; from prefect.blocks.system import Secret; "
         "Secret(value=json.dumps({'aws_access_key_id': sys.argv[1], 'aws_secret_access_key': "
         "sys.argv[2]})).save('s3-reader')", key_id, secret],
        env=env, capture_output=True, text=True, timeout=300)
    assert saved.returncode == 0, saved.stderr[-2000:]
    args = ["--collection", "blk", "--milvus-uri", str(tmp_path / "m.db"), "--context",
            "structural", "--cache-dir", str(tmp_path / "cache"), "--credentials-block", "s3-reader"]
    priced = subprocess.run([str(SITUATE), "ingest", "s3://docs/reports/", *args, "--dry-run"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert priced.returncode == 0, priced.stderr[-3000:]
    assert "the sync would fetch 3 document(s)" in priced.stdout + priced.stderr
    out = subprocess.run([str(SITUATE), "ingest", "s3://docs/reports/", *args, "--json",
                          str(tmp_path / "s.json")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / "s.json").read_text())["new"] == 3
    seen = [p for p in (tmp_path / "prefect").rglob("*") if p.is_file()]
    seen += [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert any(p.name.startswith("prefect.db") for p in seen)
    for part in (secret, key_id):
        for text in (priced.stdout, priced.stderr, out.stdout, out.stderr,
                     (tmp_path / "s.json").read_text()):
            assert part not in text
        for path in seen:
            assert part.encode() not in path.read_bytes(), path


def test_a_git_source_takes_its_token_from_a_block(tmp_path):
    """A Secret block's value is the password of an HTTPS git URL (x-access-token, GitHub's user
    name for a token), masked in what the source shows; a git+file:// source takes none."""
    from situate.core.secrets import redact
    from situate.tasks.sources.base import open_source

    token = "ghp_0123456789abcdefTOKEN"
    source = open_source("git+https://git.example.com/org/handbook.git@main", tmp_path,
                         {"secret": token, "_block": "handbook-token"})
    assert source.transport == f"https://x-access-token:{token}@git.example.com/org/handbook.git"
    assert token not in redact(source.transport) and token not in source.shown
    named = open_source("git+https://git.example.com/org/handbook.git", tmp_path,
                        {"token": "glpat-0123456789", "username": "oauth2"})
    assert named.transport == "https://oauth2:glpat-0123456789@git.example.com/org/handbook.git"
    with pytest.raises(InputError, match="a token over git\\+https://"):
        open_source(f"git+file://{tmp_path}/repo.git", tmp_path, {"secret": token})


def test_an_azure_block_s_fields_reach_adlfs(tmp_path, monkeypatch):
    """prefect-azure's block fields as adlfs takes them (no request made: adlfs connects lazily):
    a connection string, a Secret block's value, an account URL alone (Azure's default
    credential); the key is remembered, so every message masks it."""
    pytest.importorskip("adlfs")
    from situate.core.secrets import redact
    from situate.tasks.sources.objects import AzureSource

    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    key = "QmxvY2tLZXlCbG9ja0tleUJsb2NrS2V5QmxvY2tLZXk="
    connection = (f"DefaultEndpointsProtocol=https;AccountName=reports;AccountKey={key};"
                  "EndpointSuffix=core.windows.net")
    for fields in ({"connection_string": connection}, {"secret": connection}):
        source = AzureSource("az://docs/2026/", tmp_path, fields)
        assert source.fs.connection_string == connection
        assert key not in redact(f"refused with {key}")
    by_url = AzureSource("az://docs/2026/", tmp_path,
                         {"account_url": "https://reports.blob.core.windows.net"})
    assert (by_url.fs.account_name, by_url.fs.anon) == ("reports", False)
