/* Logging to stderr with an optional rank prefix. */
#include "dtrain/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static dt_log_level g_level = DT_LOG_INFO;
static int g_rank = -1;

void dt_log_set_level(dt_log_level lvl) { g_level = lvl; }
void dt_log_set_rank(int rank) { g_rank = rank; }

void dt_log(dt_log_level lvl, const char *fmt, ...) {
    if (lvl > g_level) return;
    static const char *tags[] = {"error", "warning", "info", "debug"};
    char line[2048];
    int n = 0;
    if (g_rank >= 0) n = snprintf(line, sizeof line, "dtrain[%d]: ", g_rank);
    else n = snprintf(line, sizeof line, "dtrain: ");
    if (lvl != DT_LOG_INFO) n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", tags[lvl]);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
