# gpuserve.sglang: the two commands of the README, and the pieces they are made of.
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: demo test test-fast test-busy venv engine image lint sanity controllers unit molecule build release demo-clean reference clean

demo:                ## the full deploy against a local systemd test host
	scripts/demo.sh

test:                ## lint, the controller matrix (sanity), unit tests and every molecule scenario
	scripts/test.sh

test-fast:           ## the inner loop: lint, controller matrix, unit tests and one scenario: make test-fast S=server
	scripts/test.sh --fast $(S)

test-busy:           ## make test beside a competing CPU load (stress-ng --cpu BUSY_CPUS, default 1): green or not
	scripts/test-busy.sh

venv:
	scripts/venv.sh && scripts/collection-link.sh

engine:
	scripts/docker-engine.sh up && scripts/systemd-image.sh

lint: venv           ## ansible-lint, then the roles' shape against issue 39's targets (scripts/structure-check.py)
	ansible-lint --profile production
	python scripts/structure-check.py

sanity: venv         ## ansible-test sanity on the development controller (2.21)
	scripts/sanity.sh

controllers: venv    ## sanity and the plugin unit tests on ansible-core 2.19 (Python 3.11) and PyPI's newest, pre-releases included (Python 3.13)
	scripts/controller-matrix.sh

unit: venv
	tests/sglang_parser/setup-venv.sh
	python -m pytest tests/unit -q -p no:cacheprovider

molecule: venv engine    ## one scenario alone: make molecule S=server
	scripts/molecule-all.sh $(S)

build: venv
	ansible-galaxy collection build --force --output-path .cache/dist .

release: venv        ## cut galaxy.yml's version: changelog, tarball + sha256, docs/releases/<version>.md, commit and tag
	scripts/release.sh

demo-clean:          ## remove the demo host (and the engine, if make demo started it)
	scripts/demo.sh --clean

reference:           ## regenerate docs/reference.md from argument_specs and module docs
	python scripts/gen-reference.py

clean:
	rm -rf .cache/dist
