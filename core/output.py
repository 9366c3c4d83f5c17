"""Writing a command's results where the user asked (`--json OUT`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(data: Any, out: str | None) -> Path | None:
    """`data` as indented JSON at `out` (its folder made), when `out` is given; the path."""
    if not out:
        return None
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
