"""Are a format's chunks the same under two versions of the code? Dumps every chunk of the given
corpora (its text, offset and place, and each document's text hash and metadata) as ingest cuts
them (`load_corpus`, default size and overlap), or compares two dumps for the documents of one
suffix.

Used to show that a reader or cutting change leaves Markdown's chunks byte-identical: dump under
the old code (an archive of it first on PYTHONPATH; the reader process inherits it), dump under
the new, compare.

    git archive BASE | tar -x -C /tmp/base/situate
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/same_chunks.py dump before.json CORPUS...
    .venv/bin/python benchmarks/same_chunks.py dump after.json CORPUS...
    .venv/bin/python benchmarks/same_chunks.py compare before.json after.json [--suffix .md]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path


def dump(out: Path, corpora: list[str]) -> None:
    from situate.tasks.corpus.load import load_corpus

    chunks: dict[str, object] = {}
    for path in corpora:
        for d in load_corpus(path).documents:
            for c in d.chunks:
                chunks[f"{path}::{d.id}::{c.index}"] = [c.start, c.text, c.where]
            chunks[f"{path}::{d.id}::text"] = hashlib.sha256(d.text.encode()).hexdigest()
            chunks[f"{path}::{d.id}::metadata"] = d.metadata
    out.write_text(json.dumps(chunks, sort_keys=True, default=str))
    print(f"{len(chunks)} entries of {len(corpora)} corpora in {out}")


def compare(a: Path, b: Path, suffixes: tuple[str, ...]) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())

    def ours(key: str) -> bool:
        return key.split("::")[1].lower().endswith(suffixes)

    keys = {k for k in before if ours(k)} | {k for k in after if ours(k)}
    differ = sorted(k for k in keys if before.get(k) != after.get(k))
    documents = {k.rsplit("::", 1)[0] for k in keys}
    print(f"{len(documents)} documents ({', '.join(suffixes)}), {len(keys)} entries: "
          + ("identical" if not differ else f"{len(differ)} differ, e.g. {differ[:5]}"))
    return 1 if differ else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("corpora", nargs="+")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--suffix", nargs="+", default=[".md", ".markdown"])
    args = ap.parse_args()
    if args.command == "dump":
        dump(args.out, args.corpora)
    else:
        sys.exit(compare(args.before, args.after, tuple(args.suffix)))


if __name__ == "__main__":
    main()
