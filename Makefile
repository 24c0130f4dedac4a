# The two set-up commands of the README, and the GPU-node ones.
#   make report    render reports/ from the committed profiles (no GPU, no torch)
#   make test      the CI test suite (no GPU)
#   make gpu-test  the GPU test suite (on a machine with a CUDA GPU)
PYTHON ?= python3
REPORT_VENV := .venv-report
TEST_VENV := .venv-test
# On machines where pip has a local CPU wheel of torch 2.13 this installs it; elsewhere PyPI's.
TORCH_SPEC ?= torch==2.13.0

.PHONY: report test gpu-test bench lint clean chromium capture

$(REPORT_VENV)/.ok: pyproject.toml
	$(PYTHON) -m venv $(REPORT_VENV)
	$(REPORT_VENV)/bin/pip install -q --upgrade pip
	$(REPORT_VENV)/bin/pip install -q -e .
	touch $@

# every notebook on every capture, and the comparison pages profiles/comparisons.toml declares; pages whose
# inputs did not change are kept (--force renders them all again)
report: $(REPORT_VENV)/.ok
	$(REPORT_VENV)/bin/nsightlab report --profiles profiles --reports reports

$(TEST_VENV)/.ok: pyproject.toml
	$(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install -q --upgrade pip
	$(TEST_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(TEST_VENV)/bin/pip install -q -e ".[test]"
	touch $@

# the report tests load every page in headless Chromium (Debian's package)
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { apt-get update -q && apt-get install -y -q chromium >/dev/null; }

test: $(TEST_VENV)/.ok chromium
	$(TEST_VENV)/bin/ruff check flash_kernels nsightlab tests scripts notebooks
	$(TEST_VENV)/bin/python -m pytest tests --ignore=tests/gpu -q --durations=25

gpu-test:
	$(PYTHON) -m pytest tests/gpu examples -q

capture:
	$(PYTHON) -m nsightlab.capture --suite seqlen,blocksize,bench --profiles profiles

bench:
	$(PYTHON) -m flash_kernels.bench --suite convention,d128,mixed --out bench_results

clean:
	rm -rf $(REPORT_VENV) $(TEST_VENV) reports/_tmp
