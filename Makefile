# dtrain: the two commands a new user needs are `make demo` and `make test`.
# Both install missing Debian packages (scripts/install-deps.sh), configure and build.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# make test runs one ctest more than there are cores (test-slow, whose tests train to
# bars and judge time, one per core): most tests wait on mpirun's start-up
# (a 2-rank run: 2.1 s wall, 0.5 s CPU), so 3 at once on 2 cores took the release
# pass from 276 s to 187 s and the sanitizer pass from 214 s to 201 s, all passing.
TEST_JOBS  ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
CMAKE_ARGS ?=
PREFIX     ?= /usr/local
DESTDIR    ?=

.PHONY: all deps build test test-slow test-fast test-asan demo bench install clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The suite on the optimised build (all but the "slow" label: training to
# accuracy bars and test_stop's matrix, in test-slow), then under
# AddressSanitizer + UBSan the suite minus the slow tests and the layout
# matrices, with tests/test_paths.sh running every code path once in their place.
# CI runs test and test-slow.
test: build
	cd $(BUILD) && ctest -j $(TEST_JOBS) --output-on-failure -LE slow
	$(MAKE) --no-print-directory test-asan

test-slow: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure -L slow

test-fast: build
	cd $(BUILD) && ctest -j $(TEST_JOBS) --output-on-failure -LE slow

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest -j $(TEST_JOBS) --output-on-failure -LE 'slow|matrix'

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@bench/run.sh $(BUILD)

# bin/dtrain, lib/libdtrain.{a,so*}, include/dtrain/*.h, lib/pkgconfig/dtrain.pc
# under $(DESTDIR)$(PREFIX).
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
