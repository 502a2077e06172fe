/* A string-keyed hash map (open addressing) for request-id tables. Keys are owned by the map, unless
 * it is made by hashmap_new_borrowed(). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The header is public so that an owner may hold a map inside itself (hashmap_init_borrowed()), on the
 * line of its own that every look-up reads anyway; its fields are the map's alone. */
typedef struct Hashmap {
        struct HashmapEntry *entries;
        uint32_t size, used, n_buckets; /* used counts tombstones too */
        bool borrowed;                  /* the keys are the caller's (hashmap_new_borrowed()) */
} Hashmap;

Hashmap *hashmap_new(void);
/* A map whose keys stay the caller's: each must stay valid and unchanged while its entry is there
 * (a key that is a field of the value, say), and is never copied or freed by the map. */
Hashmap *hashmap_new_borrowed(void);
/* Frees the map and its keys; values belong to the caller. */
Hashmap *hashmap_free(Hashmap *h);
static inline void hashmap_freep(Hashmap **h) {
        hashmap_free(*h);
}
/* The same for a map held in its owner: made empty (no allocation until the first put), and its
 * entries freed (the header stays the owner's). */
void hashmap_init_borrowed(Hashmap *h);
void hashmap_done(Hashmap *h);
/* -EEXIST if present. */
int hashmap_put(Hashmap *h, const char *key, void *value);
void *hashmap_get(const Hashmap *h, const char *key);
/* Where key's value is kept, to change it in place; NULL if key is not there. */
void **hashmap_get_ref(Hashmap *h, const char *key);
void *hashmap_remove(Hashmap *h, const char *key);
/* The same when match(value, userdata) holds (one look-up); else the entry stays and NULL. */
void *hashmap_remove_if(Hashmap *h, const char *key, bool (*match)(const void *value, const void *userdata),
                        const void *userdata);
/* The map's keyed hash of key, for a caller that puts and later removes the same key: the _hashed
 * forms take it instead of hashing the key again. hash must be hashmap_hash(key). */
uint64_t hashmap_hash(const char *key);
/* The same of key's first len bytes (its strlen()), for a caller that knows it. */
uint64_t hashmap_hash_len(const char *key, size_t len);
int hashmap_put_hashed(Hashmap *h, const char *key, uint64_t hash, void *value);
void *hashmap_remove_hashed(Hashmap *h, const char *key, uint64_t hash);
size_t hashmap_size(const Hashmap *h);
/* Iteration: *state starts at 0; returns 0 at the end. Removing the current entry is allowed. */
int hashmap_iterate(Hashmap *h, size_t *state, const char **ret_key, void **ret_value);
/* SipHash-c-d of data under a 128-bit key (the map uses SipHash-1-3 with a random key per process). */
uint64_t siphash(const uint8_t key[16], const void *data, size_t len, unsigned c_rounds, unsigned d_rounds);

/* A map keyed by 64-bit ids the process makes itself (the request ids a shim gives a backend), best
 * when they come from a counter: an id is its own bucket (ids in flight together share cache lines,
 * a look-up reads one entry), and an id still held in flight when the counter comes round to its
 * bucket moves to a small side table where a keyed spread of it is its bucket, so held ids do not
 * lengthen the probes of the others; no formatting or string hashing. Not for keys a peer
 * chooses: a peer's id is only looked up, which reads its own bucket and at most as far into the side
 * table as the process's own keys sit from their buckets there. Values are never NULL. */
/* Public for the same reason as Hashmap's; its fields are the map's alone. */
typedef struct IdMap {
        struct IdEntry *entries;
        size_t size, n_buckets; /* size: live entries in the front */
        struct IdSpill *spill;  /* NULL until an id is first moved there */
} IdMap;

IdMap *idmap_new(void);
IdMap *idmap_free(IdMap *h);
/* The same for a map held in its owner (idmap_init(): empty, no allocation until the first put). */
void idmap_init(IdMap *h);
void idmap_done(IdMap *h);
/* -EEXIST if present. */
int idmap_put(IdMap *h, int64_t key, void *value);
void *idmap_get(const IdMap *h, int64_t key);
void *idmap_remove(IdMap *h, int64_t key);
size_t idmap_size(const IdMap *h);
/* How far past its bucket the farthest entry in the side table sits (since its last rebuild): a get or
 * remove reads the id's own bucket and at most this many entries plus one there. For tests. */
size_t idmap_max_dist(const IdMap *h);
/* As hashmap_iterate(): removing the current entry is allowed. */
int idmap_iterate(IdMap *h, size_t *state, int64_t *ret_key, void **ret_value);
