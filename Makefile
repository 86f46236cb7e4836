# Set-up and everyday commands. Every target creates .venv when it is missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
# The native Kafka reader (native/, docs/architecture.md "Reading Kafka"), built with cargo into
# .cache/native-target (kept between runs) and installed into the venv
NATIVE_STAMP := $(VENV)/.installed-native
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml native/mor_streamer_native.pyi $(wildcard native/src/*.rs)
# Apache Hudi 0.15 on a pyspark 3.5 of its own, the judge of our tables (harness/hudi_judge.py)
JUDGE_STAMP := .cache/hudi-judge/.installed

.PHONY: demo native test class-data test-unit test-spark test-e2e test-hudi lint fix soak bench bench-quick clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	@touch $(BENCH_STAMP)

# Without cargo, or when the build fails (it needs a C compiler and OpenSSL's headers, Debian's
# libssl-dev), the job reads Kafka through confluent-kafka (the `python` reader), and says so.
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SOURCES)
	@if ! command -v cargo >/dev/null; then \
		echo "cargo not found: the job will read Kafka with its python reader. Install Rust (https://rustup.rs), then run 'make native' for the native one."; \
	elif $(PY) -m pip install --quiet 'maturin>=1.7,<2' && \
		(cd native && CARGO_TARGET_DIR=$(CURDIR)/.cache/native-target ../$(VENV)/bin/maturin build --quiet --release \
			--locked --auditwheel skip --out $(CURDIR)/.cache/native-wheels) && \
		$(PY) -m pip install --quiet --force-reinstall --no-deps .cache/native-wheels/mor_streamer_native-*.whl; then \
		touch $(NATIVE_STAMP); \
	else \
		echo "the native Kafka reader did not build (above): the job will read Kafka with its python reader"; \
	fi

native: $(NATIVE_STAMP)

$(JUDGE_STAMP): $(STAMP) harness/hudi_judge.py
	$(PY) -m harness.hudi_judge install
	@touch $(JUDGE_STAMP)

demo: $(STAMP)
	@$(MAKE) --no-print-directory $(NATIVE_STAMP)
	$(PY) -m streamer.cli.demo

# The judge's install, Spark's class-data archive (harness/class_data.py) and the native reader side by side, then
# the tests on two workers (docs/architecture.md, "Where the suite's time goes").
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 $(JUDGE_STAMP) class-data $(NATIVE_STAMP)
	$(PY) -m pytest

class-data: $(STAMP)
	$(PY) -m harness.class_data

test-unit: $(STAMP)
	$(PY) -m pytest -m unit

test-spark: $(STAMP)
	$(PY) -m pytest -m spark

test-e2e: $(STAMP)
	$(PY) -m pytest -m e2e

test-hudi: $(STAMP) $(JUDGE_STAMP)
	$(PY) -m pytest -m hudi

# What tests/test_lint.py checks (ruff's lint and format, mypy), and the fixes the tools make themselves.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

fix: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Continuous ingestion with async services, then checked (docs/operations.md, "Soak"); e.g.
# make soak SOAK_MINUTES=120 SOAK_ARGS="--rate 400 --keep".
SOAK_MINUTES ?= 10
soak: $(STAMP) $(NATIVE_STAMP)
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

bench: $(BENCH_STAMP) $(JUDGE_STAMP) $(NATIVE_STAMP)
	$(PY) -m bench

bench-quick: $(BENCH_STAMP) $(JUDGE_STAMP) $(NATIVE_STAMP)
	$(PY) -m bench --quick

clean:
	rm -rf $(VENV) .cache demo-output soak-output .pytest_cache .mypy_cache .ruff_cache
