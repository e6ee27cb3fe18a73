"""A property-based fuzz of the API from its own OpenAPI schema (schemathesis's Python API): no 5xx."""
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from service.local_servers import ApiServer
from tests.machine_speed import scaled
from tests.service.api.conftest import api_env

EXAMPLES = 30  # per operation and mode


@pytest.mark.long("every operation of the OpenAPI schema fuzzed, 30 examples each, in two modes, against a live API")
@pytest.mark.timeout(300)  # 63-136 s in a full suite
def test_fuzzing_the_openapi_schema_finds_no_server_error(ray_head, tmp_path):
    # ACTSWEEP_MAX_TRIALS_PER_SWEEP=0: a generated request that happens to be valid is answered
    # 422 (over the trial limit) instead of starting real training; submission is tested elsewhere.
    server = ApiServer(api_env(tmp_path, ray_head, ACTSWEEP_MAX_TRIALS_PER_SWEEP="0")).start(timeout_s=scaled(60))
    sent, statuses = Counter(), Counter()
    try:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
                @given(case=operation.as_strategy(generation_mode=mode))
                def fuzz(case):
                    response = case.call_and_validate(base_url=server.url, checks=[not_a_server_error])
                    sent[operation.label] += 1
                    statuses[response.status_code // 100] += 1

                try:
                    fuzz()  # raises schemathesis's failure, with the request to reproduce it, on any 5xx
                except Unsatisfiable:  # an operation with no input to break (GET /healthz) has no negative case
                    assert mode is GenerationMode.NEGATIVE, operation.label
    finally:
        server.stop()
    assert {"POST /sweeps", "GET /sweeps/{sweep_id}", "DELETE /sweeps/{sweep_id}"} <= set(sent)
    assert set(sent) == {operation.label for operation in operations}, sent  # every operation fuzzed
    assert statuses[4] > 0 and 5 not in statuses, statuses  # invalid requests were sent, and refused cleanly
