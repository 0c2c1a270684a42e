/* Private helpers of the data layer: read-only file maps and the zip
 * directory the .npz reader walks. */
#ifndef DT_DATA_INT_H
#define DT_DATA_INT_H

#include "dtrain/data.h"

/* Maps the whole regular file at path read-only. An empty file gives
 * p == NULL, n == 0 (not an error). Errors name the file. */
typedef struct data_fmap {
    void *p;
    size_t n;
} data_fmap;
dt_status data_fmap_open(const char *path, data_fmap *m);
void data_fmap_close(data_fmap *m); /* NULL and a zeroed map ok */

/* One member of a zip archive, from the central directory (zip64 fields
 * read). data points at the member's bytes inside the archive image. */
typedef struct data_zip_entry {
    const char *name;       /* not NUL-terminated: name_len bytes in the image */
    size_t name_len;
    int method;             /* 0 stored, 8 deflated (others refused by data_zip_read) */
    uint32_t crc;
    uint64_t csize, usize;  /* compressed and uncompressed sizes */
    const uint8_t *data;    /* csize bytes */
} data_zip_entry;

/* Parses the archive image buf[0, len): *entries (dt_free) gets *n members.
 * Every offset and size is checked against len. name is the file for messages. */
dt_status data_zip_list(const uint8_t *buf, size_t len, const char *name, data_zip_entry **entries,
                        int *n);
/* The member's bytes: stored ones in place (*owned NULL), deflated ones
 * inflated into *owned (dt_free) with the CRC-32 checked. */
dt_status data_zip_read(const data_zip_entry *e, const char *name, const void **bytes,
                        void **owned);

/* The IDX files of an image-set folder (imageset.c's names, plain or .gz) for
 * the training or test split, of any type and shape, whose first dimensions
 * agree. Errors as dt_imageset_load's; on error both are freed. */
dt_status data_idx_pair(const char *dir, bool train, dt_idx *img, dt_idx *lab);

/* "dir/name" (dt_free), NULL when out of memory. */
char *data_join(const char *dir, const char *name);
bool data_is_file(const char *path);
bool data_is_dir(const char *path);
/* s[0, n) (or up to its NUL) made fit for a one-line message: control bytes
 * become '?', at most cap - 1 bytes are kept. Returns buf. */
const char *data_clean(const char *s, size_t n, char *buf, size_t cap);
/* Whether dir holds a regular file (not a dotfile) whose name ends in suffix. */
bool data_dir_has_suffix(const char *dir, const char *suffix);

#endif
