/* Remote addresses of backends on other hosts: "ssh://[user@]HOST[:PORT]" and "vsock:CID:PORT". */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macros.h"
#include "manifest.h"

#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

static bool has_prefix(const char *s, const char *prefix) {
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int parse_uint(const char *s, size_t n, unsigned long max, unsigned *ret) {
        unsigned long v = 0;

        if (n == 0 || n > 10 || strspn(s, "0123456789") < n)
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                v = v * 10 + (unsigned long) (s[i] - '0');
        if (v > max)
                return -ERANGE;
        *ret = (unsigned) v;
        return 0;
}

/* A word ssh takes as a user or host name, never as an option: no leading '-', no spaces or shell
 * characters (ssh hands the destination to ProxyCommand's %h, among others). */
static bool word_valid(const char *s, size_t n, const char *extra) {
        size_t k = 0;

        if (n == 0 || n > 253 || s[0] == '-')
                return false;
        while (k < n && (strchr(NAME_CHARS, s[k]) || strchr(extra, s[k])) && s[k])
                k++;
        return k == n;
}

static int parse_ssh(const char *t, Remote *r, const char **ret_why) {
        const char *at = strchr(t, '@'), *h = at ? at + 1 : t, *end, *port = NULL;
        size_t hlen;

        if (at && !word_valid(t, (size_t) (at - t), "._-")) {
                *ret_why = "the user name must be letters, digits, '.', '_' or '-', not starting with '-'";
                return -EINVAL;
        }
        if (*h == '[') {
                end = strchr(h, ']');
                if (!end || !word_valid(h + 1, (size_t) (end - h - 1), ":.%")) {
                        *ret_why = "an IPv6 address must be written as [ADDRESS]";
                        return -EINVAL;
                }
                h++;
                hlen = (size_t) (end - h);
                end++;
        } else {
                end = h + strcspn(h, ":/");
                hlen = (size_t) (end - h);
                if (!word_valid(h, hlen, ".-_")) {
                        *ret_why = "the host must be a name or an address (letters, digits, '.', '-', '_'), not "
                                   "starting with '-'";
                        return -EINVAL;
                }
        }
        if (*end == ':')
                port = end + 1;
        else if (*end != 0) {
                *ret_why = "nothing may follow the host but :PORT (no path)";
                return -EINVAL;
        }
        if (port && parse_uint(port, strlen(port), 65535, &r->port) < 0) {
                *ret_why = "the port must be a number from 1 to 65535";
                return -EINVAL;
        }
        if (port && r->port == 0) {
                *ret_why = "the port must be a number from 1 to 65535";
                return -EINVAL;
        }
        if ((at && !(r->ssh_user = strndup(t, (size_t) (at - t)))) || !(r->ssh_host = strndup(h, hlen)))
                return -ENOMEM;
        r->kind = REMOTE_SSH;
        return 0;
}

static int parse_vsock(const char *t, Remote *r, const char **ret_why) {
        const char *colon = strchr(t, ':');

        if (!colon || parse_uint(t, (size_t) (colon - t), UINT32_MAX, &r->cid) < 0 ||
            parse_uint(colon + 1, strlen(colon + 1), UINT32_MAX, &r->port) < 0) {
                *ret_why = "write vsock:CID:PORT with two numbers, e.g. vsock:3:5000";
                return -EINVAL;
        }
        r->kind = REMOTE_VSOCK;
        return 0;
}

int remote_parse(const char *text, Remote *r, const char **ret_why) {
        Remote n = {};
        int k;

        if (has_prefix(text, "ssh://"))
                k = parse_ssh(text + strlen("ssh://"), &n, ret_why);
        else if (has_prefix(text, "vsock:"))
                k = parse_vsock(text + strlen("vsock:"), &n, ret_why);
        else {
                *ret_why = "write ssh://[user@]HOST[:PORT] or vsock:CID:PORT";
                k = -EINVAL;
        }
        if (k >= 0 && !(n.host = strdup(text)))
                k = -ENOMEM;
        if (k < 0) {
                remote_done(&n);
                return k;
        }
        *r = n;
        return 0;
}

void remote_done(Remote *r) {
        free(r->host);
        free(r->ssh_user);
        free(r->ssh_host);
        free(r->remote_name);
        *r = (Remote){};
}
