/* Included ahead of shimd/subscribe.c as fuzz-shim builds it (Makefile): limits that an input of a few
 * lines reaches (a subscribe refused because too many wait for the backend's stream, or because its
 * session holds too many), and its allocations through the harness, which fails one when an input line
 * "O" says so (fuzz-shim.c, alloc_fails()). fuzz-shim.c includes it for the prototypes and limits alone. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

struct Message;

void *fuzz_shim_calloc(size_t n, size_t size);
char *fuzz_shim_strdup(const char *s);
cJSON *fuzz_shim_cJSON_CreateArray(void);
cJSON *fuzz_shim_cJSON_CreateString(const char *s);
char *fuzz_shim_cJSON_PrintUnformatted(const cJSON *item);
cJSON *fuzz_shim_era_resource_uris_new(const struct Message *m, const char *const *path, const cJSON *tree,
                                       size_t *ret_n_nul);

#define SUBSCRIBE_MAX_WAITERS    2U
#define SUBSCRIBE_MAX_PER_CLIENT 4U

/* Each URI array_has() compares is counted (fuzz-shim.c checks what a line costs), and so is each step
 * along a cJSON array's list: reaching an item by index walks the list from its head. */
void fuzz_shim_uri_compared(void);
cJSON *fuzz_shim_cJSON_GetArrayItem(const cJSON *array, int index);
void fuzz_shim_cJSON_DeleteItemFromArray(cJSON *array, int which);

/* Each URI hashed into a set or looked up in an instance's count of what its sessions hold: a session that
 * leaves a handshake-era backend costs its own URIs, whatever the others hold (fuzz-shim.c). */
void fuzz_shim_uri_hashed(void);

#ifndef FUZZ_SHIM_HARNESS
#define SUBSCRIBE_URI_COMPARED() fuzz_shim_uri_compared()
#define SUBSCRIBE_URI_HASHED()   fuzz_shim_uri_hashed()

#define calloc                 fuzz_shim_calloc
#define strdup                 fuzz_shim_strdup
#define cJSON_CreateArray      fuzz_shim_cJSON_CreateArray
#define cJSON_CreateString     fuzz_shim_cJSON_CreateString
#define cJSON_PrintUnformatted fuzz_shim_cJSON_PrintUnformatted
#define era_resource_uris_new  fuzz_shim_era_resource_uris_new
#define cJSON_GetArrayItem        fuzz_shim_cJSON_GetArrayItem
#define cJSON_DeleteItemFromArray fuzz_shim_cJSON_DeleteItemFromArray
#endif
