/* A small document tree from libyaml events, keeping line and column for every node. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

typedef enum YNodeKind {
        YNODE_SCALAR,
        YNODE_SEQUENCE,
        YNODE_MAPPING,
} YNodeKind;

typedef struct YNode YNode;
struct YNode {
        YNodeKind kind;
        unsigned line, column; /* 1-based */
        char *value;           /* scalars */
        size_t length;
        bool plain;     /* unquoted scalar: may be a number, a bool or null */
        YNode **items;  /* sequences: items; mappings: key, value, key, value, ... */
        size_t n_items; /* for mappings, the number of pairs times two */
        size_t alloc_items;
};

#define YAML_TREE_MAX_DEPTH 64U
/* What aliases may add to a document, in all: a "billion laughs" file is refused, not expanded. */
#define YAML_TREE_MAX_ALIAS_NODES 100000U
#define YAML_TREE_MAX_ALIAS_BYTES (16U * 1024U * 1024U)

/* On a YAML error returns -EINVAL and sets *ret_error to "LINE:COLUMN: sentence". */
int yaml_tree_load(const char *text, size_t len, YNode **ret, char **ret_error);
YNode *ynode_free(YNode *n);
static inline void ynode_freep(YNode **n) {
        ynode_free(*n);
}
/* Appends child to a sequence or mapping (a mapping takes key and value in turn): -ENOMEM. */
int ynode_append(YNode *parent, YNode *child);
/* Value of key in a mapping, or NULL. */
const YNode *ynode_get(const YNode *map, const char *key);
/* JSON value of a subtree, typed like YAML 1.2's core schema. On failure returns -EINVAL with
 * *ret_error "LINE:COLUMN: sentence". */
int ynode_to_json(const YNode *n, cJSON **ret, char **ret_error);
const char *ynode_kind_name(YNodeKind k);
/* The same tree from JSON text already parsed (no positions): -EINVAL where YAML would refuse. */
int ynode_from_json(const cJSON *j, YNode **ret);
/* A lossless JSON form of a tree, for the manifest cache, and back. */
cJSON *ynode_encode(const YNode *n);
int ynode_decode(const cJSON *j, YNode **ret);
