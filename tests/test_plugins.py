"""Plugins: a package installed beside situate adds a reader and a store through entry points
alone (examples/plugins/situate-org), and situate ingests with that reader into that store and
searches it; `situate plugins` lists it; a plugin that fails to import is one line, and the rest
still works.

Each install goes into a virtual environment of this test's own, layered over the project's
(a `.pth` adds the project's site-packages), so installing and uninstalling touches nothing that
another test, worker or engineer uses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from situate.core.plugins import Entry, PluginError
from situate.core.registry import Registry
from tests.layered_env import Env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugins" / "situate-org"

ORG = """\
#+TITLE: Field notes
* Walruses
The walrus hauls out on sea ice to rest between dives for clams.
** Migration
Herds follow the retreating pack ice north every summer.
* Puffins
Puffins nest in burrows on grassy cliffs.
"""

BROKEN = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "situate-broken"
version = "0.0.1"

[project.entry-points."situate.readers"]
broken = "situate_broken:READERS"

[project.entry-points."situate.commands"]
broken = "situate_broken:cmd_broken"

[tool.setuptools]
py-modules = ["situate_broken"]
"""


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path / "venv")


INGEST_AND_SEARCH = """
import json, sys
from situate.cli.main import main
from situate.api import Retriever

corpus = sys.argv[1]
code = main(["ingest", corpus, "--milvus-uri", "orgmem://notes", "--collection", "notes",
             "--context", "structural"])
assert code == 0, code
with Retriever("notes", "orgmem://notes", mode="bm25") as r:
    hits = r.search("walrus clams sea ice", 3)
print(json.dumps([{"doc_id": h.doc_id, "text": h.text, "context": h.context,
                   "metadata": h.metadata, "store": r._store.__class__.__name__} for h in hits]))
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_an_installed_package_adds_a_reader_and_a_store(env: Env, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.org").write_text(ORG)
    (corpus / "other.md").write_text("# Cabbages\n\nThe cabbage is a leafy green.\n")
    before = env.situate("plugins", "--json", cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    assert "orgmem" not in before.stdout and "situate-org" not in before.stdout
    refused = env.situate("search", "walrus", "--collection", "notes", "--milvus-uri",
                          "orgmem://notes", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown scheme 'orgmem'" in refused.stderr

    env.install(EXAMPLE, tmp_path)
    try:
        listed = json.loads(env.situate("plugins", "--json", "--check", cwd=tmp_path).stdout)
        assert {"name": "org", "from": "situate-org 0.1.0", "value": "situate_org:READERS"} in \
            listed["situate.readers"]
        assert {"name": "orgmem", "from": "situate-org 0.1.0", "value": "situate_org:STORE"} in \
            listed["situate.stores"]
        assert {"name": "minilm", "from": "situate 0.1.0",
                "value": "situate.tasks.embedders.base:MINILM"} in listed["situate.embedders"]

        done = env.run("-c", INGEST_AND_SEARCH, str(corpus), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        hits = json.loads(done.stdout.strip().splitlines()[-1])
        top = hits[0]
        assert top["doc_id"] == "notes.org" and "walrus hauls out" in top["text"]
        assert top["store"] == "MemoryStore" and top["metadata"]["format"] == "org"
        # The reader's own place (its line) is stored and said, with its heading, in the context.
        assert top["metadata"]["line"] == 3 and top["metadata"]["place"] == "Line 3"
        assert "Line 3 > Walruses" in top["context"], top["context"]

        # The package's own tests run situate's store contract on its store (situate.testing).
        contract = env.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           str(tmp_path / EXAMPLE.name / "tests"), cwd=tmp_path)
        assert contract.returncode == 0, contract.stdout[-3000:]
        assert " passed" in contract.stdout and "failed" not in contract.stdout
    finally:
        env.pip("uninstall", "-y", "situate-org")
    after = env.situate("plugins", "--json", cwd=tmp_path)
    assert "situate-org" not in after.stdout


@pytest.mark.slow
def test_a_plugin_that_fails_to_import_is_one_line_and_the_rest_works(env: Env,
                                                                       tmp_path: Path) -> None:
    source = tmp_path / "situate-broken"
    source.mkdir()
    (source / "pyproject.toml").write_text(BROKEN)
    (source / "situate_broken.py").write_text("import no_such_module_anywhere\n")
    env.install(source, tmp_path / "copy")
    try:
        listed = env.situate("plugins", "--check", cwd=tmp_path)
        assert listed.returncode == 1
        # The parser's warning for the command it leaves out, then --check's line for each entry.
        lines = listed.stderr.splitlines()
        assert [line.split(" (")[0] for line in lines] == [
            "situate: warning: plugin situate-broken 0.0.1",
            "situate plugins: plugin situate-broken 0.0.1",
            "situate plugins: plugin situate-broken 0.0.1"], listed.stderr
        assert "(situate.readers: broken = situate_broken:READERS) failed to load: " \
            "ModuleNotFoundError: No module named 'no_such_module_anywhere'" in listed.stderr
        assert "Traceback" not in listed.stderr

        # Every command but the broken one, with one warning line; the readers likewise.
        helped = env.situate("--help", cwd=tmp_path)
        assert helped.returncode == 0 and "ingest" in helped.stdout and "broken" not in helped.stdout
        assert helped.stderr.strip().splitlines() == [
            "situate: warning: plugin situate-broken 0.0.1 (situate.commands: broken = "
            "situate_broken:cmd_broken) failed to load: ModuleNotFoundError: No module named "
            "'no_such_module_anywhere'"]
        code = ("from situate.tasks.corpus.readers import readers; "
                "print(sorted(r.format for r in readers().values()))")
        read = env.run("-c", code, cwd=tmp_path)
        assert read.returncode == 0 and "'pdf'" in read.stdout and "'md'" in read.stdout
        assert [line for line in read.stderr.splitlines() if "situate-broken" in line] == [
            "plugin situate-broken 0.0.1 (situate.readers: broken = situate_broken:READERS) "
            "failed to load: ModuleNotFoundError: No module named 'no_such_module_anywhere'"]
    finally:
        env.pip("uninstall", "-y", "situate-broken")


def test_an_entry_point_is_imported_when_it_is_first_asked_for(monkeypatch) -> None:
    """A registry reads its group's entries without importing them; one that fails is a
    PluginError of one line, and one registered in code keeps its name."""
    entries = (Entry("situate.test", "ok", "json:dumps", "situate-x", "1.0"),
               Entry("situate.test", "bad", "no_such_module_anywhere:thing", "situate-y", "2.0"),
               Entry("situate.test", "mine", "json:loads", "situate-z", "3.0"))
    monkeypatch.setattr("situate.core.registry.entries", lambda group: entries)
    registry: Registry[object] = Registry("test part", group="situate.test")
    registry.register("mine", "os.path:join")
    assert registry.names() == ["bad", "mine", "ok"]
    assert "no_such_module_anywhere" not in sys.modules
    assert registry.get("ok") is json.dumps and registry.get("mine") is os.path.join
    with pytest.raises(PluginError) as failed:
        registry.get("bad")
    assert str(failed.value) == (
        "plugin situate-y 2.0 (situate.test: bad = no_such_module_anywhere:thing) failed to "
        "load: ModuleNotFoundError: No module named 'no_such_module_anywhere'")
    problems: list[str] = []
    assert set(registry.loaded(problems)) == {"ok", "mine"} and problems == [str(failed.value)]


def test_situates_own_parts_are_its_entry_points() -> None:
    """Every reader module, embedder, provider, reranker, store and command of situate is
    registered in its group (pyproject.toml), and each loads."""
    from situate.cli.commands import COMMANDS
    from situate.core.plugins import OWN, entries

    readers = {e.value for e in entries("situate.readers") if e.dist == OWN}
    declared = {f"situate.tasks.corpus.readers.{p.stem if p.name != '__init__.py' else p.parent.name}"
                ":READERS" for p in (ROOT / "tasks" / "corpus" / "readers").rglob("*.py")
                if "\nREADERS = " in p.read_text()}
    assert readers == declared
    for group in ("situate.embedders", "situate.contexts", "situate.rerankers", "situate.stores"):
        assert entries(group) and all(e.dist == OWN for e in entries(group)), group
    assert set(COMMANDS) >= {"ingest", "evaluate", "search", "api", "mcp", "version", "plugins"}
    from situate.tasks.sources.base import SOURCES  # another package's sources, by URL scheme

    assert SOURCES.group == "situate.sources"


def test_a_reader_declares_its_own_place_fields() -> None:
    """`Place` is open: a reader's own fields are stored after the others, and its words for
    them open what the context says of the place; a field cannot take a name Place has."""
    from situate.tasks.corpus.readers.base import Place, place_text

    place = Place(page=2, heading_path=("Intro",), own=(("line", 40), ("column", 3)), said="Line 40")
    assert list(place.as_dict().items()) == [("page", 2), ("heading_path", ["Intro"]), ("line", 40),
                                             ("column", 3), ("place", "Line 40")]
    assert place_text(place.as_dict()) == "Page 2 > Line 40 > Intro."
    assert place_text(Place(own=(("line", 7),)).as_dict()) == ""  # unsaid: stored only
    for taken in ("page", "place"):
        with pytest.raises(ValueError, match=f"cannot be named '{taken}'"):
            Place(own=((taken, 1),))


def test_an_install_without_situates_entry_points_is_one_line(monkeypatch, capsys) -> None:
    """Metadata older than the entry points (an editable install not redone) registers nothing
    of situate's: said in one line, exit 2, not a CLI without commands."""
    from situate.cli.commands import COMMANDS
    from situate.cli.main import main

    monkeypatch.setattr("situate.core.plugins._all", lambda: {"situate.commands": ()})
    monkeypatch.setattr(COMMANDS, "_read", False)
    monkeypatch.setattr(COMMANDS, "_entries", {})
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "situate: error: situate's own readers, stores and commands are not registered: its "
        "installed metadata predates its entry points; reinstall it (`pip install -e .`, or "
        "`make setup`)"]
