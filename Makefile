# wasmcni — the two commands a new user needs:
#   make demo   build, then run the embedded example in a throwaway sandbox
#   make test   lint and run every test (unit, netns, reference, libcni)
# Both install what they need first (rustup targets, Debian packages):
# demo only what it needs, test everything.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
# What `make demo` needs (a build, and the sandbox's ip, nft
# and ping): the wasm32-wasip2 target and these. `make test` needs all the
# rest too (the oracles, the clients, the VM, netavark).
DEMO_DEB_PACKAGES := iproute2 iputils-ping nftables
DEB_PACKAGES := iproute2 iputils-ping containernetworking-plugins golang-go golang-github-appc-cni-dev \
	podman runc busybox-static musl-tools nftables iptables conntrack strace dnsmasq-base docker-registry python3-cryptography \
	containerd python3-grpcio python3-grpc-tools python3-protobuf protobuf-compiler
# The node installer image (deploy/): a static build of wasmcni, FROM scratch.
MUSL_TARGET := x86_64-unknown-linux-musl
# What every plain cargo build makes (.cargo/config.toml: a static build for
# this target).
RELEASE_BIN := target/x86_64-unknown-linux-gnu/release/wasmcni
IMAGE ?= localhost/wasmcni-installer:dev
GUESTS := $(notdir $(wildcard guests/*)) $(notdir $(wildcard tests/fixtures/*))

.PHONY: soak soak-can-fail setup setup-demo demo test lint bench bench-image install docs hot-symbols cycles cycles-methods image image-build image-binary

# Installs what is missing of the Debian packages $(1) (apt-get update
# first only when something is).
define deb_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

setup-demo:
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	$(call deb_install,$(DEMO_DEB_PACKAGES))

setup: setup-demo
	@rustup target list --installed | grep -qx $(MUSL_TARGET) || rustup target add $(MUSL_TARGET)
	$(call deb_install,$(DEB_PACKAGES))
	@tests/vm/setup
	@tests/netavark/setup

# The debug build: the demo shows what wasmcni does, not how fast, and the
# debug build takes ~60% of the release build's CPU time (7 minutes from a
# fresh clone, not ~10). `make install` and `make image` build release.
demo: setup-demo
	$(CARGO) run -p wasmcni -- demo

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --all-targets $(TEST_PACKAGES) -- -D warnings
	$(CARGO) clippy --target wasm32-wasip2 $(addprefix -p ,$(GUESTS)) -- -D warnings

# The packages `make test` tests: the host's crates, the SDK, and the
# guests' own unit tests (natively).
TEST_PACKAGES := -p wasmcni -p wasmcni-runtime -p wasmcni-tools -p wasmcni-kernel -p wasmcni-oci -p wasmcni-cni-spec -p wasmcni-gojson -p wasmcni-guest-sdk $(addprefix -p ,$(notdir $(wildcard guests/*)))

# `make lint`'s checks, but the host's clippy pass is the test build itself
# (tests/run --clippy: clippy-driver compiles each workspace crate for the
# tests and lints it), so the dependencies are compiled once. tests/run
# then runs the test binaries side by side and prints their times.
test: setup
	$(CARGO) fmt --all --check
	@$(MAKE) --no-print-directory cycles > /dev/null || $(MAKE) --no-print-directory cycles
	$(CARGO) clippy --target wasm32-wasip2 $(addprefix -p ,$(GUESTS)) -- -D warnings
	tests/node-untouched.sh tests/run --clippy -- $(TEST_PACKAGES)

# The soak (tests/cri/soak.py): containerd's CRI on a wasmcni node (the
# release build) for DURATION seconds of pods and faults, the mix drawn
# from SEED, in a sandbox of its own (its own network and mount
# namespaces, as tests/cri.rs runs it). Prints the summary (pods, faults
# by kind, problems) and fails on any problem. `make test` runs a short
# one (tests/cri.rs).
DURATION ?= 3600
SEED ?= $(shell date +%s)
soak: setup
	$(CARGO) build --release -p wasmcni
	@mkdir -p target/soak
	@work="$$(mktemp -d "$(CURDIR)/target/soak/run.XXXXXX")"; \
	echo "soak: seed $(SEED), $(DURATION) s, in $$work (steps in $$work/soak.log)"; \
	unshare -n -m tests/cri/sandbox.sh "$(CURDIR)/$(RELEASE_BIN)" "$$work" soak $(SEED) $(DURATION) \
	  > "$$work/soak.log" 2>&1; rc=$$?; \
	grep -v '^soak-step ' "$$work/soak.log" | tail -n 40; \
	grep -q '^soak .*"problem-count": 0' "$$work/soak.log" && [ $$rc = 0 ]

# Shows that the soak fails when wasmcni leaks under each fault kind: a
# build broken for the kind (tests/cri/broken/KIND.patch) must fail a soak
# of that kind (tests/cri/soak-can-fail; KINDS= some, CONTROL=1 also runs
# each on the unbroken build, which must pass).
KINDS ?=
soak-can-fail: setup
	tests/cri/soak-can-fail $(KINDS)

# Regenerate docs/capabilities.md from host/runtime/src/caps/catalog.rs and
# docs/sdk-reference.md from guest-sdk's source (a test fails when either
# is stale).
docs: setup
	WASMCNI_UPDATE_DOCS=1 $(CARGO) test -p wasmcni-runtime --lib caps::catalog
	WASMCNI_UPDATE_DOCS=1 $(CARGO) test -p wasmcni-guest-sdk --test sdk_reference

# Import circles between the modules of each host crate (issue 25).
# `make test` fails on one.
cycles:
	@for c in host/src host/runtime/src host/tools/src host/kernel/src host/cni-spec/src host/gojson/src host/oci/src; do echo "$$c:"; python3 host/module-cycles.py $$c --check || exit 1; done

# The same, counting calls between the capability layer's files through the
# methods of its one context type (an approximation; see the script).
cycles-methods:
	@python3 host/module-cycles.py host/runtime/src -v -m

# Regenerate host/hot-symbols.txt and host/hot-symbols-musl.txt (link order
# of the hot path, for the glibc and the musl build; needs root
# and valgrind). Rerun after large changes to the run path, then `make bench`.
hot-symbols: setup
	host/hot-symbols.sh
	host/hot-symbols.sh --musl

bench: setup
	$(CARGO) build --release -p wasmcni
	mkdir -p target/bench-bin && cp $(RELEASE_BIN) target/bench-bin/wasmcni
	@# Every benchmark runs; a floor one misses fails the target at the end.
	@status=0; for b in loopback bridge chain cri netavark podman; do \
	  WASMCNI_BIN=$(CURDIR)/target/bench-bin/wasmcni $(CARGO) bench -p wasmcni --bench $$b || status=1; \
	done; exit $$status

# The same benchmarks on the installer image's binary (static musl).
bench-image: setup
	$(CARGO) build --release --target $(MUSL_TARGET) -p wasmcni
	mkdir -p target/bench-musl && cp target/$(MUSL_TARGET)/release/wasmcni target/bench-musl/wasmcni
	@status=0; for b in loopback bridge chain; do \
	  WASMCNI_BIN=$(CURDIR)/target/bench-musl/wasmcni $(CARGO) bench -p wasmcni --bench $$b || status=1; \
	done; exit $$status

# Install into a CNI bin dir: make install DIR=/opt/cni/bin
install: setup
	$(CARGO) build --release -p wasmcni
	./$(RELEASE_BIN) install $(DIR)

# The node installer image (deploy/Containerfile, deploy/README.md): a
# static release build of wasmcni for $(MUSL_TARGET) (its C parts built by
# musl-gcc) in a FROM scratch image, built offline. tests/install.rs runs
# `make image-build` itself (a no-op when both are current).
image: setup
	$(MAKE) --no-print-directory image-build

# .cargo/config.toml builds $(MUSL_TARGET) with relocation-model=static: a
# plain static (non-PIE) executable, as the glibc build is non-PIE.
# IMAGE_PROFILE=dev builds the same image from the debug build of the same
# code for the same target (tests/install.rs does: the release build's
# optimisation costs ~1,100 s of CPU a test run cannot spare, the debug
# build ~670 s, and the image test checks what the image does, not how
# fast).
IMAGE_PROFILE ?= release
# image-binary: the executable alone (tests/run builds it beside the
# first test binaries, before tests/install.rs needs it).
image-binary:
	$(CARGO) build --profile $(IMAGE_PROFILE) --target $(MUSL_TARGET) -p wasmcni
	mkdir -p target/image
	cp -p target/$(MUSL_TARGET)/$(if $(filter dev,$(IMAGE_PROFILE)),debug,$(IMAGE_PROFILE))/wasmcni target/image/wasmcni
	target/image/wasmcni --version

image-build: image-binary
	podman build --network none --quiet -f deploy/Containerfile -t $(IMAGE) target/image
