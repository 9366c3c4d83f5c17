"""The configuration table of the docs (docs/reference/configuration.md), made from the options
models: every option of every command (its flag, its variable, its default), then the settings no
flag sets. Print it with `python -m situate.cli.configuration`; `make docs-generate` writes it
into the page, and a test keeps the page's copy equal to it."""

from __future__ import annotations

from typing import Any

from situate.core.fields import shown_default
from situate.core.settings import Settings
from situate.pipeline.options import Options, fields


def models() -> dict[str, type[Options]]:
    """Each of situate's own commands' options model, as the CLI declares them."""
    from situate.cli.commands import commands

    return {name: cmd.options() for name, cmd in commands(own=True).items()}


def options_table() -> str:
    """The configuration table of the docs: every option of every command (its flag, its variable,
    its default), then the settings no flag sets."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for command, model in models().items():
        for name, field, flag, setting in fields(model):
            if flag is None:  # set by the code that runs the command, not by its user
                continue
            label = flag.names[0] if flag.names else name.upper()
            row = rows.setdefault((label, field.description or ""), {
                                          "what": field.description or "", "flag": label,
                                          "env": setting.env if setting else "",
                                          "default": shown_default(field, flag, setting),
                                          "commands": []})
            row["commands"].append(command)
    lines = ["| option | flag | environment | default | commands |", "|---|---|---|---|---|"]
    for row in rows.values():
        shown = f"`{row['flag']}`" if row["flag"].startswith("--") else f"{row['flag']} (argument)"
        env = f"`{row['env']}`" if row["env"] else ""
        lines.append(f"| {row['what']} | {shown} | {env} | {row['default']} | "
                     f"{', '.join(row['commands'])} |")
    lines.append("| token for a Milvus server or Zilliz Cloud (a secret: never a flow parameter, "
                 "never shown) | `--milvus-token` | `SITUATE_MILVUS_TOKEN` | none | all |")
    flagged = {s.name for m in models().values() for *_, s in fields(m) if s is not None}
    for name, field in Settings.model_fields.items():
        if name == "api_token":  # a secret only the servers read
            lines.append(f"| {field.description} (a secret: never shown) | | `SITUATE_API_TOKEN` "
                         "| none | api, mcp |")
        elif name not in flagged and name != "milvus_token":
            lines.append(f"| {field.description} | | `SITUATE_{name.upper()}` | {field.default} | "
                         f"all |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(options_table())
