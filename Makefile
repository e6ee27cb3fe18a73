# The two quick-start commands. Each creates or reuses the virtual environment (.ci/venv.sh).
.PHONY: demo test test-fast lock deploy-check gpu-check

# Python keeps the bytecode it compiles. Where the environment says not to (PYTHONDONTWRITEBYTECODE),
# every process compiles the project's modules again, and pytest rewrites its plugins' 250 modules
# (hypothesis, schemathesis) from source in each test process: 5 s of the 18 s a test process
# takes to collect the suite here.
unexport PYTHONDONTWRITEBYTECODE

demo:  ## the main job: the quick MNIST classification sweep on the real MNIST, on a local Ray
	@venv=$$(bash .ci/venv.sh) && "$$venv/bin/actsweep" run mnist_classification --quick

# Test processes side by side (pytest-xdist: whole modules to whichever is free, the API modules in two
# of them, the longest first: tests/scheduling.py; make test-fast deals a test at a time). With two, the
# cores were 80% busy over a whole run (BSD process accounting): each test process waits on process
# starts, Ray's scheduling, servers and outages, often at the same time as the other. A third fills
# that: 1,430 s → 1,211 s for the same code on the same machine. TEST_WORKERS=0 runs every test in one
# process. make test-fast (unit tests, hardly any waiting) keeps two.
TEST_WORKERS ?= 3
FAST_TEST_WORKERS ?= 2

test:  ## the test suite, against a real local Ray and real MLflow stores (and headless Chromium)
	@bash .ci/system-packages.sh && venv=$$(bash .ci/venv.sh) && "$$venv/bin/python" -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-fast:  ## the inner loop: every test not marked slow (a few minutes; make test runs everything)
	@venv=$$(bash .ci/venv.sh) && "$$venv/bin/python" -m pytest -q -m "not slow" -n $(FAST_TEST_WORKERS) --dist worksteal

deploy-check:  ## the container deployment built and run with Podman (no Docker Hub), a worker killed mid-sweep
	@bash .ci/deploy-packages.sh && venv=$$(bash .ci/venv.sh) && "$$venv/bin/python" docker/deploy-check/run.py

lock:  ## regenerate requirements.lock from pyproject.toml (uv pip compile; --upgrade via ARGS=--upgrade)
	@bash .ci/lock.sh $(ARGS)

gpu-check:  ## on a machine with a CUDA GPU, with the Python that runs it: the CUDA tests, Figure 2's full protocol with no flags (timed), the paper and cifar benches
	@bash .ci/gpu-check.sh
