/* libyaml events -> YNode tree. Aliases are expanded (copies of their anchor's node) within a bound on
 * what they add, and depth is capped: libyaml 0.2.5 has neither limit. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "hashmap.h"
#include "macros.h"
#include "yaml_tree.h"

YNode *ynode_free(YNode *n) {
        if (!n)
                return NULL;
        for (size_t i = 0; i < n->n_items; i++)
                ynode_free(n->items[i]);
        free(n->items);
        free(n); /* the value lives in the same allocation */
        return NULL;
}

const char *ynode_kind_name(YNodeKind k) {
        return k == YNODE_SCALAR ? "a scalar" : k == YNODE_SEQUENCE ? "a list" : "a mapping";
}

_printf_(4, 5) static int set_error(char **ret_error, unsigned line, unsigned column, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        free(*ret_error);
        if (asprintf(ret_error, "%u:%u: %s", line, column, msg) < 0) {
                *ret_error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

/* One allocation for the node and its text: manifests have tens of thousands of scalars. */
static YNode *ynode_alloc(YNodeKind kind, const char *value, size_t length, bool plain) {
        YNode *n = calloc(1, sizeof *n + (value ? length + 1 : 0));

        if (!n)
                return NULL;
        n->kind = kind;
        n->plain = plain;
        if (value) {
                n->value = (char *) (n + 1);
                memcpy(n->value, value, length);
                n->value[length] = 0;
                n->length = length;
        }
        return n;
}

int ynode_append(YNode *parent, YNode *child) {
        if (parent->n_items == parent->alloc_items) {
                size_t k = parent->alloc_items ? parent->alloc_items * 2 : 4;
                YNode **l = realloc(parent->items, k * sizeof *l);
                if (!l)
                        return -ENOMEM;
                parent->items = l;
                parent->alloc_items = k;
        }
        parent->items[parent->n_items++] = child;
        return 0;
}

const YNode *ynode_get(const YNode *map, const char *key) {
        if (!map || map->kind != YNODE_MAPPING)
                return NULL;
        for (size_t i = 0; i + 1 < map->n_items; i += 2)
                if (map->items[i]->kind == YNODE_SCALAR && streq(map->items[i]->value, key))
                        return map->items[i + 1];
        return NULL;
}

/* An anchor (&name) and the size of its node, measured once when the node is complete. */
typedef struct Anchor {
        const YNode *node; /* NULL while the node is still being read */
        size_t nodes, bytes;
        unsigned height; /* levels, the node itself being 1 */
} Anchor;

typedef struct Parser {
        yaml_parser_t parser;
        char **error;
        Hashmap *anchors;                /* name -> Anchor */
        size_t alias_nodes, alias_bytes; /* what aliases and merge keys added so far */
        YNode *graveyard;                /* merge keys' sources, out of the tree but perhaps anchored */
} Parser;

static void anchor_measure(const YNode *n, unsigned depth, Anchor *a) {
        a->nodes++;
        a->bytes += n->length;
        if (depth > a->height)
                a->height = depth;
        for (size_t i = 0; i < n->n_items; i++)
                anchor_measure(n->items[i], depth + 1, a);
}

static YNode *ynode_copy(const YNode *n, unsigned line, unsigned column) {
        _cleanup_(ynode_freep) YNode *c = ynode_alloc(n->kind, n->value, n->length, n->plain);

        if (!c)
                return NULL;
        /* A copy is where the alias is: mistakes in it are reported there. */
        c->line = line;
        c->column = column;
        if (n->n_items > 0) {
                c->items = calloc(n->n_items, sizeof *c->items);
                if (!c->items)
                        return NULL;
                c->alloc_items = n->n_items;
                for (size_t i = 0; i < n->n_items; i++) {
                        c->items[i] = ynode_copy(n->items[i], line, column);
                        if (!c->items[i])
                                return NULL;
                        c->n_items++;
                }
        }
        return TAKE_PTR(c);
}

/* &name: remembered before the node is read, so that an alias inside it is told apart from an
 * undefined one. A later anchor of the same name replaces it, as YAML says. */
static int anchor_begin(Parser *p, const char *name, Anchor **ret) {
        Anchor *a = hashmap_get(p->anchors, name);
        int r;

        if (!a) {
                a = calloc(1, sizeof *a);
                if (!a)
                        return -ENOMEM;
                r = hashmap_put(p->anchors, name, a);
                if (r < 0) {
                        free(a);
                        return r;
                }
        }
        *a = (Anchor){};
        *ret = a;
        return 0;
}

/* Copies made for aliases and merge keys count against one bound. */
static int budget_take(Parser *p, size_t nodes, size_t bytes, unsigned line, unsigned column, const char *what,
                       const char *name) {
        if (nodes > YAML_TREE_MAX_ALIAS_NODES - p->alias_nodes || bytes > YAML_TREE_MAX_ALIAS_BYTES - p->alias_bytes)
                return set_error(p->error, line, column,
                                 "%s%s would make aliases expand to more than %u nodes or %u MiB in all; "
                                 "refusing a document that grows without bound (a \"billion laughs\")",
                                 what, name, YAML_TREE_MAX_ALIAS_NODES, YAML_TREE_MAX_ALIAS_BYTES / 1024U / 1024U);
        p->alias_nodes += nodes;
        p->alias_bytes += bytes;
        return 0;
}

static bool is_merge_key(const YNode *k) {
        return k->kind == YNODE_SCALAR && k->plain && streq(k->value, "<<");
}

/* The pairs of one merge source that the mapping does not have yet, copied into merged. */
static int merge_one(Parser *p, const YNode *src, const YNode *at, Hashmap *keys, YNode *merged) {
        for (size_t i = 0; i + 1 < src->n_items; i += 2) {
                Anchor size = {};
                YNode *k, *v;
                int r;

                r = hashmap_put(keys, src->items[i]->value, NULL);
                if (r == -EEXIST)
                        continue;
                if (r < 0)
                        return r;
                anchor_measure(src->items[i], 1, &size);
                anchor_measure(src->items[i + 1], 1, &size);
                r = budget_take(p, size.nodes, size.bytes, at->line, at->column, "merge key ", "<<");
                if (r < 0)
                        return r;
                k = ynode_copy(src->items[i], at->line, at->column);
                if (!k || ynode_append(merged, k) < 0)
                        return k ? (ynode_free(k), -ENOMEM) : -ENOMEM;
                v = ynode_copy(src->items[i + 1], at->line, at->column);
                if (!v || ynode_append(merged, v) < 0)
                        return v ? (ynode_free(v), -ENOMEM) : -ENOMEM;
        }
        return 0;
}

/* YAML's merge key: `<<: *defaults` (or a list of such) gives a mapping the pairs it does not set
 * itself, ahead of its own, as other YAML readers do. */
static int mapping_merge(Parser *p, YNode *n) {
        _cleanup_(hashmap_freep) Hashmap *keys = NULL;
        _cleanup_(ynode_freep) YNode *merged = NULL;
        YNode *at = NULL, *src;
        size_t pos = 0;
        int r = 0;

        for (size_t i = 0; i + 1 < n->n_items && !at; i += 2)
                if (is_merge_key(n->items[i]))
                        at = n->items[i], pos = i;
        if (!at)
                return 0;
        src = n->items[pos + 1];
        for (size_t i = 0; src->kind != YNODE_MAPPING && i <= src->n_items; i++) {
                const YNode *bad = src->kind == YNODE_SCALAR ? src : i < src->n_items ? src->items[i] : NULL;
                if (bad && bad->kind != YNODE_MAPPING)
                        return set_error(p->error, bad->line, bad->column,
                                         "a merge key (<<) takes a mapping or a list of mappings, e.g. <<: *defaults");
        }
        keys = hashmap_new();
        merged = ynode_alloc(YNODE_MAPPING, NULL, 0, false);
        if (!keys || !merged)
                return -ENOMEM;
        for (size_t i = 0; i + 1 < n->n_items; i += 2)
                if (i != pos && (r = hashmap_put(keys, n->items[i]->value, NULL)) < 0)
                        return r; /* the keys were checked unique as they were read */
        if (src->kind == YNODE_MAPPING)
                r = merge_one(p, src, at, keys, merged);
        else
                for (size_t i = 0; r >= 0 && i < src->n_items; i++)
                        r = merge_one(p, src->items[i], at, keys, merged);
        if (r < 0)
                return r;
        /* The key and its source leave the tree (an anchor may still name the source). */
        if (ynode_append(p->graveyard, at) < 0)
                return -ENOMEM;
        n->items[pos] = NULL;
        if (ynode_append(p->graveyard, src) < 0)
                return -ENOMEM;
        n->items[pos + 1] = NULL;
        for (size_t i = 0; i < n->n_items; i++)
                if (n->items[i])
                        if (ynode_append(merged, n->items[i]) < 0)
                                return -ENOMEM;
        /* merged now holds every item: hand its array to n. */
        free(n->items);
        n->items = merged->items;
        n->n_items = merged->n_items;
        n->alloc_items = merged->alloc_items;
        merged->items = NULL;
        merged->n_items = merged->alloc_items = 0;
        return 0;
}

static int alias_expand(Parser *p, const yaml_event_t *ev, unsigned depth, YNode **ret) {
        const char *name = (const char *) ev->data.alias.anchor;
        unsigned line = ev->start_mark.line + 1, column = ev->start_mark.column + 1;
        const Anchor *a = hashmap_get(p->anchors, name);
        int r;

        if (!a)
                return set_error(p->error, line, column, "alias *%s names no anchor (&%s) defined before it", name,
                                 name);
        if (!a->node)
                return set_error(p->error, line, column, "alias *%s is inside the node it names: it would never end",
                                 name);
        if (depth + a->height - 1 > YAML_TREE_MAX_DEPTH)
                return set_error(p->error, line, column, "alias *%s makes nesting deeper than %u levels", name,
                                 YAML_TREE_MAX_DEPTH);
        r = budget_take(p, a->nodes, a->bytes, line, column, "alias *", name);
        if (r < 0)
                return r;
        *ret = ynode_copy(a->node, line, column);
        return *ret ? 0 : -ENOMEM;
}

static int parse_node(Parser *p, yaml_event_t *ev, unsigned depth, YNode **ret);

#define KEYS_INDEXED_FROM 16U /* pairs; below, a linear search is faster than a table */

/* Whether key is already in mapping n; a big mapping gets an index of its keys (*index), so that
 * a file of a million keys is not a million squared comparisons. Adds key to the index. */
static int mapping_has_key(const YNode *n, Hashmap **index, const char *key) {
        int r;

        if (!*index && n->n_items / 2 < KEYS_INDEXED_FROM)
                return !!ynode_get(n, key);
        if (!*index) {
                *index = hashmap_new();
                if (!*index)
                        return -ENOMEM;
                for (size_t i = 0; i + 1 < n->n_items; i += 2) {
                        r = hashmap_put(*index, n->items[i]->value, NULL);
                        if (r < 0 && r != -EEXIST)
                                return r;
                }
        }
        r = hashmap_put(*index, key, NULL);
        return r == -EEXIST ? 1 : r;
}

static int parse_children(Parser *p, YNode *n, yaml_event_type_t end, unsigned depth) {
        _cleanup_(hashmap_freep) Hashmap *index = NULL;

        for (;;) {
                _cleanup_(ynode_freep) YNode *child = NULL;
                yaml_event_t ev;
                int r;

                if (!yaml_parser_parse(&p->parser, &ev))
                        return set_error(p->error, p->parser.problem_mark.line + 1, p->parser.problem_mark.column + 1,
                                         "%s%s%s", p->parser.problem ?: "invalid YAML", p->parser.context ? " " : "",
                                         p->parser.context ?: "");
                if (ev.type == end) {
                        yaml_event_delete(&ev);
                        return n->kind == YNODE_MAPPING ? mapping_merge(p, n) : 0;
                }
                r = parse_node(p, &ev, depth + 1, &child);
                yaml_event_delete(&ev);
                if (r < 0)
                        return r;
                if (n->kind == YNODE_MAPPING && n->n_items % 2 == 0) {
                        if (child->kind != YNODE_SCALAR)
                                return set_error(p->error, child->line, child->column,
                                                 "mapping keys must be plain strings, not %s",
                                                 ynode_kind_name(child->kind));
                        r = mapping_has_key(n, &index, child->value);
                        if (r < 0)
                                return r;
                        if (r > 0)
                                return set_error(p->error, child->line, child->column, "duplicate key '%s'",
                                                 child->value);
                }
                r = ynode_append(n, child);
                if (r < 0)
                        return r;
                child = NULL;
        }
}

static int parse_node(Parser *p, yaml_event_t *ev, unsigned depth, YNode **ret) {
        _cleanup_(ynode_freep) YNode *n = NULL;
        unsigned line = ev->start_mark.line + 1, column = ev->start_mark.column + 1;
        const char *tag = NULL;
        int r;

        const yaml_char_t *anchor_name = ev->type == YAML_SCALAR_EVENT           ? ev->data.scalar.anchor
                                         : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                         : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.anchor
                                                                                 : NULL;
        Anchor *anchor = NULL;

        if (depth > YAML_TREE_MAX_DEPTH)
                return set_error(p->error, line, column, "nesting deeper than %u levels", YAML_TREE_MAX_DEPTH);
        if (ev->type == YAML_ALIAS_EVENT)
                return alias_expand(p, ev, depth, ret);
        if (anchor_name) {
                r = anchor_begin(p, (const char *) anchor_name, &anchor);
                if (r < 0)
                        return r;
        }

        if (ev->type == YAML_SCALAR_EVENT)
                n = ynode_alloc(YNODE_SCALAR, (const char *) ev->data.scalar.value, ev->data.scalar.length,
                                ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE);
        else
                n = ynode_alloc(ev->type == YAML_SEQUENCE_START_EVENT ? YNODE_SEQUENCE : YNODE_MAPPING, NULL, 0, false);
        if (!n)
                return -ENOMEM;
        n->line = line;
        n->column = column;

        switch (ev->type) {
        case YAML_SCALAR_EVENT:
                tag = (const char *) ev->data.scalar.tag;
                if (tag && streq(tag, YAML_STR_TAG)) {
                        n->plain = false;
                        tag = NULL;
                }
                break;
        case YAML_SEQUENCE_START_EVENT:
                tag = (const char *) ev->data.sequence_start.tag;
                r = parse_children(p, n, YAML_SEQUENCE_END_EVENT, depth);
                if (r < 0)
                        return r;
                break;
        case YAML_MAPPING_START_EVENT:
                tag = (const char *) ev->data.mapping_start.tag;
                r = parse_children(p, n, YAML_MAPPING_END_EVENT, depth);
                if (r < 0)
                        return r;
                break;
        default:
                return set_error(p->error, line, column, "unexpected YAML event");
        }
        if (tag && !streq(tag, YAML_SEQ_TAG) && !streq(tag, YAML_MAP_TAG))
                return set_error(p->error, line, column, "YAML tag '%s' is not supported", tag);
        if (anchor) {
                anchor_measure(n, 1, anchor);
                anchor->node = n; /* stays in the tree, which outlives the parse */
        }
        *ret = TAKE_PTR(n);
        return 0;
}

/* Expects the next event to be of type t; fails with a sentence otherwise. */
static int expect_event(Parser *p, yaml_event_type_t t, yaml_event_t *ret) {
        if (!yaml_parser_parse(&p->parser, ret))
                return set_error(p->error, p->parser.problem_mark.line + 1, p->parser.problem_mark.column + 1, "%s%s%s",
                                 p->parser.problem ?: "invalid YAML", p->parser.context ? " " : "",
                                 p->parser.context ?: "");
        if (ret->type != t) {
                unsigned line = ret->start_mark.line + 1, col = ret->start_mark.column + 1;
                yaml_event_delete(ret);
                return set_error(p->error, line, col,
                                 t == YAML_STREAM_END_EVENT ? "only one YAML document is allowed"
                                                            : "unexpected content");
        }
        return 0;
}

int yaml_tree_load(const char *text, size_t len, YNode **ret, char **ret_error) {
        _cleanup_(ynode_freep) YNode *root = NULL;
        Parser p = {.error = ret_error};
        yaml_event_t ev;
        int r;

        p.anchors = hashmap_new();
        p.graveyard = ynode_alloc(YNODE_SEQUENCE, NULL, 0, false);
        if (!p.anchors || !p.graveyard || !yaml_parser_initialize(&p.parser)) {
                hashmap_free(p.anchors);
                ynode_free(p.graveyard);
                return -ENOMEM;
        }
        yaml_parser_set_input_string(&p.parser, (const unsigned char *) text, len);

        r = expect_event(&p, YAML_STREAM_START_EVENT, &ev);
        if (r < 0)
                goto finish;
        yaml_event_delete(&ev);

        if (!yaml_parser_parse(&p.parser, &ev)) {
                r = set_error(ret_error, p.parser.problem_mark.line + 1, p.parser.problem_mark.column + 1, "%s%s%s",
                              p.parser.problem ?: "invalid YAML", p.parser.context ? " " : "", p.parser.context ?: "");
                goto finish;
        }
        if (ev.type == YAML_STREAM_END_EVENT) {
                yaml_event_delete(&ev);
                r = set_error(ret_error, 1, 1, "the file is empty");
                goto finish;
        }
        yaml_event_delete(&ev); /* DOCUMENT-START */

        if (!yaml_parser_parse(&p.parser, &ev)) {
                r = set_error(ret_error, p.parser.problem_mark.line + 1, p.parser.problem_mark.column + 1, "%s%s%s",
                              p.parser.problem ?: "invalid YAML", p.parser.context ? " " : "", p.parser.context ?: "");
                goto finish;
        }
        r = parse_node(&p, &ev, 1, &root);
        yaml_event_delete(&ev);
        if (r < 0)
                goto finish;
        r = expect_event(&p, YAML_DOCUMENT_END_EVENT, &ev);
        if (r < 0)
                goto finish;
        yaml_event_delete(&ev);
        r = expect_event(&p, YAML_STREAM_END_EVENT, &ev);
        if (r < 0)
                goto finish;
        yaml_event_delete(&ev);
        *ret = TAKE_PTR(root);
finish:
        yaml_parser_delete(&p.parser);
        {
                size_t state = 0;
                void *a;
                while (hashmap_iterate(p.anchors, &state, NULL, &a))
                        free(a);
                hashmap_free(p.anchors);
        }
        ynode_free(p.graveyard);
        return r;
}

static bool all_of(const char *s, const char *set) {
        return *s && strspn(s, set) == strlen(s);
}

/* YAML 1.2 core schema for plain scalars: null, bool, int, float; anything else is a string. */
static int plain_scalar_to_json(const YNode *n, cJSON **ret, char **ret_error) {
        const char *v = n->value, *digits = v + (*v == '-' || *v == '+');
        char *end;
        double d;

        if (n->length == 0 || streq(v, "~") || streq(v, "null") || streq(v, "Null") || streq(v, "NULL"))
                *ret = cJSON_CreateNull();
        else if (streq(v, "true") || streq(v, "True") || streq(v, "TRUE"))
                *ret = cJSON_CreateTrue();
        else if (streq(v, "false") || streq(v, "False") || streq(v, "FALSE"))
                *ret = cJSON_CreateFalse();
        else if (strncmp(v, "0x", 2) == 0 && all_of(v + 2, "0123456789abcdefABCDEF"))
                *ret = cJSON_CreateNumber((double) strtoull(v + 2, NULL, 16));
        else if (strncmp(v, "0o", 2) == 0 && all_of(v + 2, "01234567"))
                *ret = cJSON_CreateNumber((double) strtoull(v + 2, NULL, 8));
        else if (strcasecmp(digits, ".inf") == 0 || strcasecmp(v, ".nan") == 0)
                return set_error(ret_error, n->line, n->column, "'%s' has no JSON equivalent; quote it for a string",
                                 v);
        else if ((digits[0] >= '0' && digits[0] <= '9') || (digits[0] == '.' && digits[1] >= '0' && digits[1] <= '9')) {
                errno = 0;
                d = strtod(v, &end);
                if (*end == 0 && errno == 0 && isfinite(d) && all_of(digits, "0123456789.eE+-"))
                        *ret = cJSON_CreateNumber(d);
                else
                        *ret = cJSON_CreateString(v);
        } else
                *ret = cJSON_CreateString(v);
        return *ret ? 0 : -ENOMEM;
}

int ynode_to_json(const YNode *n, cJSON **ret, char **ret_error) {
        _cleanup_json_ cJSON *j = NULL;
        int r;

        if (n->kind == YNODE_SCALAR) {
                if (!n->plain) {
                        j = cJSON_CreateString(n->value);
                        if (!j)
                                return -ENOMEM;
                        if (strlen(n->value) != n->length)
                                return set_error(ret_error, n->line, n->column, "strings may not contain NUL");
                        *ret = TAKE_PTR(j);
                        return 0;
                }
                return plain_scalar_to_json(n, ret, ret_error);
        }

        j = n->kind == YNODE_SEQUENCE ? cJSON_CreateArray() : cJSON_CreateObject();
        if (!j)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i++) {
                const YNode *key = n->kind == YNODE_MAPPING ? n->items[i++] : NULL;
                cJSON *child;

                r = ynode_to_json(n->items[i], &child, ret_error);
                if (r < 0)
                        return r;
                if (!(key ? cJSON_AddItemToObject(j, key->value, child) : cJSON_AddItemToArray(j, child))) {
                        cJSON_Delete(child);
                        return -ENOMEM;
                }
        }
        *ret = TAKE_PTR(j);
        return 0;
}

static YNode *ynode_new(YNodeKind kind, const char *value, bool plain) {
        return ynode_alloc(kind, value, value ? strlen(value) : 0, plain);
}

/* JSON -> tree, typed as the YAML path would type the same text; -EINVAL for what YAML refuses
 * (duplicate keys, nesting past the limit), so that the caller can take the YAML path for its
 * positioned error. */
static int from_json(const cJSON *j, unsigned depth, YNode **ret) {
        _cleanup_(ynode_freep) YNode *n = NULL;
        _cleanup_(hashmap_freep) Hashmap *index = NULL;
        const cJSON *c;
        int r;

        if (depth > YAML_TREE_MAX_DEPTH)
                return -EINVAL;
        if (cJSON_IsString(j))
                n = ynode_new(YNODE_SCALAR, j->valuestring, false);
        else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
                n = ynode_new(cJSON_IsArray(j) ? YNODE_SEQUENCE : YNODE_MAPPING, NULL, false);
                if (!n)
                        return -ENOMEM;
                cJSON_ArrayForEach (c, j) {
                        YNode *child;
                        if (cJSON_IsObject(j)) {
                                r = mapping_has_key(n, &index, c->string);
                                if (r != 0)
                                        return r < 0 ? r : -EINVAL;
                                child = ynode_new(YNODE_SCALAR, c->string, false);
                                if (!child || ynode_append(n, child) < 0)
                                        return child ? (ynode_free(child), -ENOMEM) : -ENOMEM;
                        }
                        r = from_json(c, depth + 1, &child);
                        if (r < 0)
                                return r;
                        if (ynode_append(n, child) < 0) {
                                ynode_free(child);
                                return -ENOMEM;
                        }
                }
        } else {
                _cleanup_free_ char *text = cJSON_PrintUnformatted(j);
                if (!text)
                        return -ENOMEM;
                n = ynode_new(YNODE_SCALAR, text, true);
        }
        if (!n)
                return -ENOMEM;
        *ret = TAKE_PTR(n);
        return 0;
}

int ynode_from_json(const cJSON *j, YNode **ret) {
        return from_json(j, 1, ret);
}

/* The tree as JSON, losing nothing the manifest reader looks at: mappings are objects, sequences
 * arrays, and every scalar a string whose first character says how it was written: "=" plain
 * (may become a number, a bool or null), "'" quoted. Strings only: cJSON reads that fastest. */
cJSON *ynode_encode(const YNode *n) {
        _cleanup_json_ cJSON *a = NULL;

        if (n->kind == YNODE_SCALAR) {
                _cleanup_free_ char *v = malloc(n->length + 2);
                if (!v)
                        return NULL;
                v[0] = n->plain ? '=' : '\'';
                memcpy(v + 1, n->value, n->length + 1);
                return cJSON_CreateString(v);
        }
        a = n->kind == YNODE_SEQUENCE ? cJSON_CreateArray() : cJSON_CreateObject();
        if (!a)
                return NULL;
        for (size_t i = 0; i < n->n_items; i++) {
                const YNode *key = n->kind == YNODE_MAPPING ? n->items[i++] : NULL;
                cJSON *c = ynode_encode(n->items[i]);
                if (!c || !(key ? cJSON_AddItemToObject(a, key->value, c) : cJSON_AddItemToArray(a, c))) {
                        cJSON_Delete(c);
                        return NULL;
                }
        }
        return TAKE_PTR(a);
}

int ynode_decode(const cJSON *j, YNode **ret) {
        _cleanup_(ynode_freep) YNode *n = NULL;
        const cJSON *c;

        if (cJSON_IsString(j)) {
                if (j->valuestring[0] != '=' && j->valuestring[0] != '\'')
                        return -EINVAL;
                n = ynode_new(YNODE_SCALAR, j->valuestring + 1, j->valuestring[0] == '=');
        } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
                n = ynode_new(cJSON_IsArray(j) ? YNODE_SEQUENCE : YNODE_MAPPING, NULL, false);
                if (!n)
                        return -ENOMEM;
                cJSON_ArrayForEach (c, j) {
                        YNode *child;
                        int r;

                        if (cJSON_IsObject(j)) {
                                child = ynode_new(YNODE_SCALAR, c->string, false);
                                if (!child || ynode_append(n, child) < 0)
                                        return child ? (ynode_free(child), -ENOMEM) : -ENOMEM;
                        }
                        r = ynode_decode(c, &child);
                        if (r < 0)
                                return r;
                        if (ynode_append(n, child) < 0) {
                                ynode_free(child);
                                return -ENOMEM;
                        }
                }
        } else
                return -EINVAL;
        if (!n)
                return -ENOMEM;
        *ret = TAKE_PTR(n);
        return 0;
}
