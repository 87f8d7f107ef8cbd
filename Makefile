# The entry points a newcomer uses. Each target sets up what it needs itself: a virtualenv
# in .venv, the package installed in editable mode with its native extension built, and
# the Python packages of its extras.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.kraftcore-installed
SOURCES := pyproject.toml setup.py $(wildcard ext/*.pyx ext/*.pxd ext/*.h)

.PHONY: install test demo bench wheel clean

$(VPY):
	$(PYTHON) -m venv $(VENV)

# Reinstall (and so rebuild the extension) whenever the build inputs change.
$(STAMP): $(VPY) $(SOURCES)
	$(VPY) -m pip install --quiet --disable-pip-version-check -e '.[test,spark,bench]'
	touch $(STAMP)

install: $(STAMP)

# The layers' import contracts (pyproject.toml, docs/architecture.md), the whole suite but
# the `slow` tests on the native kernels (which must load), then the smoke subset on the
# pure-Python kernels to prove the fall-back works.
# `.venv/bin/python -m pytest -m slow` runs the slow tests.
test: install
	$(VENV)/bin/lint-imports --no-cache
	$(VPY) -m pytest -q -m "not slow"
	KRAFTCORE_PURE=1 $(VPY) -m pytest -q -m smoke -p no:cacheprovider

demo: install
	$(VENV)/bin/kraftcore demo

bench: install
	$(VPY) -m pytest bench -q -p no:cacheprovider

wheel:
	bash wheels/build.sh

clean:
	rm -rf build dist wheels/dist src/*.egg-info src/kraftcore/_c/*.so \
		src/kraftcore/runtime/*.so ext/*.c
