#!/bin/sh
# Regenerates the coverage fixtures from source.md (tests/test_coverage.py reads them):
# the same Markdown as HTML (pandoc -s, with and without --section-divs), EPUB 3 and DOCX (pandoc),
# PDF (headless Chromium printing pandoc's HTML, its running header and footer included), and
# source.txt, the text as `pandoc -t plain` shows it: its sentences are what every format must keep
# (situate.tasks.corpus.coverage.plain_sentences).
# Needs Debian's pandoc and chromium: apt-get install -y pandoc chromium
set -eu
cd "$(dirname "$0")"
export SOURCE_DATE_EPOCH=1764000000  # pandoc writes this date into the EPUB and DOCX: stable files
pandoc -f gfm -s --metadata pagetitle="Ledgerline user guide" source.md -o guide.html
pandoc -f gfm -s --section-divs --metadata pagetitle="Ledgerline user guide" source.md -o guide-sections.html
pandoc -f gfm -t epub3 --metadata title="Ledgerline user guide" source.md -o guide.epub
pandoc -f gfm source.md -o guide.docx
tmp=$(mktemp -d)
cp guide.html "$tmp/guide.html"
chromium --headless --no-sandbox --disable-gpu --print-to-pdf="$PWD/guide.pdf" "file://$tmp/guide.html" 2>/dev/null
rm -rf "$tmp"
pandoc -f gfm -t plain --wrap=none source.md > source.txt
