/* The run directory's side of elastic parameter-server jobs: the job's
 * secret (OUT/join.token, 0600, made by the launcher), the file a joiner
 * reads (OUT/join.json: server 0's port and the job's command line, written
 * whole or not at all), and the control files that ask a worker to leave
 * (OUT/leave.K). Cost: one stat per step on each worker. */
#include "elastic.h"

#include "run.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dt_status tr_elastic_secret(const char *dir, char *buf, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/join.token", dir ? dir : ".");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dt_errorf(DT_ERR_IO, "%s: %s (workers join a job that dtrain's launcher started with --elastic; it writes this "
                         "token)", path, strerror(errno));
    if (sb.st_mode & 077)
        return dt_errorf(DT_ERR_INVALID, "%s is readable by others (mode %03o): the job's secret must be private; chmod 600 it",
                         path, (unsigned)(sb.st_mode & 0777));
    FILE *f = fopen(path, "r");
    if (!f) return dt_errorf(DT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = '\0';
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r')) buf[--got] = '\0';
    if (got < 16 || got > 64)
        return dt_errorf(DT_ERR_INVALID, "%s holds %zu characters; a token has 16 to 64", path, got);
    return DT_OK;
}

void tr_elastic_publish(void *ctx, const char *port) {
    const tr_run *r = ctx;
    const dt_train_cfg *c = r->c;
    json_error_t err;
    json_t *o = c->config_json ? json_loads(c->config_json, 0, &err) : NULL;
    if (!o) o = json_object();
    json_object_set_new(o, "port", json_string(port));
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/join.json", c->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(o, tmp, JSON_COMPACT);
    json_decref(o);
    if (rc != 0 || rename(tmp, path) != 0) {
        dt_log(DT_LOG_WARN, "cannot write %s (workers cannot join): %s", path, strerror(errno));
        unlink(tmp);
        return;
    }
    dt_log(DT_LOG_INFO, "workers may join: dtrain train --join %s", c->out_dir);
}

bool tr_elastic_leave_asked(const dt_train_cfg *c, int slot) {
    const char *dir = c->join_port ? c->join_dir : c->out_dir;
    if (!dir) return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/leave.%d", dir, slot);
    return access(path, F_OK) == 0;
}
