/* Open-addressing hash map with tombstones, keyed SipHash: small, and safe on ids a peer chooses; and
 * a table of the process's own 64-bit ids (IdMap), in order. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <sys/random.h>

#include "hashmap.h"
#include "macros.h"

#define TOMBSTONE ((char *) 1)

typedef struct HashmapEntry {
        char *key;
        void *value;
        uint64_t hash; /* of key: probes compare it before the key, and a resize reuses it */
} Entry;

/* Counts are 32-bit (the header is 24 bytes, to share its owner's line): a table never grows past this
 * many buckets. */
#define MAP_MAX_BUCKETS (UINT32_C(1) << 30)

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
static _hot_ uint64_t hash_k0, hash_k1;
static _hot_ bool hash_key_set;

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

/* An entry's key: NULL: empty; TOMBSTONE: removed. */
#define _always_inline_ inline __attribute__((always_inline))

static _always_inline_ size_t bucket_of(const Hashmap *h, uint64_t hash) {
        return (size_t) hash & (h->n_buckets - 1);
}

/* A map's header is read by every look-up: on a line of its own (calloc() put a connection's pending
 * table's across two, one more line per message for a shim woken cache-cold). */
static Hashmap *map_new(bool borrowed) {
        Hashmap *h = calloc_lines(sizeof(Hashmap));

        if (h)
                h->borrowed = borrowed;
        return h;
}

Hashmap *hashmap_new(void) {
        return map_new(false);
}

Hashmap *hashmap_new_borrowed(void) {
        return map_new(true);
}

void hashmap_init_borrowed(Hashmap *h) {
        *h = (Hashmap){.borrowed = true};
}

void hashmap_done(Hashmap *h) {
        for (size_t i = 0; !h->borrowed && i < h->n_buckets; i++)
                if (h->entries[i].key && h->entries[i].key != TOMBSTONE)
                        free(h->entries[i].key);
        free(h->entries);
        *h = (Hashmap){.borrowed = h->borrowed};
}

Hashmap *hashmap_free(Hashmap *h) {
        if (!h)
                return NULL;
        hashmap_done(h);
        free(h);
        return NULL;
}

static _always_inline_ Entry *find(const Hashmap *h, const char *key, uint64_t hash) {
        if (h->n_buckets == 0)
                return NULL;
        for (size_t i = bucket_of(h, hash), n = 0; n < h->n_buckets; i = (i + 1) & (h->n_buckets - 1), n++) {
                Entry *e = &h->entries[i];
                if (!e->key)
                        return NULL;
                /* route_remove() and its kind look up by the very key they stored: no compare then */
                if (e->key != TOMBSTONE && e->hash == hash && (e->key == key || strcmp(e->key, key) == 0))
                        return e;
        }
        return NULL;
}

static int resize(Hashmap *h, size_t n_buckets) {
        Entry *old = h->entries;
        size_t old_n = h->n_buckets;

        if (n_buckets > MAP_MAX_BUCKETS)
                return -ENOMEM;
        h->entries = calloc(n_buckets, sizeof(Entry));
        if (!h->entries) {
                h->entries = old;
                return -ENOMEM;
        }
        h->n_buckets = (uint32_t) n_buckets;
        h->used = 0;
        for (size_t i = 0; i < old_n; i++) {
                if (!old[i].key || old[i].key == TOMBSTONE)
                        continue;
                size_t j = bucket_of(h, old[i].hash);
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
static _always_inline_ int table_probe(const Hashmap *h, const char *key, uint64_t hash, size_t *ret_slot) {
        size_t i, slot = SIZE_MAX;

        for (i = bucket_of(h, hash); h->entries[i].key; i = (i + 1) & (h->n_buckets - 1)) {
                const Entry *e = &h->entries[i];
                if (e->key == TOMBSTONE) {
                        if (slot == SIZE_MAX)
                                slot = i;
                } else if (e->hash == hash && strcmp(e->key, key) == 0)
                        return -EEXIST;
        }
        *ret_slot = slot == SIZE_MAX ? i : slot;
        return 0;
}

/* Where key with its hash goes; -EEXIST if present. Taking an empty bucket that
 * would fill the table to 3/4 (tombstones counted) first rehashes it, doubling it if more than half
 * would be live: an empty bucket always stays, so every probe ends. Nothing moves when key is
 * present. (Half, not a quarter: a connection's 64 calls in flight keep a table of 128 buckets, 3 KiB,
 * not 512; a shim with 100 such connections touches one of their buckets per message.) */
static _always_inline_ int table_slot(Hashmap *h, const char *key, uint64_t hash, size_t *ret_slot) {
        size_t slot;
        int r;

        if (h->n_buckets > 0) {
                r = table_probe(h, key, hash, &slot);
                if (r < 0)
                        return r;
                if (h->entries[slot].key || ((size_t) h->used + 1) * 4 < (size_t) h->n_buckets * 3) {
                        *ret_slot = slot;
                        return 0;
                }
        }
        r = resize(h, h->n_buckets == 0                                     ? 16
                      : ((size_t) h->size + 1) * 2 > h->n_buckets ? (size_t) h->n_buckets * 2
                                                                   : h->n_buckets);
        if (r < 0)
                return r;
        return table_probe(h, key, hash, ret_slot);
}

/* Puts key (the caller's string, taken as it is) in the slot table_slot() gave. */
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
        /* Its value stays: no one reads a tombstone's (and the pair of stores would be one, of a
         * constant read from .rodata: a line more per answer in a shim woken cache-cold). */
        e->key = TOMBSTONE;
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

uint64_t hashmap_hash_len(const char *key, size_t len) {
        if (!hash_key_set)
                hash_key_init();
        return siphash_words(hash_k0, hash_k1, key, len, 1, 3);
}

int hashmap_put_hashed(Hashmap *h, const char *key, uint64_t hash, void *value) {
        size_t slot;
        char *k;
        int r;

        r = table_slot(h, key, hash, &slot);
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
        Entry *e = h->n_buckets > 0 ? find(h, key, hash_string(key)) : NULL;
        return e ? e->value : NULL;
}

void **hashmap_get_ref(Hashmap *h, const char *key) {
        Entry *e = h->n_buckets > 0 ? find(h, key, hash_string(key)) : NULL;
        return e ? &e->value : NULL;
}

void *hashmap_remove(Hashmap *h, const char *key) {
        return table_take(h, h->n_buckets > 0 ? find(h, key, hash_string(key)) : NULL);
}

void *hashmap_remove_hashed(Hashmap *h, const char *key, uint64_t hash) {
        return table_take(h, find(h, key, hash));
}

void *hashmap_remove_if(Hashmap *h, const char *key, bool (*match)(const void *value, const void *userdata),
                        const void *userdata) {
        Entry *e = h->n_buckets > 0 ? find(h, key, hash_string(key)) : NULL;

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

/* IdMap: the process's own ids, which a counter hands out in order and which mostly go in the order
 * they came (calls answered first in, first out). Two tables. The front (below) is where an id mostly
 * is: id k in bucket k & (n - 1), one entry a bucket, so ids in flight together share cache lines and
 * a look-up reads one entry. When the counter comes round to a bucket whose old id is still held in
 * flight (a slow call, or a thousand of them), that old id moves to the spill, so it never makes a run
 * the ids after it queue behind each time round.
 *
 * IdSpill: the held ids. An id's bucket is a keyed spread of it (id_bucket()), so the held ids,
 * consecutive or not, land apart as at random, and a peer cannot tell which ids share buckets. A
 * removed entry leaves a tombstone (no entry moves: an iteration may remove the current one); the
 * table is rebuilt, sized to the ids in flight (a quarter full at most), when tombstones and entries
 * together fill half of it (ids landing as at random: at three quarters the farthest of 3,000 sat
 * 30-200 past its bucket, 64 or more in 2 tables of 5; at half, under 64 in 25,000 tables).
 * max_dist, the farthest any entry sits from its bucket, bounds every probe: a look-up of an id that
 * is not there (a peer's answer to a call long gone) reads max_dist + 1 entries at most, however many
 * tombstones there are. */
typedef struct IdEntry {
        int64_t key;
        void *value; /* NULL: empty; ID_TOMBSTONE: removed */
} IdEntry;

static const char id_tombstone;
#define ID_TOMBSTONE ((void *) &id_tombstone)

typedef struct IdSpill IdSpill;
struct IdSpill {
        IdEntry *entries;
        size_t size, used, n_buckets; /* used counts tombstones too */
        size_t max_dist;
        uint64_t multiplier; /* odd, random, drawn for each table a rebuild makes */
        unsigned shift;      /* 64 - log2(n_buckets): a bucket is the spread's top bits */
};

static IdSpill *spill_new(void) {
        return calloc(1, sizeof(IdSpill));
}

static IdSpill *spill_free(IdSpill *h) {
        if (h) {
                free(h->entries);
                free(h);
        }
        return NULL;
}

/* A client can follow the ids (a new backend's calls count from 1) and choose which of its calls to
 * hold: with a fixed public spread (the top bits of id * 2^64/phi, as this was) it held exactly the
 * ids that share a run of buckets, and every put's look-up here walked the run. So each table has a
 * random odd multiplier of its own, from the process's SipHash key (hash_key_init()'s getrandom()).
 * A multiplier alone spreads ids in arithmetic progression (consecutive ones, or every kth) badly for
 * about one multiplier in 250 (its ratio to 2^64 near a fraction with a small denominator: runs of 64
 * and more among 1,000 held ids); the product's high half folded into its low half and spread by the
 * Fibonacci constant makes the top bits depend on all of it: then no progression lands worse than at
 * random. */
static uint64_t id_multiplier_new(void) {
        static uint64_t n_drawn;

        if (!hash_key_set)
                hash_key_init();
        n_drawn++;
        return siphash_words(hash_k0, hash_k1, &n_drawn, sizeof n_drawn, 1, 3) | 1;
}

static inline size_t id_bucket(const IdSpill *h, int64_t key) {
        uint64_t x = (uint64_t) key * h->multiplier;

        return (size_t) (((x ^ (x >> 32)) * 0x9E3779B97F4A7C15ULL) >> h->shift);
}

static IdEntry *id_find(const IdSpill *h, int64_t key) {
        size_t mask = h->n_buckets - 1, i;

        if (h->n_buckets == 0)
                return NULL;
        i = id_bucket(h, key);
        for (size_t d = 0; d <= h->max_dist; d++, i = (i + 1) & mask) {
                IdEntry *e = &h->entries[i];
                if (!e->value)
                        return NULL;
                if (e->key == key && e->value != ID_TOMBSTONE)
                        return e;
        }
        return NULL;
}

/* The first free bucket (empty or a tombstone) from key's own. */
static size_t id_free_slot(const IdSpill *h, int64_t key) {
        size_t mask = h->n_buckets - 1, i = id_bucket(h, key);

        while (h->entries[i].value && h->entries[i].value != ID_TOMBSTONE)
                i = (i + 1) & mask;
        return i;
}

static void id_place(IdSpill *h, size_t slot, int64_t key, void *value) {
        size_t dist = (slot - id_bucket(h, key)) & (h->n_buckets - 1);

        if (!h->entries[slot].value)
                h->used++;
        h->entries[slot] = (IdEntry){key, value};
        h->size++;
        if (dist > h->max_dist)
                h->max_dist = dist;
}

/* Rebuilt without tombstones, at the size what is in flight wants: at most a quarter full. */
static int id_rebuild(IdSpill *h) {
        IdEntry *old = h->entries;
        size_t old_n = h->n_buckets, n = 16;
        unsigned shift = 64 - 4;

        while (n < (h->size + 1) * 4)
                n *= 2, shift--;
        h->entries = calloc(n, sizeof(IdEntry));
        if (!h->entries) {
                h->entries = old;
                return -ENOMEM;
        }
        h->n_buckets = n;
        h->shift = shift;
        h->multiplier = id_multiplier_new();
        h->size = h->used = h->max_dist = 0;
        for (size_t i = 0; i < old_n; i++)
                if (old[i].value && old[i].value != ID_TOMBSTONE)
                        id_place(h, id_free_slot(h, old[i].key), old[i].key, old[i].value);
        free(old);
        return 0;
}

/* One probe: key, if there, sits at most max_dist past its bucket; its place is the first free bucket
 * from there (an empty one always comes: the table is never more than half used). */
static int id_probe(const IdSpill *h, int64_t key, size_t *ret_slot) {
        size_t mask = h->n_buckets - 1, i = id_bucket(h, key), slot = SIZE_MAX;

        for (size_t d = 0;; d++, i = (i + 1) & mask) {
                const IdEntry *e = &h->entries[i];
                if (!e->value || e->value == ID_TOMBSTONE) {
                        if (slot == SIZE_MAX)
                                slot = i;
                        if (!e->value)
                                break;
                } else if (e->key == key)
                        return -EEXIST;
                if (d >= h->max_dist && slot != SIZE_MAX)
                        break;
        }
        *ret_slot = slot;
        return 0;
}

static int spill_put(IdSpill *h, int64_t key, void *value) {
        size_t slot;
        int r;

        if (!value || value == ID_TOMBSTONE)
                return -EINVAL;
        if (h->n_buckets > 0) {
                r = id_probe(h, key, &slot);
                if (r < 0)
                        return r;
                if (h->entries[slot].value || (h->used + 1) * 2 <= h->n_buckets) {
                        id_place(h, slot, key, value);
                        return 0;
                }
        }
        r = id_rebuild(h);
        if (r < 0)
                return r;
        id_place(h, id_free_slot(h, key), key, value);
        return 0;
}

static void *spill_get(const IdSpill *h, int64_t key) {
        IdEntry *e = id_find(h, key);
        return e ? e->value : NULL;
}

static void *spill_remove(IdSpill *h, int64_t key) {
        IdEntry *e = id_find(h, key);
        void *v;

        if (!e)
                return NULL;
        v = e->value;
        e->value = ID_TOMBSTONE;
        h->size--;
        return v;
}

static size_t spill_size(const IdSpill *h) {
        return h ? h->size : 0;
}

static size_t spill_max_dist(const IdSpill *h) {
        return h ? h->max_dist : 0;
}

static int spill_iterate(IdSpill *h, size_t *state, int64_t *ret_key, void **ret_value) {
        for (; *state < h->n_buckets; (*state)++) {
                IdEntry *e = &h->entries[*state];
                if (e->value && e->value != ID_TOMBSTONE) {
                        (*state)++;
                        if (ret_key)
                                *ret_key = e->key;
                        *ret_value = e->value;
                        return 1;
                }
        }
        return 0;
}

/* The front: id k sits in bucket k & (n_buckets - 1) or not in the front at all; no tombstones (a
 * removed entry empties its bucket, nothing moves: an iteration may remove the current one). It is
 * kept at most half full, and rebuilt at a quarter full when it is past that or under 1/32. */
IdMap *idmap_new(void) {
        return calloc_lines(sizeof(IdMap)); /* on one line, as a Hashmap's header (map_new()) */
}

void idmap_init(IdMap *h) {
        *h = (IdMap){};
}

void idmap_done(IdMap *h) {
        spill_free(h->spill);
        free(h->entries);
        *h = (IdMap){};
}

IdMap *idmap_free(IdMap *h) {
        if (h) {
                idmap_done(h);
                free(h);
        }
        return NULL;
}

static inline size_t front_bucket(const IdMap *h, int64_t key) {
        return (size_t) ((uint64_t) key & (h->n_buckets - 1));
}

static inline bool spill_used(const IdSpill *s) {
        return s && s->size > 0;
}

/* key into its own bucket; an older id there moves to the spill. On failure nothing has changed. */
static int front_place(IdMap *h, int64_t key, void *value) {
        IdEntry *e = &h->entries[front_bucket(h, key)];
        int r;

        if (e->value && e->key == key)
                return -EEXIST;
        if (spill_used(h->spill) && spill_get(h->spill, key))
                return -EEXIST;
        if (e->value) {
                if (!h->spill) {
                        h->spill = spill_new();
                        if (!h->spill)
                                return -ENOMEM;
                }
                r = spill_put(h->spill, e->key, e->value);
                if (r < 0)
                        return r;
                h->size--;
        }
        *e = (IdEntry){key, value};
        h->size++;
        return 0;
}

/* Every entry, front and spill, placed into a new front (and spill) a quarter full; swapped in only
 * when all are placed, so an allocation that fails partway leaves h as it was. */
static int front_rebuild(IdMap *h) {
        size_t total = idmap_size(h), n = 16, state = 0;
        IdMap new = {};
        int64_t key;
        void *value;
        int r = 0;

        while (n < (total + 1) * 4)
                n *= 2;
        new.entries = calloc(n, sizeof(IdEntry));
        if (!new.entries)
                return -ENOMEM;
        new.n_buckets = n;
        for (size_t i = 0; i < h->n_buckets && r >= 0; i++)
                if (h->entries[i].value)
                        r = front_place(&new, h->entries[i].key, h->entries[i].value);
        while (r >= 0 && spill_used(h->spill) && spill_iterate(h->spill, &state, &key, &value))
                r = front_place(&new, key, value);
        if (r < 0) {
                spill_free(new.spill);
                free(new.entries);
                return r;
        }
        spill_free(h->spill);
        free(h->entries);
        *h = new;
        return 0;
}

int idmap_put(IdMap *h, int64_t key, void *value) {
        size_t total = idmap_size(h);
        int r;

        if (!value || value == ID_TOMBSTONE)
                return -EINVAL;
        if ((total + 1) * 2 > h->n_buckets || (h->n_buckets > 16 && (total + 1) * 32 < h->n_buckets)) {
                r = front_rebuild(h);
                if (r < 0)
                        return r;
        }
        return front_place(h, key, value);
}

void *idmap_get(const IdMap *h, int64_t key) {
        const IdEntry *e;

        if (h->n_buckets == 0)
                return NULL;
        e = &h->entries[front_bucket(h, key)];
        if (e->value && e->key == key)
                return e->value;
        return spill_used(h->spill) ? spill_get(h->spill, key) : NULL;
}

void *idmap_remove(IdMap *h, int64_t key) {
        IdEntry *e;
        void *v;

        if (h->n_buckets == 0)
                return NULL;
        e = &h->entries[front_bucket(h, key)];
        if (e->value && e->key == key) {
                v = e->value;
                e->value = NULL;
                h->size--;
                return v;
        }
        return spill_used(h->spill) ? spill_remove(h->spill, key) : NULL;
}

size_t idmap_size(const IdMap *h) {
        return h ? h->size + spill_size(h->spill) : 0;
}

/* A front entry is always in its own bucket: only the spill's entries sit past theirs. */
size_t idmap_max_dist(const IdMap *h) {
        return h ? spill_max_dist(h->spill) : 0;
}

/* The front's buckets, then the spill's: *state counts on past n_buckets into the spill. */
int idmap_iterate(IdMap *h, size_t *state, int64_t *ret_key, void **ret_value) {
        size_t spill_state;
        int r;

        for (; *state < h->n_buckets; (*state)++) {
                IdEntry *e = &h->entries[*state];
                if (e->value) {
                        (*state)++;
                        if (ret_key)
                                *ret_key = e->key;
                        *ret_value = e->value;
                        return 1;
                }
        }
        if (!h->spill)
                return 0;
        spill_state = *state - h->n_buckets;
        r = spill_iterate(h->spill, &spill_state, ret_key, ret_value);
        *state = spill_state + h->n_buckets;
        return r;
}
