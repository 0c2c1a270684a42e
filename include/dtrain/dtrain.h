/* dtrain: the whole public API in one include. An embedder writes
 *   #include <dtrain/dtrain.h>
 * and links with `pkg-config --libs dtrain` (examples/README.md). The test
 * hooks in dtrain/testing.h are deliberately not included: they are unstable. */
#ifndef DTRAIN_DTRAIN_H
#define DTRAIN_DTRAIN_H

#include "dtrain/core.h"        /* status codes, errors, allocation, arenas, RNG, logging, clocks */
#include "dtrain/nn.h"          /* layer kernels: pure forward/backward functions */
#include "dtrain/model.h"       /* models as block lists over a flat parameter arena */
#include "dtrain/optim.h"       /* SGD, AdamW, learning-rate schedules, gradient clipping */
#include "dtrain/data.h"        /* IDX datasets, byte corpora, the sharded sampler */
#include "dtrain/loader.h"      /* a run's data behind "next batch" and "evaluation batch" */
#include "dtrain/comm.h"        /* communicators, point-to-point with deadlines, collectives */
#include "dtrain/compress.h"    /* gradient codecs and error feedback */
#include "dtrain/gradcomp.h"    /* compressed collectives (PowerSGD among them) */
#include "dtrain/parallel.h"    /* data parallelism: buckets, overlap, ZeRO */
#include "dtrain/pipeline.h"    /* pipeline stages and schedules (GPipe, 1F1B) */
#include "dtrain/hogwild.h"     /* Hogwild! threads over one parameter arena */
#include "dtrain/aggregate.h"   /* Byzantine-robust aggregation rules */
#include "dtrain/robust.h"      /* robust reduction over a group, worker momentum, simulated attacks */
#include "dtrain/ps.h"          /* parameter server (BSP, ASP, SSP) */
#include "dtrain/crc32c.h"      /* CRC32C checksums */
#include "dtrain/safetensors.h" /* safetensors reader and writer */
#include "dtrain/weights.h"     /* weights files with PyTorch's tensor names */
#include "dtrain/ckpt.h"        /* atomic, checksummed, sharded checkpoints */
#include "dtrain/trace.h"       /* Chrome-trace timeline */
#include "dtrain/report.h"      /* reporter hooks: each step, evaluation and the end of a run */
#include "dtrain/train.h"       /* the training loop: config, run, evaluate */

#endif
