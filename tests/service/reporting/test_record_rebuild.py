"""The committed record is what its exports say: `actsweep record docs/reproductions/campaign.yaml`,
run on a copy, writes every report, figure and index byte for byte as committed. A change to the
aggregation, the verdicts, the tables or the figures that would move a published number fails
here until the record is rebuilt and committed with it."""
from __future__ import annotations

import shutil

import pytest

from service.cli import main
from tests.conftest import REPO

pytestmark = pytest.mark.slow

RECORD = REPO / "docs" / "reproductions"


@pytest.mark.long("every committed record's reports and figures rebuilt from its exports")
@pytest.mark.timeout(200)  # 53-66 s in full suites of two test processes, 70-78 s of three
def test_the_committed_record_rebuilds_byte_for_byte(tmp_path):
    copy = tmp_path / "reproductions"
    shutil.copytree(RECORD, copy)
    assert main(["record", str(copy / "campaign.yaml")]) == 0
    rebuilt = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    committed = {p.relative_to(RECORD) for p in RECORD.rglob("*") if p.is_file()}
    assert rebuilt == committed  # (no file the record does not commit)
    changed = sorted(str(p) for p in committed if (copy / p).read_bytes() != (RECORD / p).read_bytes())
    assert changed == []
