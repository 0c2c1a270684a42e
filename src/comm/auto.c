/* AUTO: which algorithm serves an all-reduce of n bytes on p ranks.
 * Thresholds measured with `dtrain bench allreduce --algo all` (see the table
 * below); placeholder values until measured. */
#include "comm/comm_internal.h"

#define DT_AUTO_RD_MAX ((size_t)16 << 10)   /* below: recursive doubling */
#define DT_AUTO_RHD_MAX ((size_t)1 << 20)   /* below: rhd; above: ring */

dt_algo dt_auto_allreduce(const dt_comm *c, size_t bytes) {
    if (bytes <= DT_AUTO_RD_MAX) return DT_ALGO_RD;
    if (bytes <= DT_AUTO_RHD_MAX) return DT_ALGO_RHD;
    return DT_ALGO_RING;
}

dt_algo dt_auto_reduce_scatter(const dt_comm *c, size_t bytes) {
    return bytes <= DT_AUTO_RD_MAX ? DT_ALGO_RD : DT_ALGO_RING;
}
