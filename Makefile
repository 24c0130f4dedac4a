# The two set-up commands of the README, and the GPU ones.
#   make report    render reports/ and docs/results.md from the committed profiles (no GPU, no torch; JOBS=N pages
#                  at once, default: the machine's cores)
#   make test      the CI test suite (no GPU)
#   make gpu-test  the GPU test suite (on a machine with a CUDA GPU)
#   make gpu-node STEPS="build test"   scripts/gpu_node.sh: build, GPU tests, sanitizer, bench, captures (docs/testing.md)
#   make ab-base REF=HEAD FILES="flash_kernels/csrc/x.cu"   the base side of gpu_node.sh's same-machine A/B step
PYTHON ?= python3
REPORT_VENV := .venv-report
TEST_VENV := .venv-test
# pages rendered at once by `make report` (Dask worker threads; each page's notebook in a kernel process of its own)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# On machines where pip has a local CPU wheel of torch 2.13 this installs it; elsewhere PyPI's.
TORCH_SPEC ?= torch==2.13.0

.PHONY: report test gpu-test gpu-node ab-base bench lint clean chromium capture

$(REPORT_VENV)/.ok: pyproject.toml
	$(PYTHON) -m venv $(REPORT_VENV)
	$(REPORT_VENV)/bin/pip install -q --upgrade pip
	$(REPORT_VENV)/bin/pip install -q -e .
	touch $@

# every notebook on every capture, the comparison pages profiles/comparisons.toml declares, and the documents
# plug-ins register (docs/results.md); pages whose inputs did not change are kept (--force renders them all again)
report: $(REPORT_VENV)/.ok
	$(REPORT_VENV)/bin/nsightlab report --profiles profiles --reports reports --jobs $(JOBS)

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

# re-captures the committed sweeps: --replace (each old capture is removed once its new one is in place)
# everything on a GPU machine in one call (STEPS, OUT and the other settings: the header of scripts/gpu_node.sh)
STEPS ?= build test sanitize bench
gpu-node:
	STEPS="$(STEPS)" bash scripts/gpu_node.sh

# .ab/base: FILES as they are at REF, against which `STEPS="build ab" AB_CMD=...` times the working tree
ab-base:
	@test -n "$(REF)" -a -n "$(FILES)" || { echo 'usage: make ab-base REF=<commit> FILES="path ..."'; exit 2; }
	rm -rf .ab/base .ab/base.ref && mkdir -p .ab/base
	for f in $(FILES); do mkdir -p .ab/base/$$(dirname $$f) && git show "$(REF):$$f" > .ab/base/$$f || exit 2; done
	echo "$$(git rev-parse --short '$(REF)^{commit}') $(FILES)" > .ab/base.ref

capture:
	$(PYTHON) -m nsightlab.capture --suite seqlen,blocksize,bench --profiles profiles --replace

bench:
	$(PYTHON) -m flash_kernels.bench --suite convention,d128,mixed --out bench_results

# the cache of uncompressed exports and parsed deep reports ($$NSIGHTLAB_CACHE, else ~/.cache/nsightlab) too:
# `nsightlab cache clear` removes only the files the cache wrote (it needs no installed package)
clean:
	PYTHONPATH=. $(PYTHON) -m nsightlab.cache clear
	rm -rf $(REPORT_VENV) $(TEST_VENV) reports/_tmp
