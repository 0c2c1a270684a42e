/* Private to the safetensors reader (safetensors.c) and writer
 * (safetensors_write.c): the header's metadata key and the message helper. */
#ifndef DTRAIN_ST_INTERNAL_H
#define DTRAIN_ST_INTERNAL_H

#include "dtrain/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dtrain's safetensors code assumes a little-endian host"
#endif

#define ST_META_KEY "__metadata__"

/* Names come from untrusted JSON: s made one short line in buf (cap bytes). */
const char *dt_st_printable(const char *s, char *buf, size_t cap);

#endif
