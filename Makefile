# Cairn: build, test, fuzz and benchmark.
#
#   make deps    install the Debian and Python packages the build and tests need
#   make test    deps, build, C warnings, the README consumer, fuzz smoke, sanitizer runs,
#                then every test
#   make bench   run the benchmarks (release build); fails when over budget
#   make fuzz    fuzz the C core's parsers for longer (FUZZ_LONG_SECONDS, default 600)
#   make demo    a service crashes, restarts and reports it, against a local collector
#   make lib     libcairn.so and libcairn.a, the C core for other SDKs (make install PREFIX=...)
#   make docs    the Cairn module's API documentation (docc), in .build/docs

SWIFT ?= swift
CLANG ?= clang
PYTHON ?= python3
FUZZ_SECONDS ?= 10
FUZZ_LONG_SECONDS ?= 600
FUZZ_DIR := .build/fuzz
# The crash tests' children must meet Cairn's handler, not ASan's, for the signals it
# catches (ASan still reports memory errors: it does not need those handlers for that).
# The Swift runtime's backtracer, which Cairn's handler chains to, is turned off in
# this run: its helper cannot inspect an ASan process and hangs.
ASAN_CRASH_OPTIONS := handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0
# The toolchain's lld links sanitizer builds without gold's export warnings.
LLD := -Xswiftc -use-ld=lld

# What a package that depends on Cairn needs to build (the README lists them, and
# `make readme-packages` checks that it does), then what the tests need besides.
BUILD_PACKAGES := pkg-config liblmdb-dev libzstd-dev libunwind-dev libmbedtls-dev libssl-dev
TEST_PACKAGES := openssl ca-certificates lmdb-utils zstd
APT_PACKAGES := $(BUILD_PACKAGES) $(TEST_PACKAGES)
# The package traits of the Swift server ecosystem's integrations (Package.swift): the
# package's own builds and tests enable them all. Their packages resolve from GitHub, or,
# where SWIFTPM_MIRROR names a folder of offline mirrors of them (one with a setup.sh
# that points SwiftPM's mirror settings there), from that folder.
TRAITS := --traits Logging,Metrics,ServiceLifecycle
SWIFTPM_MIRROR ?=
PIP_MODULES := zstandard lmdb opentelemetry-proto
# What each is imported as (the check that they are there).
PIP_IMPORTS := zstandard,lmdb,opentelemetry.proto.collector.logs.v1.logs_service_pb2

# The two C cores: storage (ring, frames) and crash (handler, stacks, termination).
CORE_DIRS := CSources/CCairnCore CSources/CCairnCrash
CORE_SOURCES := $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.c))
CORE_HEADERS := $(foreach d,$(CORE_DIRS),$(wildcard $(d)/*.h $(d)/include/*.h))
CORE_INCLUDES := $(foreach d,$(CORE_DIRS),-I$(d)/include -I$(d))
HTTP_SOURCES := $(wildcard CSources/CCairnHTTP/*.c)
GUARD_SOURCES := $(wildcard CSources/CCairnStoreGuard/*.c)
HTTP_HEADERS := $(wildcard CSources/CCairnHTTP/*.h CSources/CCairnHTTP/include/*.h)
FUZZERS := $(patsubst CSources/Fuzz/fuzz_%.c,%,$(wildcard CSources/Fuzz/fuzz_*.c)) dwarf
SWIFTC ?= swiftc
DWARF_FUZZ_SOURCES := Sources/CairnCrash/ELFImage.swift Sources/CairnCrash/DWARFLineTable.swift \
                      Sources/CairnCrash/DWARFInlineInfo.swift Tests/Fuzz/fuzz_dwarf.swift
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
              -fuse-ld=lld -Wall -Wextra -Werror $(CORE_INCLUDES)

.PHONY: readme-packages docs all deps build demo test test-swift cwarn clib lib install consumer sanitize asan tsan fuzz-smoke fuzz fuzzers bench bench-quick clean

all: build

deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@if [ -n "$(SWIFTPM_MIRROR)" ]; then $(SWIFTPM_MIRROR)/setup.sh . >/dev/null; fi
	@$(PYTHON) -c "import $(PIP_IMPORTS)" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore $(PIP_MODULES)

# A target that imports another target of the package must declare it a dependency.
build: deps
	$(SWIFT) build $(TRAITS) --build-tests --explicit-target-dependency-import-check error

# The whole suite, last so that its closing line is the run's verdict. The quick
# benchmark run prints the figures and fails the run when one is over its budget.
test: build readme-packages cwarn clib consumer docs fuzz-smoke sanitize bench-quick test-swift

# The README's package lists are the ones `make deps` installs.
readme-packages:
	$(PYTHON) Tests/Tools/readme_packages.py README.md "$(BUILD_PACKAGES)" "$(APT_PACKAGES)"

# A package that depends on a tagged Cairn as a user's does builds every Swift snippet of
# the README, and runs the quick start, copied verbatim, with `import Cairn` alone
# (Tests/Consumer/build.sh).
consumer: deps
	Tests/Consumer/build.sh

# The C sources build warning-free, with and without optimisation (the package manifest
# carries no compiler flags, so that Cairn can be a versioned dependency).
C_INCLUDES := $(CORE_INCLUDES) -ICSources/CCairnHTTP/include -ICSources/CCairnHTTP -ICSources/CCairnStoreGuard/include
cwarn: deps
	@for opt in -O0 -O2; do for f in $(CORE_SOURCES) $(HTTP_SOURCES) $(GUARD_SOURCES); do \
	  $(CLANG) -std=gnu11 $$opt -Wall -Wextra -Werror -fsyntax-only $(C_INCLUDES) $$f || exit 1; \
	done; done; echo "C sources: no warnings at -O0 and -O2 ($(words $(CORE_SOURCES) $(HTTP_SOURCES) $(GUARD_SOURCES)) files)"

test-swift:
	$(SWIFT) test $(TRAITS) --skip-build --disable-xctest

# The C core's tests, the crash reader and symbolizer, the snapshot store's reading
# of damaged files and the HTTP client's response parsing (hostile input) under
# AddressSanitizer; the ring, frames, store, uploader and HTTP transport under
# ThreadSanitizer (the fuzzers add UBSan).
sanitize: asan tsan

asan: deps
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build/asan $(LLD)
	LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/lsan.supp ASAN_OPTIONS=$(ASAN_CRASH_OPTIONS) SWIFT_BACKTRACE=enable=no \
	  $(SWIFT) test --skip-build --disable-xctest --sanitize=address \
	  --scratch-path .build/asan --filter 'CCairnTests|SymbolizerTests|CrashEventTests|SnapshotStoreTests|StoreFaultTests|HTTPResponseParserTests|HTTPTransport'

tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build/tsan $(LLD)
	TSAN_OPTIONS=halt_on_error=1 $(SWIFT) test --skip-build --disable-xctest --sanitize=thread \
	  --scratch-path .build/tsan --filter 'RingCoreTests|RingTests|FrameCoreTests|UploaderTests|SnapshotStoreTests|CairnAPITests|DedupTests|HTTPTransport'

# libFuzzer targets, built with the toolchain's clang.
fuzzers: $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZERS))

$(FUZZ_DIR)/fuzz_%: CSources/Fuzz/fuzz_%.c $(CORE_SOURCES) $(CORE_HEADERS)
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) $(CORE_SOURCES) $< -lzstd -lunwind -o $@

# The HTTP client's fuzzers (the response parser; URLs and proxies; certificates' subjects) build from its
# sources instead; the exchange's with the hook that hands the client a socket pair
# for its connection (http_internal.h).
$(FUZZ_DIR)/fuzz_http_response $(FUZZ_DIR)/fuzz_http_url $(FUZZ_DIR)/fuzz_http_der: $(FUZZ_DIR)/fuzz_http_%: CSources/Fuzz/fuzz_http_%.c \
  $(HTTP_SOURCES) $(HTTP_HEADERS)
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) -ICSources/CCairnHTTP/include -ICSources/CCairnHTTP $(HTTP_SOURCES) $< -o $@

$(FUZZ_DIR)/fuzz_http_exchange: CSources/Fuzz/fuzz_http_exchange.c $(HTTP_SOURCES) $(HTTP_HEADERS)
	@mkdir -p $(FUZZ_DIR)
	$(CLANG) $(FUZZ_FLAGS) -DCAIRN_HTTP_FUZZ_HOOKS -pthread -ICSources/CCairnHTTP/include -ICSources/CCairnHTTP \
	  $(HTTP_SOURCES) $< -o $@

# The DWARF readers' fuzzer is Swift: the three source files, built with swiftc's
# libFuzzer support; its seeds are the DWARF 4 and 5 sections of a small program with
# inlined functions (Tests/Fuzz/seed.c), packed by Tests/Fuzz/dwarf_seed.py.
$(FUZZ_DIR)/fuzz_dwarf: $(DWARF_FUZZ_SOURCES) Tests/Fuzz/seed.c Tests/Fuzz/dwarf_seed.py
	@mkdir -p $(FUZZ_DIR)/seeds-dwarf
	$(SWIFTC) -sanitize=fuzzer,address -parse-as-library -O -g -use-ld=lld -I CSources/CZstd \
	  $(DWARF_FUZZ_SOURCES) -lzstd -o $@
	for v in 4 5; do \
	  $(CLANG) -g -gdwarf-$$v -O2 Tests/Fuzz/seed.c -o $(FUZZ_DIR)/seed-dwarf$$v && \
	  python3 Tests/Fuzz/dwarf_seed.py $(FUZZ_DIR)/seed-dwarf$$v $(FUZZ_DIR)/seeds-dwarf/dwarf$$v || exit 1; \
	done

fuzz-smoke: deps fuzzers
	@for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_DIR)/corpus-$$f; \
	  seeds=""; [ -d CSources/Fuzz/corpus/$$f ] && seeds=CSources/Fuzz/corpus/$$f; \
	  [ -d $(FUZZ_DIR)/seeds-$$f ] && seeds="$$seeds $(FUZZ_DIR)/seeds-$$f"; \
	  echo "fuzzing $$f for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_DIR)/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/$$f- $(FUZZ_DIR)/corpus-$$f $$seeds \
	    > $(FUZZ_DIR)/$$f.log 2>&1 || { tail -40 $(FUZZ_DIR)/$$f.log; exit 1; }; \
	  grep -E "^stat::number_of_executed_units|^Done" $(FUZZ_DIR)/$$f.log; \
	done

fuzz:
	$(MAKE) fuzz-smoke FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

bench: deps
	$(SWIFT) build $(TRAITS) -c release --product CairnBenchmarks
	$(SWIFT) build $(TRAITS) -c release --product cairn-crash-child
	$(SWIFT) build $(TRAITS) -c release --product cairn-swift-crash-child
	$(SWIFT) build $(TRAITS) -c release --product cairn-service-child
	$(SWIFT) build $(TRAITS) -c release --product cairn-bench-host
	$(SWIFT) build $(TRAITS) -c release --product cairn-bench-baseline
	$(SWIFT) build $(TRAITS) -c release --product cairn-bench-host-essentials
	$(SWIFT) build $(TRAITS) -c release --product cairn-bench-baseline-essentials
	$(SWIFT) run $(TRAITS) -c release --skip-build CairnBenchmarks $(BENCH_ARGS)

demo: deps
	$(SWIFT) build $(TRAITS) --product orders-service
	./Examples/demo.sh

# The C cores as a library for other SDKs: libcairn.so (exporting only the `cairn_*`
# functions cairn_core.h and cairn_crash.h declare with CAIRN_API) and libcairn.a, from
# the same sources the Swift package builds; `make install PREFIX=...` puts them, the
# headers (CCairn.h as cairn.h, with the two it includes) and cairn.pc under PREFIX.
PUBLIC_HEADERS := CSources/CCairnCore/include/cairn_core.h CSources/CCairnCrash/include/cairn_crash.h
PREFIX ?= /usr/local
LIB_DIR := .build/lib
CAIRN_VERSION := $(shell sed -n 's/^\#define CAIRN_VERSION_STRING "\(.*\)"$$/\1/p' CSources/CCairnCore/include/cairn_core.h)
CAIRN_MAJOR := $(firstword $(subst ., ,$(CAIRN_VERSION)))
LIB_OBJECTS := $(addprefix $(LIB_DIR)/obj/,$(notdir $(CORE_SOURCES:.c=.o)))
vpath %.c $(CORE_DIRS)
# Recursive (=), not immediate: pkg-config must run when a rule runs, after `make deps`
# has installed the -dev packages, not when make parses this file on a new machine.
LIB_CFLAGS = -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -DCAIRN_NO_THREAD_HOOK -Wall -Wextra -Werror \
             $(CORE_INCLUDES) $(shell pkg-config --cflags libzstd libunwind)
LIB_LIBS = $(shell pkg-config --libs libzstd libunwind) -lpthread

lib: $(LIB_DIR)/libcairn.so $(LIB_DIR)/libcairn.a

$(LIB_DIR)/obj/%.o: %.c $(CORE_HEADERS)
	@mkdir -p $(LIB_DIR)/obj
	$(CLANG) $(LIB_CFLAGS) -c $< -o $@

$(LIB_DIR)/libcairn.so.$(CAIRN_VERSION): $(LIB_OBJECTS)
	$(CLANG) -shared -Wl,-soname,libcairn.so.$(CAIRN_MAJOR) -Wl,--no-undefined -o $@ $(LIB_OBJECTS) $(LIB_LIBS)

$(LIB_DIR)/libcairn.so: $(LIB_DIR)/libcairn.so.$(CAIRN_VERSION)
	ln -sf libcairn.so.$(CAIRN_VERSION) $(LIB_DIR)/libcairn.so.$(CAIRN_MAJOR)
	ln -sf libcairn.so.$(CAIRN_VERSION) $@

$(LIB_DIR)/libcairn.a: $(LIB_OBJECTS)
	rm -f $@
	ar rcs $@ $(LIB_OBJECTS)

install: deps lib
	install -d $(PREFIX)/lib/pkgconfig $(PREFIX)/include
	install -m 644 CSources/CCairnCrash/include/CCairn.h $(PREFIX)/include/cairn.h
	install -m 644 $(PUBLIC_HEADERS) $(PREFIX)/include/
	install -m 755 $(LIB_DIR)/libcairn.so.$(CAIRN_VERSION) $(PREFIX)/lib/
	ln -sf libcairn.so.$(CAIRN_VERSION) $(PREFIX)/lib/libcairn.so.$(CAIRN_MAJOR)
	ln -sf libcairn.so.$(CAIRN_VERSION) $(PREFIX)/lib/libcairn.so
	install -m 644 $(LIB_DIR)/libcairn.a $(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(CAIRN_VERSION)|' CSources/cairn.pc.in > $(PREFIX)/lib/pkgconfig/cairn.pc

# The library exports exactly the functions the public headers declare with CAIRN_API (and the
# linker's own section markers); then a C
# program built against the installed library writes a ring and crashes, and the Swift
# side reads both back (Examples/c-host/run.sh).
clib: deps lib
	@nm -D --defined-only $(LIB_DIR)/libcairn.so | awk '$$2 ~ /^[TDRBVW]$$/ {print $$3}' \
	  | grep -v -x -E '__bss_start|_edata|_end|_init|_fini' | sort > $(LIB_DIR)/exported.txt
	@sed -n 's/^CAIRN_API [^(]*[ *]\(cairn_[a-z0-9_]*\)(.*/\1/p' $(PUBLIC_HEADERS) | sort > $(LIB_DIR)/documented.txt
	@diff -u $(LIB_DIR)/documented.txt $(LIB_DIR)/exported.txt || { echo "libcairn.so exports other symbols than its headers document"; exit 1; }
	@echo "libcairn.so $(CAIRN_VERSION): exports the $$(wc -l < $(LIB_DIR)/documented.txt) functions its headers document, nothing else"
	$(SWIFT) build $(TRAITS) --product cairn
	Examples/c-host/run.sh

# API documentation for the Cairn module with the toolchain's docc: symbol graphs from
# the compiler, the catalog in Sources/Cairn/Cairn.docc; the site lands in .build/docs.
DOCC ?= $(shell command -v docc 2>/dev/null || echo $(dir $(shell command -v swift))docc)
# The symbol graphs live inside the docs build's scratch path: an up-to-date build writes
# none, so they must survive from the build that did (and go when that build is removed).
DOCS_BUILD := .build/docs-build
# The Swift modules whose public declarations the docs build counts (Tests/Tools/public_api.py).
API_MODULES := Cairn CairnBase CairnCrash CairnProcessor CairnStore CairnUploader
docs: deps
	@mkdir -p $(DOCS_BUILD)/symbol-graphs
	$(SWIFT) build --target Cairn --scratch-path $(DOCS_BUILD) -Xswiftc -emit-symbol-graph \
	  -Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/$(DOCS_BUILD)/symbol-graphs
	$(PYTHON) Tests/Tools/public_api.py $(DOCS_BUILD)/symbol-graphs $(API_MODULES)
	@rm -rf .build/symbol-graphs-cairn && mkdir -p .build/symbol-graphs-cairn
	cp $(DOCS_BUILD)/symbol-graphs/Cairn.symbols.json .build/symbol-graphs-cairn/
	@# Cairn's extensions of other modules' types, when it has public ones (a graph older
	@# than the module's own is left from an earlier build).
	@main=$$(stat -c %Y $(DOCS_BUILD)/symbol-graphs/Cairn.symbols.json); \
	for f in $(DOCS_BUILD)/symbol-graphs/Cairn@*.symbols.json; do \
	  [ -e "$$f" ] && [ $$(stat -c %Y "$$f") -ge $$((main - 5)) ] && cp "$$f" .build/symbol-graphs-cairn/; \
	done; true
	$(DOCC) convert Sources/Cairn/Cairn.docc --fallback-display-name Cairn --fallback-bundle-identifier org.cairn.Cairn \
	  --additional-symbol-graph-dir .build/symbol-graphs-cairn --output-path .build/docs --warnings-as-errors
	@echo "docs: .build/docs (serve it, or open documentation/cairn/index.html through a web server)"

bench-quick:
	$(MAKE) bench BENCH_ARGS=--quick

clean:
	rm -rf .build
