"""The readers' registry: every reader module is found, each suffix has one reader, a place is
stored as it always was, and finding the readers loads none of their libraries."""

from __future__ import annotations

import subprocess
import sys

from situate.tasks.corpus.filetypes import FILE_TYPES, PROSE_SUFFIXES, TEXT_SUFFIXES
from situate.tasks.corpus.readers import document_suffixes, format_label, readers
from situate.tasks.corpus.readers.base import Place, place_text


def test_every_reader_is_found_with_its_label() -> None:
    labels = {suffix: (r.format, r.label) for suffix, r in readers().items()}
    assert {".md", ".markdown", ".pdf", ".html", ".htm", ".xhtml", ".docx", ".pptx", ".xlsx", ".xlsm",
            ".epub", ".ipynb"} <= document_suffixes()
    assert labels[".pdf"] == ("pdf", "PDF") and labels[".xlsm"] == ("xlsx", "spreadsheet")
    assert format_label("docx") == "Word document" and format_label("nothing") == ""
    assert all(suffix == suffix.lower() and suffix.startswith(".") for suffix in readers())


def test_finding_the_readers_loads_no_library() -> None:
    code = ("import sys; from situate.tasks.corpus.readers import readers; readers(); "
            "print(sorted(m for m in ('pypdfium2', 'docx', 'pptx', 'openpyxl', 'lxml') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_place_is_stored_in_its_keys_order_without_what_does_not_apply() -> None:
    assert Place().as_dict() == {}
    assert list(Place(chapter=2, chapter_title="", heading_path=("A", "B")).as_dict().items()) == [
        ("chapter", 2), ("chapter_title", ""), ("heading_path", ["A", "B"])]
    assert list(Place(slide=4, slide_title="Plan", notes=True).as_dict()) == ["slide", "slide_title",
                                                                              "notes"]
    assert Place(sheet="Q1", rows=(1, 9)).as_dict() == {"sheet": "Q1", "rows": [1, 9]}
    assert list(Place(cell=3, cell_type="code", heading_path=("Setup",)).as_dict()) == [
        "cell", "cell_type", "heading_path"]


def test_a_place_is_described_from_its_stored_form() -> None:
    assert place_text({"page": 3, "page_end": 4, "heading_path": ["Money", "Refunds"]}) == (
        "Pages 3-4 > Money > Refunds.")
    assert place_text(Place(cell=2, cell_type="code").as_dict()) == "Cell 2 (code)."
    assert place_text({"symbols": ["f"]}) == ""


def test_the_table_of_file_types_gives_the_sets_the_loader_uses() -> None:
    assert {".md", ".rst", ".txt"} <= PROSE_SUFFIXES <= TEXT_SUFFIXES
    assert ".py" in TEXT_SUFFIXES and FILE_TYPES[".py"].grammar == "python"
    assert ".pyw" not in TEXT_SUFFIXES  # a grammar knows it; a directory walk does not read it
