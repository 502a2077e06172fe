/* Logging to stderr, or straight to the journal when stderr is a journal stream. */
#pragma once

#include <syslog.h>
#include "macros.h"

void log_setup(const char *program);
void log_set_max_level(int level);
void log_set_field(const char *field, const char *value); /* e.g. MCP_LAZY_BACKEND=database */
int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) _printf_(5, 6);

/* Each returns -abs(error) (or 0 for plain logs), so "return log_error_errno(r, ...)" works. %m prints error. */
#define log_full_errno(level, error, ...) log_internal((level), (error), __FILE__, __LINE__, __VA_ARGS__)
#define log_debug(...)                    log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...)                     log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...)                   log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...)                  log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...)                    log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_debug_errno(e, ...)           log_full_errno(LOG_DEBUG, (e), __VA_ARGS__)
#define log_warning_errno(e, ...)         log_full_errno(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...)           log_full_errno(LOG_ERR, (e), __VA_ARGS__)
#define log_oom()                         log_error_errno(-ENOMEM, "Out of memory.")
