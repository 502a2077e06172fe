# mcp-lazy: `make`, `make check`, `make bench`, `make install`, `make demo`, `make clean`.
VERSION := 0.1.0

DESTDIR ?=
# Who installs: a packager (DESTDIR: files only), root (system and user units, then the socket group
# through systemd-sysusers and a daemon-reload), or a user without root (binaries under ~/.local, user
# units in ~/.local/share/systemd/user, nothing system-wide).
INSTALL_MODE ?= $(if $(DESTDIR),package,$(if $(filter 0,$(shell id -u)),system,user))
ifeq ($(INSTALL_MODE),user)
PREFIX ?= $(HOME)/.local
USERUNITDIR ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/systemd/user
endif
PREFIX ?= /usr/local
override PREFIX := $(patsubst ~%,$(HOME)%,$(PREFIX))
BINDIR ?= $(PREFIX)/bin
PKG_CONFIG ?= pkg-config
PKGS := libcjson libsystemd yaml-0.1
SYSTEMUNITDIR ?= $(shell $(PKG_CONFIG) --variable=systemdsystemunitdir systemd 2>/dev/null || echo /lib/systemd/system)
USERUNITDIR ?= $(shell $(PKG_CONFIG) --variable=systemduserunitdir systemd 2>/dev/null || echo /usr/lib/systemd/user)
SYSUSERSDIR ?= $(shell $(PKG_CONFIG) --variable=sysusersdir systemd 2>/dev/null || echo /usr/lib/sysusers.d)
DOCDIR ?= $(PREFIX)/share/doc/mcp-lazy
MANDIR ?= $(PREFIX)/share/man
# Who may connect to a system manager's socket: members of this group (a user manager's: only its user).
SOCKET_GROUP ?= mcp-lazy

CC ?= cc
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wmissing-prototypes -Wstrict-prototypes
DEP_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(PKGS))
DEP_LIBS = $(shell $(PKG_CONFIG) --libs $(PKGS)) -lm
ALL_CFLAGS = -std=gnu11 $(WARN) $(CFLAGS) -ffunction-sections -fdata-sections -D_GNU_SOURCE -DMCP_LAZY_VERSION='"$(VERSION)"' -DMCP_LAZY_SOCKET_GROUP='"$(SOCKET_GROUP)"' -Icommon $(DEP_CFLAGS) -MMD -MP
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# Linking: the toolchain's hardening stays as it is (PIE, RELRO); LDFLAGS is a packager's (dpkg-buildflags'
# -z now with hardening=+all: resolving every symbol at start cost 0.1-0.2 ms of CPU per frontend start
# here, and saved no memory, so it is not on by default). --gc-sections drops what a program never calls
# (the shim links common code only the frontend uses: 30 KiB of text).
LINK_FLAGS = $(CFLAGS) $(LDFLAGS) -Wl,--gc-sections

COMMON_SRC := $(wildcard common/*.c)
FRONTEND_SRC := $(wildcard frontend/*.c)
SHIMD_SRC := $(wildcard shimd/*.c)
# The code a frontend runs to start, answer and forward, linked first so that it sits together: a start
# then faults in two or three of the 64 KiB fault-around windows of its text, not all of them (bench
# section 1: 0.27 -> 0.19 MiB of RSS for the program at 100 tools).
FRONTEND_FIRST := $(filter $(FRONTEND_SRC) $(COMMON_SRC),frontend/main.c frontend/session.c frontend/answers.c \
	frontend/modern.c frontend/upstream.c frontend/activation.c common/message.c common/channel.c common/framing.c \
	common/jsonrpc.c common/ids.c common/era.c common/hashmap.c common/log.c common/manifest-cache.c common/event-util.c)
FRONTEND_LINK_ORDER := $(FRONTEND_FIRST) $(filter-out $(FRONTEND_FIRST),$(FRONTEND_SRC) $(COMMON_SRC))
UNIT_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test-*.c))

B := build
S := build/san

.PHONY: all check check-unit check-integration bench soak install uninstall clean deps demo fuzz check-fuzz

all: $(B)/mcp-lazy $(B)/mcp-lazy-shimd $(B)/hot-path.checked

# $(call objs,BUILDDIR,SOURCES)
objs = $(patsubst %.c,$(1)/%.o,$(2))

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(S)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -O1 -c $< -o $@

# The code a relayed message runs (frontend and shim: read, scan, route, map ids, write), placed
# together ahead of the rest of .text by a generated linker script (with -ffunction-sections each
# function has a section of its own). A process woken after a slow backend (node) finds its code out
# of the caches and the TLB: what costs it then is the lines and the pages it touches, and a page
# costs about as much as 20 lines (a page walk; 100 ns here, tests/bench's machine). Per loop wakeup
# (valgrind lackey): code pages 42-45 -> 37-38 in the frontend, 49-55 -> 40-43 in the shim (a socat
# relay: 15). The list is what `cd tests && node bench/hot-path.mjs` prints (valgrind's lackey over
# 300 warm calls: our functions run per message, in the order they first ran); run it again when the
# path changes. A name that is gone only stops being placed: the build warns (hot-path.checked below).
# HOT_PATH_ESCAPED is added by hand: a node backend's answer carries its JSON as text with every quote
# escaped, and the scan takes such a string out of line (the C backend's plain "ok" never does): it sits
# with the scan. mcp_lazy_hot_path_start/_end mark the section: each wakeup prefetches a line of each of
# its pages (common/prefetch.c).
HOT_PATH_ESCAPED := scan_string_slow
HOT_PATH := on_in prefetch_wakeup message_prefetch channel_dispatch_lines line_buffer_next channel_read \
	line_buffer_commit channel_emit on_upconn upconn_handle_line message_parse_envelope scan_text scan_value \
	$(HOT_PATH_ESCAPED) ids_rules_of check_id_lengths session_complete hashmap_remove_hashed upconn_release \
	pending_recycle message_unref session_send_text channel_send channel_sendv channel_backed_up on_client \
	session_handle_line message_is_batch ids_method_kind_mismatch handle_message message_has_envelope \
	handle_tools_call route_to routable hashmap_size modern_request hashmap_hash_len hashmap_put_hashed \
	session_upstream upstream_name upstream_forward client_handle_line client_handle_message \
	mrtr_request_refused era_envelope_parse instance_submit channel_write_closed deliver idmap_put front_place \
	track_subscription ids_translate_buf ids_splices map_to_backend id_integer_format message_splice_buf \
	route_send channel_sent_bytes shim_calls_changed instance_in_flight idmap_size idle_update status_arm \
	line_buffer_pending on_backend instance_handle_backend_line idmap_get ids_translate_send map_to_client \
	client_sendv_pieces client_sendv client_overflowed channel_queued client_check_peer_queued route_remove \
	idmap_remove route_free
# HOT_PATH_ALIGNED start a 64-byte line wherever the functions before them end: scan_value, the scan's
# loop, runs ~50 of its lines every wakeup, and which of them depends on where it starts (lackey, per
# wakeup, server-memory read_graph: 4-8 lines more at 48 bytes past a line than at one; a change to any
# function before it moved it there).
HOT_PATH_ALIGNED := scan_value
$(B)/hot-path.ld: Makefile
	@mkdir -p $(dir $@)
	@{ echo 'SECTIONS { .text.hot_path : { mcp_lazy_hot_path_start = .;'; \
	  for f in $(HOT_PATH); do case " $(HOT_PATH_ALIGNED) " in *" $$f "*) echo '. = ALIGN(64);';; esac; \
		echo "*(.text.$$f .text.$$f.*)"; done; \
	  echo 'mcp_lazy_hot_path_end = .; } } INSERT BEFORE .text;'; \
	  echo 'SECTIONS { mcp_lazy_warm : ALIGN(64) { *(mcp_lazy_warm) } mcp_lazy_hot : ALIGN(64) { *(mcp_lazy_hot) }'; \
	  echo 'mcp_lazy_read : ALIGN(64) { *(.bss.mcp_lazy_read) } } INSERT AFTER .data;'; } > $@

# A name in HOT_PATH that no object of either program defines (renamed, gone, or inlined wherever it is
# called) is no longer placed, and nothing else would tell: the build warns, naming it.
$(B)/hot-path.checked: $(call objs,$(B),$(FRONTEND_SRC) $(SHIMD_SRC) $(COMMON_SRC)) Makefile
	@readelf -SW $(filter %.o,$^) | sed -n 's/.* \.text\.\([A-Za-z0-9_]*\).*/\1/p' | sort -u > $@.defined
	@gone=$$(for f in $(HOT_PATH); do grep -qxF "$$f" $@.defined || echo "$$f"; done); \
	if [ -n "$$gone" ]; then echo "warning: Makefile HOT_PATH names functions no object defines:" $$gone \
		"(regenerate the list: cd tests && node bench/hot-path.mjs)" >&2; fi
	@rm -f $@.defined && touch $@

$(B)/mcp-lazy: $(call objs,$(B),$(FRONTEND_LINK_ORDER)) $(B)/hot-path.ld
	$(CC) $(LINK_FLAGS) -Wl,-T,$(B)/hot-path.ld -o $@ $(filter %.o,$^) $(DEP_LIBS)

# The shim's objects that a relayed message runs, linked first, as the frontend's: their read-only data (the
# method names compared per message, the scan's tables) then sits on fewer pages, not between the cold
# objects' log strings (lackey, per loop wakeup: the shim's own data 29/27 lines on 6/5 pages -> 27/25 on 4/4).
SHIMD_FIRST := $(filter $(SHIMD_SRC) $(COMMON_SRC),shimd/client.c shimd/instance.c shimd/main.c shimd/mrtr.c shimd/bridge.c \
	shimd/subscribe.c common/message.c common/channel.c common/framing.c common/ids.c common/hashmap.c common/era.c)
SHIMD_LINK_ORDER := $(SHIMD_FIRST) $(filter-out $(SHIMD_FIRST),$(SHIMD_SRC) $(COMMON_SRC))
$(B)/mcp-lazy-shimd: $(call objs,$(B),$(SHIMD_LINK_ORDER)) $(B)/hot-path.ld
	$(CC) $(LINK_FLAGS) -Wl,-T,$(B)/hot-path.ld -o $@ $(filter %.o,$^) $(DEP_LIBS)

$(S)/mcp-lazy: $(call objs,$(S),$(FRONTEND_SRC) $(COMMON_SRC))
	$(CC) $(SAN) -o $@ $^ $(DEP_LIBS)

$(S)/mcp-lazy-shimd: $(call objs,$(S),$(SHIMD_SRC) $(COMMON_SRC))
	$(CC) $(SAN) -o $@ $^ $(DEP_LIBS)

$(B)/tests/%: tests/unit/%.c $(call objs,$(B),$(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $(filter %.c %.o,$^) $(TEST_LDFLAGS) $(DEP_LIBS)

$(S)/tests/%: tests/unit/%.c $(call objs,$(S),$(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -Itests/unit -o $@ $(filter %.c %.o,$^) $(TEST_LDFLAGS) $(DEP_LIBS)

# test-secrets drives frontend/secrets.c and secrets-dir.c, which need nothing else of the frontend.
$(B)/tests/test-secrets: $(B)/frontend/secrets.o $(B)/frontend/secrets-dir.o
$(S)/tests/test-secrets: $(S)/frontend/secrets.o $(S)/frontend/secrets-dir.o
# test-secrets swaps the secrets directory under secrets_split() from readdir(), and fails fchmod() and renameat().
$(B)/tests/test-secrets $(S)/tests/test-secrets: TEST_LDFLAGS := -Wl,--wrap=readdir,--wrap=fchmod,--wrap=renameat

# test-hashmap fails allocations on purpose: the calloc() calls of what it links go to its wrapper.
$(B)/tests/test-hashmap $(S)/tests/test-hashmap: TEST_LDFLAGS := -Wl,--wrap=calloc,--wrap=aligned_alloc
# test-message-nul fails the message layer's malloc() calls on purpose.
$(B)/tests/test-message-nul $(S)/tests/test-message-nul: TEST_LDFLAGS := -Wl,--wrap=malloc
# test-envfile swaps a directory under envfile_write() from fchmod().
$(B)/tests/test-envfile $(S)/tests/test-envfile: TEST_LDFLAGS := -Wl,--wrap=fchmod
# test-channel-cache counts the chunks channel.c allocates.
$(B)/tests/test-channel-cache $(S)/tests/test-channel-cache: TEST_LDFLAGS := -Wl,--wrap=malloc
# test-channel-read fails the allocation that keeps an unfinished line.
$(B)/tests/test-channel-read $(S)/tests/test-channel-read: TEST_LDFLAGS := -Wl,--wrap=malloc

# $(call install_units,DIR,SOCKETMODE,GROUPLINE,SYSTEMLINES): SYSTEMLINES is a sed command for the lines
# marked @system@ (keep them for the system manager, drop them for the user manager).
define install_units
	mkdir -p $(DESTDIR)$(1)
	for u in units/mcp-lazy@.socket units/mcp-lazy@.service; do \
		sed -e 's|@bindir@|$(BINDIR)|g; s|@docdir@|$(DOCDIR)|g; s|@socketmode@|$(2)|g; s|^@socketgroup@$$|$(3)|; s|@socketgroupname@|$(SOCKET_GROUP)|g; $(4)' \
			$$u > $(DESTDIR)$(1)/$$(basename $$u) || exit 1; \
		chmod 644 $(DESTDIR)$(1)/$$(basename $$u); \
	done
endef

# Installs what the build and the tests need when it is missing (Debian packages, npm packages in tests/).
deps:
	@tests/install-deps

check: deps
	$(MAKE) all $(S)/mcp-lazy $(S)/mcp-lazy-shimd
	$(MAKE) check-unit
	$(MAKE) check-fuzz
	$(MAKE) check-integration

check-unit: $(addprefix $(B)/tests/,$(UNIT_TESTS)) $(addprefix $(S)/tests/,$(UNIT_TESTS))
	@set -e; for t in $^; do echo "== $$t"; (cd tests/unit && ../../$$t); done

# A test file that hangs fails after 20 minutes (node 20 times each file, newer ones each test) and
# the rest still run; a node without --test-timeout runs without it. TAP on stdout; at the end, on
# stderr, one line per failed test.
check-integration: all $(S)/mcp-lazy $(S)/mcp-lazy-shimd
	cd tests && MCP_LAZY_BUILD=$(CURDIR)/$(S) node --test --test-concurrency=1 \
		$$(node --help | grep -q -- --test-timeout && echo --test-timeout=1200000) \
		--test-reporter=tap --test-reporter-destination=stdout \
		--test-reporter=./integration/lib/failures-reporter.mjs --test-reporter-destination=stderr integration/

bench: deps all
	cd tests && MCP_LAZY_BUILD=$(CURDIR)/$(B) BENCH_QUICK=$(QUICK) node bench/bench.mjs

# The load and fault test of `make check` (tests/integration/load.test.mjs) for SOAK_SECONDS, with more
# sessions; not part of check. It prints the figures: calls, kills, failures, lost, duplicated, ...
SOAK_SECONDS ?= 300
SOAK_SESSIONS ?= 32
soak: deps all $(S)/mcp-lazy $(S)/mcp-lazy-shimd
	cd tests && LOAD_SECONDS=$(SOAK_SECONDS) LOAD_SESSIONS=$(SOAK_SESSIONS) MCP_LAZY_BUILD=$(CURDIR)/$(S) \
		node --test --test-timeout=$$(( ($(SOAK_SECONDS) + 300) * 1000 )) integration/load.test.mjs

demo: deps all
	cd tests && MCP_LAZY_BUILD=$(CURDIR)/$(B) node demo.mjs

install: all
	install -Dm755 $(B)/mcp-lazy $(DESTDIR)$(BINDIR)/mcp-lazy
	install -Dm755 $(B)/mcp-lazy-shimd $(DESTDIR)$(BINDIR)/mcp-lazy-shimd
	install -Dm644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -Dm644 man/mcp-lazy.1 $(DESTDIR)$(MANDIR)/man1/mcp-lazy.1
	install -Dm644 man/mcp-lazy-shimd.8 $(DESTDIR)$(MANDIR)/man8/mcp-lazy-shimd.8
	install -Dm644 man/mcp-lazy.manifest.5 $(DESTDIR)$(MANDIR)/man5/mcp-lazy.manifest.5
ifneq ($(INSTALL_MODE),user)
	install -Dm644 units/mcp-lazy.sysusers $(DESTDIR)$(SYSUSERSDIR)/mcp-lazy.conf
	$(call install_units,$(SYSTEMUNITDIR),0660,SocketGroup=$(SOCKET_GROUP),s|^@system@||)
endif
	$(call install_units,$(USERUNITDIR),0600,,/^@system@/d)
ifeq ($(INSTALL_MODE),system)
	@if command -v systemd-sysusers >/dev/null 2>&1; then \
		echo "systemd-sysusers $(SYSUSERSDIR)/mcp-lazy.conf"; systemd-sysusers $(SYSUSERSDIR)/mcp-lazy.conf; \
	else echo "make install: no systemd-sysusers: create the group $(SOCKET_GROUP) yourself" >&2; fi
	@if [ -d /run/systemd/system ]; then echo "systemctl daemon-reload"; systemctl daemon-reload; fi
endif
ifeq ($(INSTALL_MODE),user)
	@if [ -d /run/systemd/system ] && systemctl --user daemon-reload 2>/dev/null; then \
		echo "systemctl --user daemon-reload"; fi
endif

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/mcp-lazy $(DESTDIR)$(BINDIR)/mcp-lazy-shimd
	rm -f $(DESTDIR)$(DOCDIR)/README.md
	for d in $(SYSTEMUNITDIR) $(USERUNITDIR); do rm -f $(DESTDIR)$$d/mcp-lazy@.socket $(DESTDIR)$$d/mcp-lazy@.service; done
	rm -f $(DESTDIR)$(SYSUSERSDIR)/mcp-lazy.conf
	rm -f $(DESTDIR)$(MANDIR)/man1/mcp-lazy.1 $(DESTDIR)$(MANDIR)/man8/mcp-lazy-shimd.8 $(DESTDIR)$(MANDIR)/man5/mcp-lazy.manifest.5

clean:
	rm -rf build

-include $(shell find build -name '*.d' 2>/dev/null)

# ---- fuzzing (tests/fuzz) -------------------------------------------------------------------------
# `make check-fuzz` replays tests/fuzz/corpus/TARGET/ through each target built with $(CC) and $(SAN);
# `make fuzz` builds the libFuzzer binaries with clang and runs each for FUZZ_SECONDS. New inputs go to
# build/fuzz/corpus/TARGET/, crashers to build/fuzz/artifacts/TARGET/: keep one as
# tests/fuzz/corpus/TARGET/crash-WHAT once it is understood (the fuzzer is seeded without those: a known
# crasher would stop it at once). FUZZ_FLAGS='-fork=2 -ignore_crashes=1' keeps going past crashes.
FUZZ_TARGETS := framing jsonrpc manifest peek message shim frontend client-config answers channel
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_SAN := -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_FLAGS ?= -timeout=10 -rss_limit_mb=2048

.PHONY: check-fuzz

$(S)/fuzz/replay.o: tests/fuzz/replay.c tests/fuzz/fuzz.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -Itests/fuzz -c $< -o $@

# A fuzz target links its own file with the common code; one that drives more of a program names
# what it adds below (its include directory in FUZZ_INC, its objects as extra prerequisites).
$(S)/fuzz/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/fuzz.h $(S)/fuzz/replay.o $(call objs,$(S),$(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -Itests/fuzz $(FUZZ_INC) -o $@ $(filter %.c %.o,$^) $(DEP_LIBS)

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(subst fuzzer,fuzzer-no-link,$(FUZZ_SAN)) -O1 -c $< -o $@

$(B)/fuzz/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/fuzz.h $(call objs,$(B)/fuzz/obj,$(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_SAN) -O1 -Itests/fuzz $(FUZZ_INC) -o $@ $(filter %.c %.o,$^) $(DEP_LIBS)

# fuzz-shim drives the shim's own code (everything but main.c and reload.c, the loop's and the manifest's, and
# process.c, which it stands in for) with two sessions on one backend; subscribe.c with limits its inputs
# reach (fuzz-shim-subscribe.h).
FUZZ_SHIMD_SRC := $(filter-out shimd/main.c shimd/process.c shimd/subscribe.c shimd/reload.c,$(SHIMD_SRC))
$(S)/fuzz/fuzz-shim $(B)/fuzz/fuzz-shim: FUZZ_INC := -Ishimd
$(S)/fuzz/fuzz-shim: $(call objs,$(S),$(FUZZ_SHIMD_SRC)) $(S)/fuzz/shim-subscribe.o
$(B)/fuzz/fuzz-shim: $(call objs,$(B)/fuzz/obj,$(FUZZ_SHIMD_SRC)) $(B)/fuzz/shim-subscribe.o
$(S)/fuzz/shim-subscribe.o: shimd/subscribe.c tests/fuzz/fuzz-shim-subscribe.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN) -O1 -include tests/fuzz/fuzz-shim-subscribe.h -c $< -o $@
$(B)/fuzz/shim-subscribe.o: shimd/subscribe.c tests/fuzz/fuzz-shim-subscribe.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ALL_CFLAGS) $(subst fuzzer,fuzzer-no-link,$(FUZZ_SAN)) -O1 -include tests/fuzz/fuzz-shim-subscribe.h \
		-c $< -o $@

# fuzz-frontend likewise drives the frontend's own code (everything but main.c); fuzz-answers,
# prepared answers files, damaged or forged (frontend/answers.c, with what it prints from);
# fuzz-client-config, import's reading and rewriting of client configs (frontend/client-config.c).
FUZZ_FRONTEND_SRC := $(filter-out frontend/main.c,$(FRONTEND_SRC))
$(foreach t,frontend answers client-config,$(S)/fuzz/fuzz-$(t) $(B)/fuzz/fuzz-$(t)): FUZZ_INC := -Ifrontend
$(S)/fuzz/fuzz-frontend $(S)/fuzz/fuzz-answers: $(call objs,$(S),$(FUZZ_FRONTEND_SRC))
$(B)/fuzz/fuzz-frontend $(B)/fuzz/fuzz-answers: $(call objs,$(B)/fuzz/obj,$(FUZZ_FRONTEND_SRC))
$(S)/fuzz/fuzz-client-config: $(call objs,$(S),frontend/client-config.c)
$(B)/fuzz/fuzz-client-config: $(call objs,$(B)/fuzz/obj,frontend/client-config.c)

check-fuzz: $(addprefix $(S)/fuzz/fuzz-,$(FUZZ_TARGETS))
	@set -e; total=0; bad=0; for t in $(FUZZ_TARGETS); do \
		$(S)/fuzz/fuzz-$$t tests/fuzz/corpus/$$t > $(S)/fuzz/replay-$$t.log || true; \
		cat $(S)/fuzz/replay-$$t.log; \
		p=$$(sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$$/\1/p' $(S)/fuzz/replay-$$t.log); \
		f=$$(sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$$/\2/p' $(S)/fuzz/replay-$$t.log); \
		total=$$((total + $${p:-0} + $${f:-1})); bad=$$((bad + $${f:-1})); \
	done; \
	echo "fuzz-replay: $$((total - bad)) passed, $$bad failed"; test $$bad -eq 0

fuzz: $(addprefix $(B)/fuzz/fuzz-,$(FUZZ_TARGETS))
	@bad=; for t in $(FUZZ_TARGETS); do \
		rm -rf $(B)/fuzz/seeds/$$t; mkdir -p $(B)/fuzz/corpus/$$t $(B)/fuzz/artifacts/$$t $(B)/fuzz/seeds/$$t; \
		find tests/fuzz/corpus/$$t -maxdepth 1 -type f ! -name 'crash-*' -exec cp {} $(B)/fuzz/seeds/$$t/ \; ; \
		echo "== fuzz-$$t for $(FUZZ_SECONDS) s"; \
		dict=; test -f tests/fuzz/$$t.dict && dict=-dict=tests/fuzz/$$t.dict; \
		$(B)/fuzz/fuzz-$$t $(FUZZ_FLAGS) $$dict -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(B)/fuzz/artifacts/$$t/ $(B)/fuzz/corpus/$$t $(B)/fuzz/seeds/$$t || bad="$$bad $$t"; \
	done; \
	if [ -n "$$bad" ]; then echo "fuzz: crashes in:$$bad (see $(B)/fuzz/artifacts/)"; exit 1; fi
# `make fuzz-diff-message DIFF_BASE=REV` runs REV's message layer (common/message.c, its names prefixed
# old_) beside today's on the same inputs for FUZZ_SECONDS (tests/fuzz/diff-message.c): for a scanner
# made faster, whatever it accepts, refuses or notes must stay the same. Each side's Messages are read
# through its own message.h (tests/fuzz/diff-view.c, built against each), and each side's message.c
# calls its own id rules (common/ids.c, which reads a Message's spans).
DIFF_BASE ?= main
DIFF := $(B)/fuzz/diff
.PHONY: fuzz-diff-message
fuzz-diff-message: tests/fuzz/diff-message.c tests/fuzz/diff-view.c tests/fuzz/diff-view.h tests/fuzz/diff-old.h \
		$(call objs,$(B)/fuzz/obj,$(COMMON_SRC))
	@rm -rf $(DIFF)/old; mkdir -p $(DIFF)/old $(DIFF)/corpus $(DIFF)/artifacts
	git show $(DIFF_BASE):common/message.c > $(DIFF)/old/message.c
	git show $(DIFF_BASE):common/message.h > $(DIFF)/old/message.h
	git show $(DIFF_BASE):common/ids.c > $(DIFF)/old/ids.c
	git show $(DIFF_BASE):common/ids.h > $(DIFF)/old/ids.h
	for f in message ids; do \
		$(FUZZ_CC) $(ALL_CFLAGS) $(subst fuzzer,fuzzer-no-link,$(FUZZ_SAN)) -O1 -include tests/fuzz/diff-old.h \
			-c $(DIFF)/old/$$f.c -o $(DIFF)/old/$$f.o || exit 1; \
	done
	$(FUZZ_CC) -I$(DIFF)/old -Itests/fuzz $(ALL_CFLAGS) $(subst fuzzer,fuzzer-no-link,$(FUZZ_SAN)) -O1 \
		-include tests/fuzz/diff-old.h -c tests/fuzz/diff-view.c -o $(DIFF)/old/view.o
	$(FUZZ_CC) $(ALL_CFLAGS) $(FUZZ_SAN) -O1 -Itests/fuzz -o $(DIFF)/diff-message $< tests/fuzz/diff-view.c \
		$(DIFF)/old/message.o $(DIFF)/old/ids.o $(DIFF)/old/view.o $(call objs,$(B)/fuzz/obj,$(COMMON_SRC)) $(DEP_LIBS)
	$(DIFF)/diff-message $(FUZZ_FLAGS) -dict=tests/fuzz/jsonrpc.dict -max_total_time=$(FUZZ_SECONDS) \
		-print_final_stats=1 -artifact_prefix=$(DIFF)/artifacts/ $(DIFF)/corpus tests/fuzz/corpus/message
# ---- end of fuzzing --------------------------------------------------------------------------------
