"""The benchmarks page (docs/benchmarks/README.md) is what its evidence gives, every file there is read by
a row, the docs link to rows that exist, and the README and the docs pages carry no commit hashes."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from service.benchmarks import page

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "docs" / "benchmarks"
LINK = re.compile(r"benchmarks/README\.md#([A-Za-z0-9_-]+)")
# a commit hash: a word of 7 to 40 hex digits with at least one digit and one letter (not 'decade', not 1234567)
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def anchors() -> set[str]:
    return {row.anchor for section in page.SECTIONS for row in section.rows} | {
        page.slug(section.title) for section in page.SECTIONS}


def markdown(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(REPO).parts)]


def test_the_committed_page_is_what_the_evidence_gives():
    assert page.differences() == [], "run python -m service.benchmarks.page"
    assert page.main(["--check"]) == 0


@pytest.fixture
def evidence(tmp_path) -> Path:
    copy = tmp_path / "benchmarks"
    shutil.copytree(BENCH, copy)
    return copy


def test_a_figure_changed_in_its_json_fails_the_check_and_names_the_line(evidence, capsys):
    demo = json.loads((evidence / "demo.json").read_text())
    demo["xeon"]["runs"][0]["wall_s"] = 99.9
    (evidence / "demo.json").write_text(json.dumps(demo))
    found = page.differences(evidence)
    assert any(line.startswith("+") and "99.9 s" in line and "demo-cpu" in line for line in found)
    assert any(line.startswith("-") and "demo-cpu" in line for line in found)
    assert page.main(["--check", "--dir", str(evidence)]) == 1
    assert "99.9" in capsys.readouterr().err
    assert page.main(["--dir", str(evidence)]) == 0  # rewritten, the check passes again
    assert page.differences(evidence) == []


def test_a_missing_evidence_file_is_named(evidence, capsys):
    (evidence / "wide_gemm.json").unlink()
    assert page.main(["--check", "--dir", str(evidence)]) == 1
    assert "wide_gemm.json is missing" in capsys.readouterr().err


def test_a_row_may_not_declare_what_its_json_holds():
    row = page.Row("x", "x", "x.json", str, commit="abc1234")
    with pytest.raises(page.EvidenceError, match="keep one"):
        page.meta(row, {"commit": "def5678"}, "commit")
    assert page.meta(row, {}, "commit") == "abc1234"
    with pytest.raises(page.EvidenceError, match="no date"):
        page.meta(row, {}, "date")


def test_the_start_section_says_not_measured_until_its_json_is_committed(evidence):
    assert not (evidence / "start.json").exists() or page.START_ROWS
    (evidence / "start.json").unlink(missing_ok=True)
    assert "Not measured yet" in page.render(evidence)
    if not page.START_ROWS:  # a start.json that no row reads stops the page
        (evidence / "start.json").write_text("{}")
        with pytest.raises(page.EvidenceError, match="START_ROWS"):
            page.render(evidence)


def test_every_file_of_the_evidence_is_read_by_a_row_or_shown_by_a_page():
    read = page.sources()
    shown = "\n".join(p.read_text() for p in markdown(REPO / "docs") + [REPO / "README.md"])
    unread = []
    for path in sorted(p for p in BENCH.rglob("*") if p.is_file()):
        name = path.relative_to(BENCH).as_posix()
        if name in read or name == page.PAGE:
            continue
        if path.suffix == ".png" and f"benchmarks/{name}" in shown:
            continue  # a plot a page shows
        if path.parent.name == "rerun_seed0" and f"docs/benchmarks/rerun_seed0/" in shown:
            continue  # the rerun's exports, which the mnist_classification record names
        unread.append(name)
    assert unread == [], "delete the evidence no row reads (git keeps it), or add its row"


def test_every_link_into_the_page_names_a_row_or_a_section():
    known = anchors()
    links = {(p.relative_to(REPO).as_posix(), anchor)
             for p in markdown(REPO / "docs") + [REPO / "README.md"] for anchor in LINK.findall(p.read_text())}
    assert {anchor for _, anchor in links} - known == set(), sorted(link for link in links if link[1] not in known)
    assert any(p == "README.md" for p, _ in links)


def test_no_commit_hash_in_the_readme_or_the_docs_pages():
    found = {p.relative_to(REPO).as_posix(): HASH.findall(p.read_text())
             for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
    assert {p: words for p, words in found.items() if words} == {}


def test_the_benchmarks_page_gives_at_most_one_commit_a_row():
    rows = [line for line in (BENCH / page.PAGE).read_text().splitlines() if line.startswith("| <a id=")]
    assert len(rows) == sum(len(section.rows) for section in page.SECTIONS)
    for row in rows:
        cells = row.split(" | ")[:-1]  # the evidence's file name may be a sweep's id
        assert len(set(HASH.findall(" | ".join(cells)))) <= 1, row


def test_the_hash_pattern_finds_hashes_and_not_words():
    assert HASH.findall("at e6cb675, 58caef2 and 06c28d7; sha 1f31da1e") == ["e6cb675", "58caef2", "06c28d7", "1f31da1e"]
    assert HASH.findall("a decade added, defaced; #ff00ff is 1234567 and cafe") == []


def test_no_markdown_file_speaks_of_sittings():
    assert [p.relative_to(REPO).as_posix() for p in markdown(REPO)
            if re.search(r"\bsittings?\b", p.read_text(), re.IGNORECASE)] == []


def test_the_readme_is_short_and_its_first_screen_answers_how_long_the_demo_takes():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    first = "\n".join(lines[:40])
    assert "make demo" in first and "make test" in first
    assert "benchmarks/README.md#demo-cpu" in first and "benchmarks/README.md#fig2-gpu" in first


def test_the_page_renders_without_torch():
    code = "import sys, service.benchmarks.page as p; p.render(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
