"""The time bounds scale with the machine (tests/machine_speed.py)."""
import pytest

from tests.machine_speed import MAX_SCALE, REFERENCE_S, SCALE_VARIABLE, bound_scale, scaled, session_bound_scale


def test_the_scale_is_the_largest_slowdown_within_its_limits():
    assert bound_scale(dict(REFERENCE_S)) == 1.0
    assert bound_scale({**REFERENCE_S, "python": REFERENCE_S["python"] * 1.5, "torch": REFERENCE_S["torch"] * 2.6}) == 2.6
    assert bound_scale({**REFERENCE_S, "python": REFERENCE_S["python"] * 2.0, "torch": REFERENCE_S["torch"] / 3}) == 2.0
    # an hour whose process starts are 3× slower, its loops and kernels at their pace, stretches them 3×
    assert bound_scale({**REFERENCE_S, "start": REFERENCE_S["start"] * 3}) == 3.0
    assert bound_scale({kind: seconds / 4 for kind, seconds in REFERENCE_S.items()}) == 1.0  # a faster machine keeps them
    assert bound_scale({kind: seconds * 50 for kind, seconds in REFERENCE_S.items()}) == MAX_SCALE
    assert bound_scale({**REFERENCE_S, "cores": 1}) == 2.0  # one core where the suite expects two
    assert bound_scale({**REFERENCE_S, "python": REFERENCE_S["python"] * 1.5, "cores": 1}) == 3.0
    assert bound_scale({**REFERENCE_S, "cores": 16}) == 1.0


def test_the_variable_sets_the_scale_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv(SCALE_VARIABLE, "2.5")
    assert session_bound_scale()[0] == 2.5 and scaled(10) == 25
    for bad in ("fast", "0", "-1"):
        monkeypatch.setenv(SCALE_VARIABLE, bad)
        with pytest.raises(ValueError, match=SCALE_VARIABLE):
            session_bound_scale()


def test_a_measured_machine_gets_a_scale_and_says_why(monkeypatch):
    monkeypatch.delenv(SCALE_VARIABLE)
    scale, says = session_bound_scale()
    assert 1.0 <= scale <= MAX_SCALE and all(kind in says for kind in REFERENCE_S) and " core" in says  # (1 core, or n cores)


def test_every_bound_is_scaled_by_the_sessions_factor(request, pytestconfig):
    bound = request.node.get_closest_marker("timeout")
    expected = round(float(pytestconfig.getini("timeout")) * pytestconfig.bound_scale)
    assert (bound.args[0] if bound else float(pytestconfig.getini("timeout"))) == expected


@pytest.mark.timeout(30, method="thread")
def test_a_tests_own_bound_is_scaled_and_keeps_its_method(request, pytestconfig):
    bound = request.node.get_closest_marker("timeout")
    assert bound.args[0] == round(30 * pytestconfig.bound_scale) and bound.kwargs == {"method": "thread"}


def test_a_tests_report_carries_its_scaled_bound(request, pytestconfig):
    from tests.conftest import TIME_BOUND

    expected = round(float(pytestconfig.getini("timeout")) * pytestconfig.bound_scale)
    assert dict(request.node.user_properties)[TIME_BOUND] == expected


def test_the_summary_names_every_test_past_half_its_bound_and_the_closest():
    from tests.conftest import half_bound_line

    line = half_bound_line({"a.py::slow": [70.0, 120.0], "b.py::quick": [1.0, 120.0], "c.py::long": [150.0, 200.0]})
    assert line.splitlines() == ["tests past half their time bound: 2", "  c.py::long: 150.0 s of 200",
                                 "  a.py::slow: 70.0 s of 120", "the closest to its bound: c.py::long, 150.0 s of 200 (75%)"]
    assert half_bound_line({"b.py::quick": [59.9, 120.0]}).splitlines() == [
        "tests past half their time bound: 0", "the closest to its bound: b.py::quick, 59.9 s of 120 (50%)"]
