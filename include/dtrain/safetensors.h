/* dtrain safetensors: reader and writer (https://github.com/huggingface/safetensors).
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 *   { "name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *     "__metadata__": {"key": "value", ...} }
 * then the byte buffer; offsets are relative to it. The reader checks everything:
 * header length against the file size and a 100 MB cap, valid JSON object,
 * known dtype, shape product times dtype size == end - begin (no overflow),
 * offsets inside the buffer, tensors tiling the buffer with no gaps or overlaps,
 * metadata values strings, no duplicate names. */
#ifndef DTRAIN_SAFETENSORS_H
#define DTRAIN_SAFETENSORS_H

#include "dtrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_dtype {
    DT_F64, DT_F32, DT_F16, DT_BF16, DT_I64, DT_I32, DT_I16, DT_I8, DT_U8, DT_BOOL,
    DT_DTYPE_COUNT
} dt_dtype;

const char *dt_dtype_name(dt_dtype t);     /* "F32" */
size_t dt_dtype_size(dt_dtype t);          /* bytes per element */

#define DT_ST_MAX_DIMS 8
typedef struct dt_st_tensor {
    char *name;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
    size_t numel;
    size_t begin, end;  /* byte range in the data buffer */
} dt_st_tensor;

typedef struct dt_st_file dt_st_file;

/* Reads and validates a whole file. On success *out is owned by the caller
 * (dt_st_close). Errors: DT_ERR_IO (cannot open/read), DT_ERR_FORMAT (anything
 * malformed), each with one line naming the file and the fault. */
dt_status dt_st_open(const char *path, dt_st_file **out);
/* Same, from memory (copies nothing: buf must outlive the handle). name is
 * used in error messages. */
dt_status dt_st_parse(const uint8_t *buf, size_t len, const char *name, dt_st_file **out);
void dt_st_close(dt_st_file *f); /* NULL ok */

int dt_st_count(const dt_st_file *f);
const dt_st_tensor *dt_st_get(const dt_st_file *f, int i); /* in file order of offsets */
const dt_st_tensor *dt_st_find(const dt_st_file *f, const char *name); /* NULL if absent */
const void *dt_st_data(const dt_st_file *f, const dt_st_tensor *t); /* raw bytes */
/* Metadata value or NULL. */
const char *dt_st_meta(const dt_st_file *f, const char *key);
int dt_st_meta_count(const dt_st_file *f);
void dt_st_meta_at(const dt_st_file *f, int i, const char **key, const char **value);

/* Copies tensor t into dst (n floats, n must equal t->numel), converting from
 * F32, F16, BF16 or F64. Other dtypes: DT_ERR_FORMAT. */
dt_status dt_st_read_f32(const dt_st_file *f, const dt_st_tensor *t, float *dst, size_t n);
/* Copies an integer tensor (I64, I32, I16, I8, U8) into int32 (range-checked). */
dt_status dt_st_read_i32(const dt_st_file *f, const dt_st_tensor *t, int32_t *dst, size_t n);

/* ---- writer ----------------------------------------------------------------
 * Collects tensors (pointers are borrowed until dt_st_writer_write returns) and
 * metadata, then writes the file atomically: a temporary file in the same
 * directory, fsync, rename over `path`, fsync of the directory. */
typedef struct dt_st_writer dt_st_writer;
dt_status dt_st_writer_create(dt_st_writer **out);
void dt_st_writer_destroy(dt_st_writer *w); /* NULL ok */
dt_status dt_st_writer_add(dt_st_writer *w, const char *name, dt_dtype dtype, int ndim,
                           const int64_t *shape, const void *data);
dt_status dt_st_writer_meta(dt_st_writer *w, const char *key, const char *value);
dt_status dt_st_writer_write(dt_st_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif
