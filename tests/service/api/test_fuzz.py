"""A property-based fuzz of the API from its own OpenAPI schema (schemathesis): no 5xx."""
import re
import subprocess
import sys
from pathlib import Path

from service.local_servers import ApiServer
from tests.service.api.conftest import api_env


def test_fuzzing_the_openapi_schema_finds_no_server_error(ray_head, tmp_path):
    # ACTSWEEP_MAX_TRIALS_PER_SWEEP=0: a generated request that happens to be valid is answered
    # 422 (over the trial limit) instead of starting real training; submission is tested elsewhere.
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_MAX_TRIALS_PER_SWEEP="0")).start()
    try:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("schemathesis")), "run", f"{server.url}/openapi.json",
             "--checks", "not_a_server_error", "--max-examples", "60", "--seed", "7", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-4000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert cases and int(cases.group(2)) == int(cases.group(1)) > 100, done.stdout[-2000:]  # every operation fuzzed
