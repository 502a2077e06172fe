/* Included ahead of shimd/subscribe.c as fuzz-shim builds it (Makefile): limits that an input of a few
 * lines reaches (a subscribe refused because too many wait for the backend's stream, or because its
 * session holds too many). */
#define SUBSCRIBE_MAX_WAITERS    2U
#define SUBSCRIBE_MAX_PER_CLIENT 4U
