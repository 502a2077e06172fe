/* mcp-lazy status for backends on other hosts. */
#pragma once

#include <stdbool.h>
#include <cjson/cJSON.h>

#include "manifest.h"

typedef struct RemoteLook {
        bool checked, reachable;
        char *reason; /* one line (ssh's own words when it could not connect); NULL: none */
        cJSON *there; /* the remote's status of that backend, when it answered */
} RemoteLook;

/* Asks each ssh host of the manifest's backends, all at once, within 15 s: looks[i] for backends[i]. */
int status_remote_look(const Manifest *m, RemoteLook *looks);
void remote_look_done(RemoteLook *l);
