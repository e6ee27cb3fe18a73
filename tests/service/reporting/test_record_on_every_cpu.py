"""A record rebuilds the same on every CPU: `actsweep record`, run with numpy's and torch's vector
paths forced down (NPY_DISABLE_CPU_FEATURES, ATEN_CPU_CAPABILITY=default), writes the committed
reports and figures byte for byte, as test_record_rebuild.py defines it for the defaults.

The records were written with the defaults on an AVX2 CPU; numpy's exp and log and torch's
activations run other instructions on the paths forced down here (and on AVX-512), and differ in
their last bits. What a record publishes does not depend on them: numbers computed through exp
and log at 10 significant digits (statistics.published), the activations' plots drawn from
float64 values rounded to 1e-6 (figures.PLOTTED_DECIMALS).

Cost: the experiments whose records hold what depends on the vector paths: the SOI activations and
a ratio on a 16th digit (mnist_soi), the sigma family of GELUs (gelu_sigma_bridge), the tagger's
SOI (twitter_pos_soi) and the most activations in one plot (activation_zoo). The whole campaign is
test_record_rebuild.py's, on the defaults."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # rebuilds four records in a subprocess: about 27 s of CPU, 92 s on 2 shared cores

RECORD = REPO / "docs" / "reproductions"
EXPERIMENTS = ("mnist_soi", "gelu_sigma_bridge", "twitter_pos_soi", "activation_zoo")
# the vector paths forced down: numpy's dispatch to AVX/AVX2/FMA3/F16C (AVX-512 is above them, and
# off with them), torch's to its default (no vector) kernels
FORCED_DOWN = {"NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 F16C AVX", "ATEN_CPU_CAPABILITY": "default"}


def test_the_record_rebuilds_byte_for_byte_with_the_vector_paths_forced_down(tmp_path):
    copy = tmp_path / "reproductions"
    shutil.copytree(RECORD, copy)
    manifest = yaml.safe_load((RECORD / "campaign.yaml").read_text())
    manifest["experiments"] = [e for e in manifest["experiments"] if e["name"] in EXPERIMENTS]
    assert {e["name"] for e in manifest["experiments"]} == set(EXPERIMENTS)
    (copy / "some.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    environment = {**os.environ, **FORCED_DOWN}
    rebuilt = subprocess.run([sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))",
                              "record", str(copy / "some.yaml")], cwd=REPO, env=environment, capture_output=True,
                             text=True, timeout=600)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    for name in EXPERIMENTS:
        committed = {p.relative_to(RECORD) for p in (RECORD / name).rglob("*") if p.is_file()}
        written = {p.relative_to(copy) for p in (copy / name).rglob("*") if p.is_file()}
        assert written == committed, name
        changed = sorted(str(p) for p in committed if (copy / p).read_bytes() != (RECORD / p).read_bytes())
        assert changed == [], changed
