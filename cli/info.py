"""What is installed: `situate version` (for a bug report) and `situate plugins`."""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import Field

from situate.cli.commands import command
from situate.core.version import version
from situate.pipeline.options import Flag, Options


class VersionOptions(Options):
    """`situate version`."""

    json_out: Annotated[bool, Flag(("--json",))] = Field(False, description="print them as JSON")


# What a bug report needs beside situate's own version: the engines situate runs on.
ENGINES = ("prefect", "pymilvus", "milvus-lite", "onnxruntime", "torch", "sentence-transformers",
           "anthropic", "cohere")


@command("print the versions of situate, Python and the engines it runs on (for a bug report)",
         """\
  situate version
  situate version --json""")
def cmd_version(options: VersionOptions) -> int:
    import json
    import platform
    from importlib import metadata

    found = {"situate": version(), "python": platform.python_version()}
    for name in ENGINES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    print(json.dumps(found, indent=2) if options.json_out else
          "\n".join(f"{name:<22} {v}" for name, v in found.items()))
    return 0


class PluginsOptions(Options):
    """`situate plugins`."""

    check: Annotated[bool, Flag(("--check",))] = Field(
        False, description="import every entry too, and say in one line each why one fails")
    json_out: Annotated[bool, Flag(("--json",))] = Field(False, description="print them as JSON")


@command("list the readers, embedders, context providers, rerankers, stores, sources and commands "
         "installed, and the package each comes from",
         """\
  situate plugins
  situate plugins --check --json""")
def cmd_plugins(options: PluginsOptions) -> int:
    import json

    from situate.core.plugins import GROUPS, PluginError, groups

    found: dict[str, list[dict[str, str]]] = {}
    for group, entries in groups().items():
        found[group] = []
        for entry in entries:
            row = {"name": entry.name, "from": entry.origin, "value": entry.value}
            if options.check:
                try:
                    entry.load()
                except PluginError as e:
                    row["error"] = str(e)
            found[group].append(row)
    if options.json_out:
        print(json.dumps(found, indent=2))
    else:
        lines = []
        for group, rows in found.items():
            lines.append(f"{group}: {GROUPS.get(group, 'entries of another package')}")
            lines += [f"  {r['name']:<12} {r['from']:<20} {r['value']}" for r in rows] or ["  (none)"]
        print("\n".join(lines))
    failed = [row["error"] for rows in found.values() for row in rows if "error" in row]
    for line in failed:
        print(f"situate plugins: {line}", file=sys.stderr)
    return 1 if failed else 0
