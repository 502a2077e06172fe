/* The id map: SipHash against the paper's test vectors, and the map itself with many keys. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "tests.h"

/* Allocations that fail on purpose: this test is linked with -Wl,--wrap=calloc,--wrap=aligned_alloc
 * (Makefile), so every calloc() of the map's code comes here, and every aligned_alloc() (a map's header,
 * calloc_lines()). calloc_fail_in > 0 fails the call that many calls on (1: the next one); calloc_calls
 * counts them. */
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__real_aligned_alloc(size_t alignment, size_t size);
void *__wrap_aligned_alloc(size_t alignment, size_t size);
static unsigned calloc_fail_in, calloc_calls;

void *__wrap_calloc(size_t n, size_t size) {
        calloc_calls++;
        if (calloc_fail_in > 0 && --calloc_fail_in == 0)
                return NULL;
        return __real_calloc(n, size);
}

void *__wrap_aligned_alloc(size_t alignment, size_t size) {
        calloc_calls++;
        if (calloc_fail_in > 0 && --calloc_fail_in == 0)
                return NULL;
        return __real_aligned_alloc(alignment, size);
}

static bool value_is(const void *value, const void *userdata) {
        return value == userdata;
}

/* Ids first in, first out with 6,400 in flight (100 sessions x 64), some removed out of turn, checked
 * against a plain array after every step's removal and at the end by iterating: removing tombstones at
 * the end of a run must never cut a probe short. The string map gets the same on fewer keys. */
#define FIFO_IDS    60000
#define FIFO_WINDOW 6400

static void check_fifo(bool strings) {
        static bool in[FIFO_IDS + 1];
        Hashmap *h = strings ? hashmap_new() : NULL;
        IdMap *ids = strings ? NULL : idmap_new();
        uint32_t lcg = 12345;
        size_t live = 0, n_ids = strings ? FIFO_IDS / 4 : FIFO_IDS, window = strings ? 640 : FIFO_WINDOW;
        bool ok = true;
        char k[32];

        CHECK(h || ids);
        memset(in, 0, sizeof in);
        for (size_t id = 1; id <= n_ids; id++) {
                void *value = (void *) (uintptr_t) (id + 16);
                snprintf(k, sizeof k, "c%zu", id);
                ok = ok && (strings ? hashmap_put(h, k, value) : idmap_put(ids, (int64_t) id, value)) == 0;
                in[id] = true, live++;
                lcg = lcg * 1103515245u + 12345u;
                /* the oldest goes; one time in eight, a random one of those in flight too */
                size_t gone[2] = {id > window ? id - window : 0, (lcg >> 16) % 8 == 0 ? id - (lcg >> 8) % window : 0};
                for (unsigned g = 0; g < 2; g++) {
                        if (gone[g] == 0 || gone[g] > id)
                                continue;
                        snprintf(k, sizeof k, "c%zu", gone[g]);
                        void *was = strings ? hashmap_remove(h, k) : idmap_remove(ids, (int64_t) gone[g]);
                        ok = ok && was == (in[gone[g]] ? (void *) (uintptr_t) (gone[g] + 16) : NULL);
                        live -= in[gone[g]];
                        in[gone[g]] = false;
                }
                ok = ok && (strings ? hashmap_size(h) : idmap_size(ids)) == live;
                if (id % 97 != 0)
                        continue;
                for (size_t j = id > window + 8 ? id - window - 8 : 1; j <= id + 8 && j <= n_ids; j++) {
                        snprintf(k, sizeof k, "c%zu", j);
                        void *got = strings ? hashmap_get(h, k) : idmap_get(ids, (int64_t) j);
                        ok = ok && got == (in[j] ? (void *) (uintptr_t) (j + 16) : NULL);
                        /* a put finds a key present behind tombstones: one probe looks and places */
                        if (in[j] && j % 5 == 0)
                                ok = ok && (strings ? hashmap_put(h, k, (void *) 3)
                                                    : idmap_put(ids, (int64_t) j, (void *) 3)) == -EEXIST;
                }
        }
        CHECK(ok);
        /* Iterating while removing every other entry visits each entry once. */
        size_t state = 0, seen = 0, removed = 0;
        const char *key;
        int64_t id_key;
        void *v;
        while (strings ? hashmap_iterate(h, &state, &key, &v) : idmap_iterate(ids, &state, &id_key, &v)) {
                size_t id = (uintptr_t) v - 16;
                ok = ok && id <= n_ids && in[id];
                in[id] = false, seen++;
                if (seen % 2 == 0) {
                        ok = ok && (strings ? hashmap_remove(h, key) : idmap_remove(ids, id_key)) == v;
                        removed++;
                }
        }
        CHECK(ok && seen == live);
        CHECK((strings ? hashmap_size(h) : idmap_size(ids)) == live - removed);
        hashmap_free(h);
        idmap_free(ids);
}

/* 4,000 calls held in flight (a slow tool, one uid's limit) while 100,000 more come and go first in,
 * first out, 64 at a time: the held ids must not make the others' probes long. When an id was its own
 * bucket, the held ids were a run of 4,000 buckets that every id behind them queued after once the
 * counter came round the table, and every put, get and remove walked up to 4,000 entries (max_dist
 * reached 4,000). Checked after every step: the farthest any entry sits from its bucket, which bounds
 * every probe. The side table's spread is random (keyed per table), so the bound is one no random
 * spread comes near: over 13,000 runs the farthest was 53 (typically 13-31; the chance of a run of
 * linear probing in a table at most half full falls exponentially with its length), while the
 * failures it is there for sat 989 (check_chosen()) and 4,000 buckets away. */
#define HELD_MAX_DIST 256
static void check_held(void) {
        IdMap *ids = idmap_new();
        int64_t next = 1, oldest;
        size_t worst = 0;
        bool ok = true;

        CHECK(ids);
        for (; next <= 4000; next++)
                ok = ok && idmap_put(ids, next, (void *) (uintptr_t) (next + 16)) == 0;
        for (oldest = next; next < oldest + 64; next++)
                ok = ok && idmap_put(ids, next, (void *) (uintptr_t) (next + 16)) == 0;
        for (unsigned i = 0; i < 100000; i++, oldest++, next++) {
                ok = ok && idmap_remove(ids, oldest) == (void *) (uintptr_t) (oldest + 16);
                ok = ok && idmap_put(ids, next, (void *) (uintptr_t) (next + 16)) == 0;
                if (idmap_max_dist(ids) > worst)
                        worst = idmap_max_dist(ids);
        }
        CHECK(ok);
        CHECK(idmap_size(ids) == 4000 + 64);
        for (int64_t id = 1; id <= 4000; id++)
                ok = ok && idmap_get(ids, id) == (void *) (uintptr_t) (id + 16);
        for (int64_t id = oldest; id < next; id++)
                ok = ok && idmap_get(ids, id) == (void *) (uintptr_t) (id + 16);
        CHECK(ok && !idmap_get(ids, oldest - 1) && !idmap_get(ids, 4001) && !idmap_get(ids, next));
        if (worst >= HELD_MAX_DIST)
                fprintf(stderr, "held ids: an entry sat %zu buckets past its own\n", worst);
        CHECK(worst < HELD_MAX_DIST);
        idmap_free(ids);
}

/* The ids an attacker would hold: a session can follow the shim's counter (a new backend counts from
 * 1), and a client that picks which of its calls to hold (a tool whose duration its arguments set)
 * holds exactly those whose bucket in the side table it can compute. With the public Fibonacci
 * multiplier that was the top bits of id * 0x9E3779B97F4A7C15: holding the ids whose product falls in
 * the first 1/64 of the range packed 1,000 held ids into buckets 0..63 of the side table's 4,096, one
 * run, and the farthest of them sat 989 past its bucket (every put's look-up there walked the run).
 * Checked after every step while 64 other calls come and go, until every held id has moved to the
 * side table: the farthest entry must stay near its bucket. */
static void check_chosen(void) {
        const uint64_t fibonacci = 0x9E3779B97F4A7C15ULL, chosen = UINT64_MAX / 64;
        IdMap *ids = idmap_new();
        int64_t fifo[64], next = 1, held[1000];
        size_t n_held = 0, head = 0, worst = 0;
        bool ok = true;

        CHECK(ids);
        for (unsigned i = 0; i < 64; i++, next++) {
                fifo[i] = next;
                ok = ok && idmap_put(ids, next, (void *) (uintptr_t) (next + 16)) == 0;
        }
        /* Every call goes out; the chosen ones are held, the others answered first in, first out. */
        for (; next < 200000; next++) {
                ok = ok && idmap_put(ids, next, (void *) (uintptr_t) (next + 16)) == 0;
                if (n_held < 1000 && (uint64_t) next * fibonacci < chosen) {
                        held[n_held++] = next;
                        continue;
                }
                ok = ok && idmap_remove(ids, fifo[head]) == (void *) (uintptr_t) (fifo[head] + 16);
                fifo[head] = next;
                head = (head + 1) % 64;
                if (idmap_max_dist(ids) > worst)
                        worst = idmap_max_dist(ids);
        }
        CHECK(ok && n_held == 1000 && idmap_size(ids) == 1000 + 64);
        for (size_t i = 0; i < n_held; i++)
                ok = ok && idmap_get(ids, held[i]) == (void *) (uintptr_t) (held[i] + 16);
        for (unsigned i = 0; i < 64; i++)
                ok = ok && idmap_get(ids, fifo[i]) == (void *) (uintptr_t) (fifo[i] + 16);
        CHECK(ok && !idmap_get(ids, held[0] + 1) && !idmap_get(ids, next));
        if (worst >= HELD_MAX_DIST)
                fprintf(stderr, "chosen held ids: an entry sat %zu buckets past its own\n", worst);
        CHECK(worst < HELD_MAX_DIST);
        idmap_free(ids);
}

/* The map holds exactly the ids marked in `in` (with value id + 16): each found, the size right, and
 * iterating visits each once. */
static bool idmap_holds(IdMap *ids, const bool *in, size_t n_ids) {
        size_t live = 0, seen = 0, state = 0;
        int64_t key;
        void *v;
        bool ok = true;

        for (size_t id = 1; id < n_ids; id++) {
                live += in[id];
                ok = ok && idmap_get(ids, (int64_t) id) == (in[id] ? (void *) (uintptr_t) (id + 16) : NULL);
        }
        while (ok && idmap_iterate(ids, &state, &key, &v))
                ok = key > 0 && (size_t) key < n_ids && in[key] && v == (void *) (uintptr_t) (key + 16) && ++seen;
        return ok && seen == live && idmap_size(ids) == live;
}

/* An allocation that fails in the middle of a rebuild (the front grown or shrunk with held ids in the
 * side table, the side table made, grown, or rebuilt of its tombstones) leaves the map as it was: the
 * put returns -ENOMEM, every id still resolves, none is added or lost. Ids come and go 64 at a time;
 * every 16th of the first 12,000 is held for 6,000 more (past the front's 2,048 buckets, they move to
 * the side table, and leave tombstones there); a burst of 2,000 in flight grows the front, and its end
 * shrinks it. At every put
 * that allocates, each of its allocations is made to fail in turn (the 1st, then the 2nd...), the map
 * checked after each failure; then the put is done for real. */
#define ALLOC_IDS 20000

static bool alloc_held(int64_t id) {
        return id <= 12000 && id % 16 == 0;
}

static void check_alloc_failure(void) {
        static bool in[ALLOC_IDS];
        IdMap *ids;
        size_t failed_late = 0, puts_allocating = 0, most = 0;
        bool ok = true;

        calloc_fail_in = 1;
        CHECK(!idmap_new());
        ids = idmap_new();
        CHECK(ids);
        memset(in, 0, sizeof in);
        for (int64_t id = 1, oldest = 1; ok && id < ALLOC_IDS; id++) {
                int64_t window = id >= 15000 && id < 17000 ? 2000 : 64;
                unsigned n = 1;
                int r;

                for (;; n++) {
                        calloc_calls = 0;
                        calloc_fail_in = n;
                        r = idmap_put(ids, id, (void *) (uintptr_t) (id + 16));
                        calloc_fail_in = 0;
                        if (r != -ENOMEM || n > 64)
                                break;
                        /* The nth allocation failed, and the put stopped there. */
                        ok = ok && calloc_calls == n && idmap_holds(ids, in, ALLOC_IDS);
                        failed_late += n > 1;
                }
                ok = ok && r == 0;
                puts_allocating += n > 1;
                most = n - 1 > most ? n - 1 : most;
                in[id] = true;
                for (; id - oldest >= window; oldest++)
                        if (in[oldest] && !alloc_held(oldest)) {
                                ok = ok && idmap_remove(ids, oldest) == (void *) (uintptr_t) (oldest + 16);
                                in[oldest] = false;
                        }
                if (id > 6000 && alloc_held(id - 6000)) {
                        ok = ok && idmap_remove(ids, id - 6000) == (void *) (uintptr_t) (id - 6000 + 16);
                        in[id - 6000] = false;
                }
        }
        CHECK(ok);
        CHECK(idmap_holds(ids, in, ALLOC_IDS));
        /* It went through what it is for (15 puts allocate; 10 failures come after an allocation that
         * succeeded; a put that grows the front with ids in the side table allocates a new front, a new
         * side table, and that table's buckets as it grows: 4 or 5). */
        CHECK(puts_allocating >= 12 && failed_late >= 8 && most >= 4);
        idmap_free(ids);
}

int main(void) {
        uint8_t key[16], in[64];
        char k[32];

        for (unsigned i = 0; i < 16; i++)
                key[i] = (uint8_t) i;
        for (unsigned i = 0; i < 64; i++)
                in[i] = (uint8_t) i;
        /* SipHash-2-4 of 00 01 02 ... (length n) under the key 00 01 ... 0f (the paper's appendix). */
        CHECK(siphash(key, in, 0, 2, 4) == 0x726fdb47dd0e0e31ULL);
        CHECK(siphash(key, in, 7, 2, 4) == 0xab0200f58b01d137ULL);
        CHECK(siphash(key, in, 8, 2, 4) == 0x93f5f5799a932462ULL);
        CHECK(siphash(key, in, 15, 2, 4) == 0xa129ca6149be45e5ULL);
        CHECK(siphash(key, in, 63, 2, 4) == 0x958a324ceb064572ULL);
        /* The key changes every hash: a peer that cannot read the key cannot aim at one bucket. */
        uint8_t other[16] = {1};
        CHECK(siphash(key, "mcp-lazy-upcall:1", 17, 1, 3) != siphash(other, "mcp-lazy-upcall:1", 17, 1, 3));
        CHECK(siphash(key, "a", 1, 1, 3) == siphash(key, "a", 1, 1, 3));

        /* The map: put, get, remove, iterate, across resizes and tombstones. */
        Hashmap *h = hashmap_new();
        CHECK(h);
        for (unsigned i = 0; i < 5000; i++) {
                snprintf(k, sizeof k, "%u", i);
                CHECK(hashmap_put(h, k, (void *) (uintptr_t) (i + 1)) == 0);
        }
        CHECK(hashmap_put(h, "17", (void *) 1) == -EEXIST);
        for (unsigned i = 0; i < 5000; i += 2) {
                snprintf(k, sizeof k, "%u", i);
                CHECK(hashmap_remove(h, k) == (void *) (uintptr_t) (i + 1));
        }
        CHECK(hashmap_size(h) == 2500);
        bool all = true;
        for (unsigned i = 0; i < 5000; i++) {
                snprintf(k, sizeof k, "%u", i);
                void *v = hashmap_get(h, k);
                all = all && v == (i % 2 ? (void *) (uintptr_t) (i + 1) : NULL);
        }
        CHECK(all);
        size_t state = 0, n = 0;
        const char *key_text;
        void *v;
        while (hashmap_iterate(h, &state, &key_text, &v))
                n++;
        CHECK(n == 2500);
        /* Removed only where the value matches, in one look-up: else the entry stays. */
        CHECK(!hashmap_remove_if(h, "1", value_is, (void *) 3) && hashmap_get(h, "1") == (void *) 2);
        CHECK(hashmap_remove_if(h, "1", value_is, (void *) 2) == (void *) 2 && !hashmap_get(h, "1"));
        CHECK(!hashmap_remove_if(h, "1", value_is, (void *) 2) && !hashmap_remove_if(h, "4", value_is, (void *) 5));
        CHECK(hashmap_size(h) == 2499);
        hashmap_free(h);

        /* A borrowed key put and removed with the hash its owner keeps; the hash is the map's. */
        h = hashmap_new_borrowed();
        CHECK(h);
        const char *borrowed = "mcp-lazy-route:1";
        uint64_t hash = hashmap_hash(borrowed);
        CHECK(hash == hashmap_hash("mcp-lazy-route:1") && hash != hashmap_hash("mcp-lazy-route:2"));
        CHECK(hashmap_hash_len("mcp-lazy-route:12", 16) == hash && hashmap_hash_len("", 0) == hashmap_hash(""));
        CHECK(hashmap_put_hashed(h, borrowed, hash, (void *) 5) == 0);
        CHECK(hashmap_put(h, "mcp-lazy-route:1", (void *) 6) == -EEXIST);
        CHECK(hashmap_put_hashed(h, borrowed, hash, (void *) 6) == -EEXIST);
        CHECK(hashmap_get(h, "mcp-lazy-route:1") == (void *) 5);
        CHECK(hashmap_remove_hashed(h, borrowed, hash) == (void *) 5 && hashmap_size(h) == 0);
        CHECK(!hashmap_remove_hashed(h, borrowed, hash) && !hashmap_get(h, borrowed));
        hashmap_free(h);

        /* The id map: sequential ids in flight while older ones go (tombstones, resizes), negative ids,
         * and lookups of ids never put. */
        IdMap *ids = idmap_new();
        CHECK(ids);
        bool ok = true;
        for (int64_t id = 1; id <= 20000; id++) {
                ok = ok && idmap_put(ids, id, (void *) (uintptr_t) (id + 16)) == 0; /* 1 is no value */
                if (id > 64)
                        ok = ok && idmap_remove(ids, id - 64) == (void *) (uintptr_t) (id - 64 + 16);
        }
        CHECK(ok);
        CHECK(idmap_size(ids) == 64);
        CHECK(idmap_put(ids, 20000, (void *) 2) == -EEXIST);
        CHECK(idmap_put(ids, 5, NULL) == -EINVAL);
        CHECK(idmap_put(ids, 9, (void *) 1) == 0 && idmap_remove(ids, 9) == (void *) 1); /* any value but NULL */
        CHECK(idmap_get(ids, 19937) == (void *) (uintptr_t) (19937 + 16) && !idmap_get(ids, 19936) &&
              !idmap_get(ids, -3));
        CHECK(idmap_put(ids, -100, (void *) 7) == 0 && idmap_get(ids, -100) == (void *) 7);
        CHECK(idmap_put(ids, INT64_MIN, (void *) 8) == 0 && idmap_get(ids, INT64_MIN) == (void *) 8);
        CHECK(!idmap_remove(ids, 12345));
        state = 0, n = 0;
        int64_t id_key, sum = 0;
        while (idmap_iterate(ids, &state, &id_key, &v)) {
                n++;
                if (id_key > 0)
                        sum += id_key;
                if (id_key == -100)
                        CHECK(idmap_remove(ids, id_key) == (void *) 7); /* removing the current one */
        }
        CHECK(n == 66);
        CHECK(sum == (19937 + 20000) * 64 / 2);
        CHECK(idmap_size(ids) == 65 && !idmap_get(ids, -100));
        idmap_free(ids);

        /* Ids in order: one that stays in flight while the others come and go (a slow call) is met
         * again and again by the ids after it, which then sit past their buckets; all stay found, and so
         * do none of those gone. Rebuilds on the way shrink the table to what is in flight (a burst of
         * 6,400, then 64 again). */
        ids = idmap_new();
        CHECK(ids);
        ok = idmap_put(ids, 1, (void *) 1) == 0;
        for (int64_t id = 2, oldest = 2; id <= 100000; id++) {
                int64_t window = id >= 30000 && id < 40000 ? 6400 : 64;
                ok = ok && idmap_put(ids, id, (void *) (uintptr_t) (id + 16)) == 0;
                for (; id - oldest >= window; oldest++)
                        ok = ok && idmap_remove(ids, oldest) == (void *) (uintptr_t) (oldest + 16);
                ok = ok && idmap_get(ids, 1) == (void *) 1 && idmap_get(ids, id) == (void *) (uintptr_t) (id + 16) &&
                     idmap_get(ids, oldest) == (void *) (uintptr_t) (oldest + 16) &&
                     (oldest == 2 || !idmap_get(ids, oldest - 1)) && !idmap_get(ids, id + 1);
        }
        CHECK(ok);
        CHECK(idmap_size(ids) == 64 + 1);
        ok = true;
        for (int64_t id = 2; id <= 100000; id++)
                ok = ok && (idmap_get(ids, id) != NULL) == (id > 100000 - 64);
        CHECK(ok);
        CHECK(idmap_remove(ids, 1) == (void *) 1 && !idmap_get(ids, 1) && idmap_size(ids) == 64);
        idmap_free(ids);

        /* Maps held in their owner (a shim's Client, its Instance): empty with no allocation, the same
         * puts, removes and growth, and done frees what they hold (AddressSanitizer sees a leak or a
         * use after free). */
        struct {
                int before;
                Hashmap pending;
                IdMap routes;
                int after;
        } owner = {.before = 1, .after = 2};
        hashmap_init_borrowed(&owner.pending);
        idmap_init(&owner.routes);
        CHECK(hashmap_size(&owner.pending) == 0 && !hashmap_get(&owner.pending, "1") && idmap_size(&owner.routes) == 0 &&
              !idmap_get(&owner.routes, 1));
        static char keys[300][8];
        ok = true;
        for (int i = 0; i < 300; i++) {
                snprintf(keys[i], sizeof keys[i], "%d", i);
                ok = ok && hashmap_put(&owner.pending, keys[i], (void *) (uintptr_t) (i + 16)) == 0 &&
                     idmap_put(&owner.routes, i + 1, (void *) (uintptr_t) (i + 16)) == 0;
        }
        CHECK(ok && hashmap_size(&owner.pending) == 300 && idmap_size(&owner.routes) == 300);
        CHECK(hashmap_get(&owner.pending, "299") == (void *) (uintptr_t) (299 + 16) &&
              hashmap_remove(&owner.pending, "7") == (void *) (uintptr_t) (7 + 16) &&
              idmap_remove(&owner.routes, 8) == (void *) (uintptr_t) (7 + 16));
        hashmap_done(&owner.pending);
        idmap_done(&owner.routes);
        CHECK(hashmap_size(&owner.pending) == 0 && !hashmap_get(&owner.pending, "299") &&
              idmap_size(&owner.routes) == 0 && !idmap_get(&owner.routes, 300));
        CHECK(hashmap_put(&owner.pending, keys[0], (void *) 16) == 0 && hashmap_get(&owner.pending, "0") == (void *) 16);
        hashmap_done(&owner.pending);
        CHECK(owner.before == 1 && owner.after == 2);

        check_fifo(false);
        check_fifo(true);
        check_held();
        check_chosen();
        check_alloc_failure();
        return tests_finish("test-hashmap");
}
