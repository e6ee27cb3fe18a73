"""The bench takes a share only of a peak the hardware has: on a CPU without native bf16 its bf16
matmuls are emulated (about 1 GFLOP/s on an AVX2 EPYC), and a share of that (3,446% for fp32
variants) means nothing."""
from service.benchmarks.speed import left_out_peaks, native_peaks

CPU = {"fp32": 44.9, "bf16": 1.3}  # (measured on an AVX2 EPYC, 2 cores: no avx512_bf16, no amx_bf16)
GPU = {"fp32": 51_000.0, "bf16": 690_000.0, "tf32": 370_000.0}


def test_an_emulated_bf16_matmul_is_no_peak_and_the_bench_says_why():
    assert native_peaks(CPU, native_bf16=False) == {"fp32": 44.9}
    why = left_out_peaks(CPU, native_bf16=False)
    assert why.startswith("no share of a bf16 peak: this CPU has no native bf16") and "1.3 GFLOP/s" in why


def test_native_bf16_is_a_peak_on_a_cpu_that_has_it_and_on_a_gpu():
    assert native_peaks(CPU, native_bf16=True) == CPU and left_out_peaks(CPU, native_bf16=True) == ""
    assert native_peaks(GPU, native_bf16=True) == GPU and left_out_peaks(GPU, native_bf16=True) == ""
