/* Open-addressing hash map with tombstones, keyed SipHash: small, and safe on ids a peer chooses; the
 * same table keyed by the process's own 64-bit ids (IdMap). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <sys/random.h>

#include "hashmap.h"

#define TOMBSTONE ((char *) 1)

typedef struct Entry {
        char *key;
        void *value;
        uint64_t hash; /* of key (an IdMap's: the id): probes compare it before the key, and a resize reuses it */
} Entry;

struct Hashmap {
        Entry *entries;
        size_t size, used, n_buckets; /* used counts tombstones too */
        bool borrowed;                /* the keys are the caller's (hashmap_new_borrowed()) */
        bool ids;                     /* an IdMap's: every key is ID_KEY, the hash is the id */
};

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static inline void sip_round(uint64_t v[4]) {
        v[0] += v[1], v[1] = ROTL(v[1], 13), v[1] ^= v[0], v[0] = ROTL(v[0], 32);
        v[2] += v[3], v[3] = ROTL(v[3], 16), v[3] ^= v[2];
        v[0] += v[3], v[3] = ROTL(v[3], 21), v[3] ^= v[0];
        v[2] += v[1], v[1] = ROTL(v[1], 17), v[1] ^= v[2], v[2] = ROTL(v[2], 32);
}

static inline uint64_t load_le64(const uint8_t *p) {
        uint64_t m;
        memcpy(&m, p, sizeof m);
        return le64toh(m);
}

/* SipHash-c-d (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012), written from the
 * paper's description: the state initialised from the 128-bit key (k0, k1: its two little-endian
 * halves), each little-endian 64-bit word of the message (the last one padded with the length's low
 * byte on top) mixed in with c rounds, then d rounds after 0xff is XORed into v2. */
static inline uint64_t siphash_words(uint64_t k0, uint64_t k1, const void *data, size_t len, unsigned c_rounds,
                                     unsigned d_rounds) {
        const uint8_t *p = data, *end = p + (len & ~(size_t) 7);
        uint64_t m, b = (uint64_t) len << 56;
        uint64_t v[4] = {k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
                         k1 ^ 0x7465646279746573ULL};

        for (; p < end; p += 8) {
                m = load_le64(p);
                v[3] ^= m;
                for (unsigned r = 0; r < c_rounds; r++)
                        sip_round(v);
                v[0] ^= m;
        }
        for (size_t i = 0; i < (len & 7); i++)
                b |= (uint64_t) p[i] << (8 * i);
        v[3] ^= b;
        for (unsigned r = 0; r < c_rounds; r++)
                sip_round(v);
        v[0] ^= b;
        v[2] ^= 0xff;
        for (unsigned r = 0; r < d_rounds; r++)
                sip_round(v);
        return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t siphash(const uint8_t key[16], const void *data, size_t len, unsigned c_rounds, unsigned d_rounds) {
        return siphash_words(load_le64(key), load_le64(key + 8), data, len, c_rounds, d_rounds);
}

/* The keys are a peer's ids: with a fixed hash function a peer could pick ids that all land in one
 * probe chain (hash flooding). A key drawn once per process from getrandom() makes where an id lands
 * unpredictable to peers. */
static uint64_t hash_k0, hash_k1;
static bool hash_key_set;

static void hash_key_init(void) {
        uint8_t key[16];
        size_t got = 0;

        while (got < sizeof key) {
                ssize_t n = getrandom(key + got, sizeof key - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        abort(); /* Linux >= 3.17 has getrandom(); without it there is no safe key */
                got += (size_t) n;
        }
        hash_k0 = load_le64(key);
        hash_k1 = load_le64(key + 8);
        hash_key_set = true;
}

static uint64_t hash_string(const char *s) {
        if (!hash_key_set)
                hash_key_init();
        return siphash_words(hash_k0, hash_k1, s, strlen(s), 1, 3); /* SipHash-1-3: ids are short */
}

/* One open-addressing table for both kinds of map. An entry's key is a string (Hashmap), or ID_KEY for
 * an entry of an IdMap, whose id is its hash: ids are the process's own, so no hashing is needed to
 * keep them apart, and a bucket comes from a multiplicative (Fibonacci) spread of the id. NULL: empty;
 * TOMBSTONE: removed. */
#define ID_KEY ((char *) 2)

/* ids: the map is an IdMap's. The functions on every call's path take it as a constant, so that each
 * kind of map gets code of its own. */
#define _always_inline_ inline __attribute__((always_inline))

static _always_inline_ size_t bucket_of(const Hashmap *h, uint64_t hash, bool ids) {
        if (ids)
                hash = (hash * 0x9E3779B97F4A7C15ULL) >> 32;
        return (size_t) hash & (h->n_buckets - 1);
}

static Hashmap *map_new(bool borrowed, bool ids) {
        Hashmap *h = calloc(1, sizeof(Hashmap));

        if (h) {
                h->borrowed = borrowed;
                h->ids = ids;
        }
        return h;
}

Hashmap *hashmap_new(void) {
        return map_new(false, false);
}

Hashmap *hashmap_new_borrowed(void) {
        return map_new(true, false);
}

Hashmap *hashmap_free(Hashmap *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; !h->borrowed && i < h->n_buckets; i++)
                if (h->entries[i].key && h->entries[i].key != TOMBSTONE)
                        free(h->entries[i].key);
        free(h->entries);
        free(h);
        return NULL;
}

/* key: the string, or ID_KEY (then hash is the id). */
static _always_inline_ Entry *find(const Hashmap *h, const char *key, uint64_t hash, bool ids) {
        if (h->n_buckets == 0)
                return NULL;
        for (size_t i = bucket_of(h, hash, ids), n = 0; n < h->n_buckets; i = (i + 1) & (h->n_buckets - 1), n++) {
                Entry *e = &h->entries[i];
                if (!e->key)
                        return NULL;
                if (e->key != TOMBSTONE && e->hash == hash && (ids || strcmp(e->key, key) == 0))
                        return e;
        }
        return NULL;
}

static int resize(Hashmap *h, size_t n_buckets) {
        Entry *old = h->entries;
        size_t old_n = h->n_buckets;

        h->entries = calloc(n_buckets, sizeof(Entry));
        if (!h->entries) {
                h->entries = old;
                return -ENOMEM;
        }
        h->n_buckets = n_buckets;
        h->used = 0;
        for (size_t i = 0; i < old_n; i++) {
                if (!old[i].key || old[i].key == TOMBSTONE)
                        continue;
                size_t j = bucket_of(h, old[i].hash, h->ids);
                while (h->entries[j].key)
                        j = (j + 1) & (n_buckets - 1);
                h->entries[j] = old[i];
                h->used++;
        }
        free(old);
        return 0;
}

/* The first tombstone or empty bucket on key's probe: one probe both looks for key and finds its
 * place. */
static _always_inline_ int table_probe(const Hashmap *h, const char *key, uint64_t hash, bool ids, size_t *ret_slot) {
        size_t i, slot = SIZE_MAX;

        for (i = bucket_of(h, hash, ids); h->entries[i].key; i = (i + 1) & (h->n_buckets - 1)) {
                const Entry *e = &h->entries[i];
                if (e->key == TOMBSTONE) {
                        if (slot == SIZE_MAX)
                                slot = i;
                } else if (e->hash == hash && (ids || strcmp(e->key, key) == 0))
                        return -EEXIST;
        }
        *ret_slot = slot == SIZE_MAX ? i : slot;
        return 0;
}

/* Where key (a string, or ID_KEY) with its hash goes; -EEXIST if present. Taking an empty bucket that
 * would fill the table to 3/4 (tombstones counted) first rehashes it, doubling it if a quarter is
 * live: an empty bucket always stays, so every probe ends. Nothing moves when key is present. */
static _always_inline_ int table_slot(Hashmap *h, const char *key, uint64_t hash, bool ids, size_t *ret_slot) {
        size_t slot;
        int r;

        if (h->n_buckets > 0) {
                r = table_probe(h, key, hash, ids, &slot);
                if (r < 0)
                        return r;
                if (h->entries[slot].key || (h->used + 1) * 4 < h->n_buckets * 3) {
                        *ret_slot = slot;
                        return 0;
                }
        }
        r = resize(h, h->n_buckets == 0 ? 16 : (h->size + 1) * 4 >= h->n_buckets ? h->n_buckets * 2 : h->n_buckets);
        if (r < 0)
                return r;
        return table_probe(h, key, hash, ids, ret_slot);
}

/* Puts key (the caller's string, taken as it is, or ID_KEY) in the slot table_slot() gave. */
static _always_inline_ void table_fill(Hashmap *h, size_t slot, char *key, uint64_t hash, void *value) {
        if (!h->entries[slot].key)
                h->used++;
        h->entries[slot] = (Entry){key, value, hash};
        h->size++;
}

/* A removed entry leaves a tombstone, so that probes for the keys behind it go on; no entry moves, so
 * an iteration may remove any entry. A tombstone just before an empty bucket ends every probe that
 * reaches it one bucket later anyway: it is emptied, and so is each tombstone that then ends its run
 * (with ids that come and go first in, first out, most removals end a run, and tombstones would
 * otherwise fill the table until the next rehash, lengthening every probe). */
static _always_inline_ void *table_take(Hashmap *h, Entry *e) {
        size_t mask = h->n_buckets - 1, i;
        void *v;

        if (!e)
                return NULL;
        v = e->value;
        if (!h->borrowed)
                free(e->key);
        e->key = TOMBSTONE;
        e->value = NULL;
        h->size--;
        i = (size_t) (e - h->entries);
        if (h->entries[(i + 1) & mask].key)
                return v;
        for (; h->entries[i].key == TOMBSTONE; i = (i - 1) & mask) { /* ends at latest at i + 1, empty */
                h->entries[i].key = NULL;
                h->used--;
        }
        return v;
}

uint64_t hashmap_hash(const char *key) {
        return hash_string(key);
}

int hashmap_put_hashed(Hashmap *h, const char *key, uint64_t hash, void *value) {
        size_t slot;
        char *k;
        int r;

        r = table_slot(h, key, hash, false, &slot);
        if (r < 0)
                return r;
        k = h->borrowed ? (char *) key : strdup(key);
        if (!k)
                return -ENOMEM;
        table_fill(h, slot, k, hash, value);
        return 0;
}

int hashmap_put(Hashmap *h, const char *key, void *value) {
        return hashmap_put_hashed(h, key, hash_string(key), value);
}

void *hashmap_get(const Hashmap *h, const char *key) {
        Entry *e = h->n_buckets > 0 ? find(h, key, hash_string(key), false) : NULL;
        return e ? e->value : NULL;
}

void *hashmap_remove(Hashmap *h, const char *key) {
        return table_take(h, h->n_buckets > 0 ? find(h, key, hash_string(key), false) : NULL);
}

void *hashmap_remove_hashed(Hashmap *h, const char *key, uint64_t hash) {
        return table_take(h, find(h, key, hash, false));
}

void *hashmap_remove_if(Hashmap *h, const char *key, bool (*match)(const void *value, const void *userdata),
                        const void *userdata) {
        Entry *e = h->n_buckets > 0 ? find(h, key, hash_string(key), false) : NULL;

        return e && match(e->value, userdata) ? table_take(h, e) : NULL;
}

size_t hashmap_size(const Hashmap *h) {
        return h ? h->size : 0;
}

int hashmap_iterate(Hashmap *h, size_t *state, const char **ret_key, void **ret_value) {
        for (; *state < h->n_buckets; (*state)++) {
                Entry *e = &h->entries[*state];
                if (e->key && e->key != TOMBSTONE) {
                        (*state)++;
                        if (ret_key)
                                *ret_key = e->key;
                        *ret_value = e->value;
                        return 1;
                }
        }
        return 0;
}

/* IdMap: the same table, its entries keyed ID_KEY with the id as their hash. */
struct IdMap {
        Hashmap map;
};

IdMap *idmap_new(void) {
        return (IdMap *) map_new(true, true);
}

IdMap *idmap_free(IdMap *h) {
        return (IdMap *) hashmap_free(h ? &h->map : NULL);
}

int idmap_put(IdMap *h, int64_t key, void *value) {
        size_t slot;
        int r;

        if (!value)
                return -EINVAL;
        r = table_slot(&h->map, ID_KEY, (uint64_t) key, true, &slot);
        if (r < 0)
                return r;
        table_fill(&h->map, slot, ID_KEY, (uint64_t) key, value);
        return 0;
}

void *idmap_get(const IdMap *h, int64_t key) {
        Entry *e = find(&h->map, ID_KEY, (uint64_t) key, true);
        return e ? e->value : NULL;
}

void *idmap_remove(IdMap *h, int64_t key) {
        return table_take(&h->map, find(&h->map, ID_KEY, (uint64_t) key, true));
}

size_t idmap_size(const IdMap *h) {
        return h ? h->map.size : 0;
}

int idmap_iterate(IdMap *h, size_t *state, int64_t *ret_key, void **ret_value) {
        if (!hashmap_iterate(&h->map, state, NULL, ret_value))
                return 0;
        if (ret_key)
                *ret_key = (int64_t) h->map.entries[*state - 1].hash; /* the entry just returned */
        return 1;
}
