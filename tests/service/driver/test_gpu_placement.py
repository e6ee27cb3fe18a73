"""A gpus_per_trial that puts more trial processes on a GPU than its memory holds, each with its
CUDA context, is refused with the numbers and the way out (service.driver.gpu_placement)."""
from __future__ import annotations

import pytest

from search_spaces.catalog import SpecError
from service.driver.gpu_placement import check_gpu_placement, placement_refusal, processes_per_gpu

GIB = 2 ** 30
H100 = 79.1 * GIB
CONTEXT = 810 * 2 ** 20  # the upper end of what one trial process held on an H100


@pytest.mark.parametrize(("fraction", "processes"), [(1, 1), (2, 1), (0.5, 2), (0.25, 4), (0.3, 3), (0.01, 100),
                                                     (1 / 3, 3), (0.1, 10)])
def test_processes_per_gpu_are_what_ray_fits_at_that_fraction(fraction, processes):
    assert processes_per_gpu(fraction) == processes


def test_a_hundred_processes_of_contexts_do_not_fit_an_80_gb_card():
    refusal = placement_refusal(0.01, 0.05 * GIB, H100, CONTEXT, fused=False)
    assert refusal is not None
    for named in ("execution.gpus_per_trial: 0.01", "100 trial processes", "0.79 GiB of CUDA context",
                  "84.1 GiB", "79.1 GiB", "execution.mode: fused", "at least 0.01063 (94 processes per GPU)"):
        assert named in refusal, named


def test_four_trials_on_a_card_fit():
    assert placement_refusal(0.25, 2 * GIB, H100, CONTEXT, fused=False) is None
    assert placement_refusal(0.25, 18.9 * GIB, H100, CONTEXT, fused=False) is None
    assert placement_refusal(0.25, 19.2 * GIB, H100, CONTEXT, fused=False) is not None  # the contexts tip it
    for trial_gib in (0.05, 1.0, 7.3):  # the fraction suggested fits, and no smaller one fits more processes
        refusal = placement_refusal(0.01, trial_gib * GIB, H100, CONTEXT, fused=False)
        suggested = float(refusal.split("at least ")[1].split(" ")[0])
        stated = int(refusal.split("(")[1].split(" processes")[0])
        assert processes_per_gpu(suggested) == stated
        assert placement_refusal(suggested, trial_gib * GIB, H100, CONTEXT, fused=False) is None
        assert placement_refusal(1 / (stated + 1), trial_gib * GIB, H100, CONTEXT, fused=False) is not None


def test_a_fused_pack_is_not_told_to_fuse_and_a_trial_too_large_is_told_so():
    refusal = placement_refusal(0.5, 40 * GIB, H100, CONTEXT, fused=True)
    assert "pack processes" in refusal and "execution.mode: fused" not in refusal
    assert "at least 1 (1 processes per GPU)" in refusal, refusal
    assert "does not fit this GPU" in placement_refusal(0.5, 90 * GIB, H100, CONTEXT, fused=True)


def test_the_refusal_is_a_spec_error_naming_the_field():
    with pytest.raises(SpecError) as refused:
        check_gpu_placement(0.01, 0.05 * GIB, H100, CONTEXT, fused=False)
    assert refused.value.errors[0]["loc"] == ("execution", "gpus_per_trial")
    check_gpu_placement(0.5, GIB, H100, CONTEXT, fused=False)  # fits: nothing raised
