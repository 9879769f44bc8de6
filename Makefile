# `sam build` runs these targets (template.yaml: each function's Metadata BuildMethod makefile), with
# ARTIFACTS_DIR the function's code directory. Each writes only what runs on Lambda: the packages
# control_plane/, http_api/, adapters/ (and examples/ for the example handler) and their run-time
# dependencies, pip-installed for Lambda's arm64 Python whatever this machine runs (infra/bundling.py,
# the same bundles as the CDK app's assets). Needs one python3 (3.11 or later) with pip on the PATH.
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
PYTHON ?= python3

CONTROL_PLANE_FUNCTIONS := IngressFunction AdminFunction WorkerFunction SweeperFunction DeployHookFunction

$(addprefix build-,$(CONTROL_PLANE_FUNCTIONS)):
	cd "$(ROOT)" && $(PYTHON) -m infra.bundling control-plane "$(ARTIFACTS_DIR)"

build-ExampleHandlerFunction:
	cd "$(ROOT)" && $(PYTHON) -m infra.bundling example-handler "$(ARTIFACTS_DIR)"

.PHONY: $(addprefix build-,$(CONTROL_PLANE_FUNCTIONS)) build-ExampleHandlerFunction
