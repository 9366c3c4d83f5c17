"""Opening zip-based documents (DOCX, PPTX, XLSX, EPUB) without trusting them.

A zip says in its central directory how large each member inflates to; a zip bomb is a small file
whose members inflate to gigabytes. `check_zip` refuses such a file from the directory alone,
before a byte is inflated. The declared sizes are a real bound: `zipfile` stops inflating a member
at its declared `file_size` (and then fails its CRC check), so a member that lies about its size
cannot give more than it declared. `read_member` bounds a read once more, for readers that read
members themselves.

`open_zip` also tells apart the files that are not zips at all: a text file named `.docx` is
"not a DOCX"; an OLE compound file (magic D0 CF 11 E0) under an Office name is, almost always, a
password-protected Office document (Office encrypts by wrapping the zip in an OLE container), or
else a legacy .doc/.xls/.ppt renamed.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from situate.tasks.corpus.readers.base import Unreadable

ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"  # an archive with no members: a zip, but no document
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

MAX_MEMBERS = 100_000
MAX_RATIO = 100  # deflate reaches ~1000:1 on zeros; real XML and media stay far below 100:1
RATIO_FLOOR = 1 << 20  # a small member may compress well (an empty sheet's XML); only big ones count

LIMIT_NAME = "SITUATE_MAX_DOCUMENT_BYTES"
# Formats Office encrypts into an OLE container; an OLE file named .epub is just not an EPUB.
OFFICE_LABELS = frozenset({"DOCX", "PPTX", "XLSX"})

# Stream names in an OLE container: Office's encryption wraps the package in these two.
_ENCRYPTED_STREAMS = {"EncryptedPackage", "EncryptionInfo"}
_LEGACY_STREAMS = {"WordDocument": "legacy Word .doc", "Workbook": "legacy Excel .xls",
                   "Book": "legacy Excel .xls", "PowerPoint Document": "legacy PowerPoint .ppt"}


def _article(label: str) -> str:
    """ "a DOCX", "an XLSX", "an EPUB": the letters spelled out that start with a vowel sound."""
    return "an" if label[:1].upper() in "AEFHILMNORSX" else "a"


def _bomb(path: object, size: int, max_bytes: int, why: str = "") -> Unreadable:
    return Unreadable("zip bomb", f"{path} would inflate to {size} bytes{why}, over the limit of {max_bytes} "
                                  f"({LIMIT_NAME})")


def check_zip(zf: zipfile.ZipFile, path: object, max_bytes: int) -> None:
    """Refuse a zip whose directory says it inflates past `max_bytes` in all, that holds one big
    member compressed more than 100:1, or that has more than 100,000 members. Reads the central
    directory only (already parsed by `ZipFile`); inflates nothing."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise Unreadable("zip bomb", f"{path} has {len(infos)} members, over the limit of {MAX_MEMBERS}")
    total = sum(info.file_size for info in infos)
    if total > max_bytes:
        raise _bomb(path, total, max_bytes)
    for info in infos:
        if info.file_size > RATIO_FLOOR:
            ratio = info.file_size / info.compress_size if info.compress_size else float("inf")
            if ratio > MAX_RATIO:
                raise Unreadable("zip bomb", f"{path}: member {info.filename} would inflate to "
                                             f"{info.file_size} bytes from {info.compress_size}, "
                                             f"over {MAX_RATIO}:1")


def _ole_streams(head: bytes, f: BinaryIO) -> set[str]:
    """The stream names in an OLE compound file's directory (best effort, bounded: at most 64
    directory sectors). Parses the header, the FAT sectors it lists and the directory chain; an
    empty set when the structure does not hold together."""
    try:
        shift = struct.unpack_from("<H", head, 0x1E)[0]
        if shift not in (9, 12):
            return set()
        sector = 1 << shift
        first_dir = struct.unpack_from("<I", head, 0x30)[0]
        fat_sectors = [s for s in struct.unpack_from("<109I", head, 0x4C) if s < 0xFFFFFFFA]

        def read_sector(n: int) -> bytes:
            f.seek((n + 1) * sector)
            return f.read(sector)

        fat: list[int] = []
        for s in fat_sectors[:64]:
            data = read_sector(s)
            fat.extend(struct.unpack(f"<{len(data) // 4}I", data[: len(data) // 4 * 4]))
        names: set[str] = set()
        n, seen = first_dir, 0
        while n < 0xFFFFFFFA and seen < 64:
            data = read_sector(n)
            for off in range(0, len(data) - 127, 128):
                length = struct.unpack_from("<H", data, off + 64)[0]
                if 2 <= length <= 64:
                    names.add(data[off: off + length - 2].decode("utf-16-le", "replace"))
            seen += 1
            n = fat[n] if n < len(fat) else 0xFFFFFFFE
        return names
    except (struct.error, OSError, ValueError):
        return set()


def sniff(path: Path, fmt_label: str) -> None:
    """Raise the right `Unreadable` when `path` is not a zip: "encrypted DOCX" for an OLE container
    holding an encrypted package (or one we cannot tell apart from it), "not a DOCX" for a legacy
    Office file under a new name or for anything else. Returns when the file starts like a zip."""
    with open(path, "rb") as f:
        head = f.read(512)
        if head[:4] in (ZIP_MAGIC, EMPTY_ZIP_MAGIC):
            return
        a = _article(fmt_label)
        if head[:8] == OLE_MAGIC and fmt_label in OFFICE_LABELS:
            streams = _ole_streams(head, f)
            legacy = [what for name, what in _LEGACY_STREAMS.items() if name in streams]
            if legacy and not streams & _ENCRYPTED_STREAMS:
                raise Unreadable(f"not {a} {fmt_label}",
                                 f"the file is a {legacy[0]} under a .{fmt_label.lower()} name: open it and "
                                 f"save it as .{fmt_label.lower()}")
            detail = "password-protected; remove the password and save again"
            if not streams & _ENCRYPTED_STREAMS:
                detail += (" (an OLE container, not a zip: if it has no password, it is a legacy Office "
                           f"file renamed; save it as .{fmt_label.lower()})")
            raise Unreadable(f"encrypted {fmt_label}", detail)
    raise Unreadable(f"not {a} {fmt_label}", f"the file's content is not {a} {fmt_label} (a zip package)")


def open_zip(path: Path, fmt_label: str, max_bytes: int) -> zipfile.ZipFile:
    """Open `path` as a zip package of format `fmt_label` ("DOCX", "EPUB", ...) and check it is
    not a bomb. Every failure is an `Unreadable`: not a zip, encrypted, corrupt or truncated (no
    central directory), a bomb. The caller closes the returned `ZipFile`."""
    path = Path(path)
    sniff(path, fmt_label)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
        raise Unreadable(f"corrupt {fmt_label}",
                         f"{path}: {e} (truncated or damaged; save it again)") from None
    try:
        check_zip(zf, path, max_bytes)
    except BaseException:
        zf.close()
        raise
    return zf


def read_member(zf: zipfile.ZipFile, name: str, max_bytes: int, *, fmt_label: str = "package") -> bytes:
    """Member `name` inflated, refusing it past `max_bytes` whatever its declared size. Raises
    `Unreadable` ("zip bomb" past the limit, "corrupt <fmt_label>" for a missing, damaged or
    encrypted member)."""
    try:
        with zf.open(name) as member:
            data = member.read(max_bytes + 1)
    except KeyError:
        raise Unreadable(f"corrupt {fmt_label}", f"{zf.filename}: no member {name}") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError,
            zlib.error) as e:
        raise Unreadable(f"corrupt {fmt_label}", f"{zf.filename}: member {name}: {e}") from None
    if len(data) > max_bytes:
        raise _bomb(f"{zf.filename} (member {name})", len(data), max_bytes, " or more")
    return data
