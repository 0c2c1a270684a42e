/* Private helpers shared by the flag table (config.c) and its engine (flags.c). */
#ifndef DT_TRAIN_FLAGS_H
#define DT_TRAIN_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

/* The shortest decimal that reads back (strtod, then to float when as_float)
 * to exactly v: "0.1" for 0.1f, not "0.100000001". */
void fl_format_real(double v, bool as_float, char *buf, size_t n);

#endif
