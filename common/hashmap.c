/* Open-addressing hash map with tombstones; small and good enough for a few thousand ids. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

#define TOMBSTONE ((char *) 1)

typedef struct Entry {
        char *key;
        void *value;
} Entry;

struct Hashmap {
        Entry *entries;
        size_t size, used, n_buckets; /* used counts tombstones too */
};

static uint64_t hash_string(const char *s) {
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 1099511628211ULL;
        return h;
}

Hashmap *hashmap_new(void) {
        return calloc(1, sizeof(Hashmap));
}

Hashmap *hashmap_free(Hashmap *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->n_buckets; i++)
                if (h->entries[i].key && h->entries[i].key != TOMBSTONE)
                        free(h->entries[i].key);
        free(h->entries);
        free(h);
        return NULL;
}

static Entry *find(const Hashmap *h, const char *key) {
        if (h->n_buckets == 0)
                return NULL;
        for (size_t i = hash_string(key) & (h->n_buckets - 1), n = 0; n < h->n_buckets;
             i = (i + 1) & (h->n_buckets - 1), n++) {
                Entry *e = &h->entries[i];
                if (!e->key)
                        return NULL;
                if (e->key != TOMBSTONE && strcmp(e->key, key) == 0)
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
                size_t j = hash_string(old[i].key) & (n_buckets - 1);
                while (h->entries[j].key)
                        j = (j + 1) & (n_buckets - 1);
                h->entries[j] = old[i];
                h->used++;
        }
        free(old);
        return 0;
}

int hashmap_put(Hashmap *h, const char *key, void *value) {
        char *k;
        size_t i;

        if (find(h, key))
                return -EEXIST;
        if ((h->used + 1) * 4 >= h->n_buckets * 3) {
                int r = resize(h, h->n_buckets == 0                   ? 16
                                  : (h->size + 1) * 4 >= h->n_buckets ? h->n_buckets * 2
                                                                      : h->n_buckets);
                if (r < 0)
                        return r;
        }
        k = strdup(key);
        if (!k)
                return -ENOMEM;
        for (i = hash_string(key) & (h->n_buckets - 1); h->entries[i].key && h->entries[i].key != TOMBSTONE;
             i = (i + 1) & (h->n_buckets - 1))
                ;
        if (!h->entries[i].key)
                h->used++;
        h->entries[i] = (Entry){k, value};
        h->size++;
        return 0;
}

void *hashmap_get(const Hashmap *h, const char *key) {
        Entry *e = find(h, key);
        return e ? e->value : NULL;
}

void *hashmap_remove(Hashmap *h, const char *key) {
        Entry *e = find(h, key);
        void *v;

        if (!e)
                return NULL;
        v = e->value;
        free(e->key);
        e->key = TOMBSTONE;
        e->value = NULL;
        h->size--;
        return v;
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
