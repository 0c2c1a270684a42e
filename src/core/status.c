/* Status codes and the per-thread error line. */
#include "dtrain/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_msg[1024];

const char *dt_status_str(dt_status s) {
    static const char *names[DT_STATUS_COUNT] = {
        [DT_OK] = "ok",
        [DT_ERR_NOMEM] = "out of memory",
        [DT_ERR_INVALID] = "invalid argument",
        [DT_ERR_IO] = "i/o error",
        [DT_ERR_FORMAT] = "malformed file",
        [DT_ERR_SHAPE] = "shape mismatch",
        [DT_ERR_UNSUPPORTED] = "unsupported",
        [DT_ERR_TIMEOUT] = "timed out",
        [DT_ERR_COMM] = "communication error",
    };
    if ((unsigned)s >= DT_STATUS_COUNT) return "unknown status";
    return names[s];
}

dt_status dt_errorf(dt_status code, const char *fmt, ...) {
    /* Formatted aside first: the arguments may include dt_error_msg() itself
     * ("...: %s", dt_error_msg()), which must not be overwritten while read. */
    char buf[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(g_msg, buf, sizeof g_msg);
    return code;
}

const char *dt_error_msg(void) { return g_msg; }
void dt_error_clear(void) { g_msg[0] = '\0'; }

/* A broken invariant ends the process at once, where it broke (a debugger or
 * core dump stops on the trap instruction). The library calls neither exit()
 * nor abort(): abort() raises SIGABRT, which a program may catch and turn into
 * an orderly exit through state the failed invariant has just shown corrupt. */
void dt_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "dtrain: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    fflush(stderr);
    __builtin_trap();
}
