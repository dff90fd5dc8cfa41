/* autotune's runtime library, C ABI (for C programs and for Python via ctypes).
 * Every function returns AUTOTUNE_OK (0) or an error code; autotune_last_error()
 * gives the message of the last failure on the calling thread. */
#ifndef AUTOTUNE_H
#define AUTOTUNE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum autotune_status {
  AUTOTUNE_OK = 0,
  AUTOTUNE_ERROR_INVALID_ARGUMENT = 1, /* bad shape, dtype, stride, pointer */
  AUTOTUNE_ERROR_NO_DEVICE = 2,        /* no driver or no GPU */
  AUTOTUNE_ERROR_CUDA = 3,             /* a driver call or a launch failed */
  AUTOTUNE_ERROR_DATABASE = 4,         /* the tuning database cannot be used */
  AUTOTUNE_ERROR_NOT_TUNED = 5,        /* require_tuned was set and nothing is stored */
  AUTOTUNE_ERROR_INTERNAL = 6
};

enum autotune_dtype { AUTOTUNE_FP32 = 0, AUTOTUNE_FP16 = 1, AUTOTUNE_BF16 = 2 };

typedef struct autotune_runtime autotune_runtime;

/* database: path or NULL for the default path. */
int autotune_runtime_create(const char* database, int require_tuned, autotune_runtime** out);
void autotune_runtime_destroy(autotune_runtime* rt);
const char* autotune_last_error(void);

typedef struct autotune_causal_conv1d_args {
  const void* x;
  const void* weight;
  const void* bias; /* NULL: no bias */
  void* out;
  int64_t batch, channels, length, width;
  int32_t x_dtype, weight_dtype; /* enum autotune_dtype */
  int32_t silu;
  /* strides in elements; negative means contiguous */
  int64_t x_batch_stride, x_channel_stride, out_batch_stride, out_channel_stride;
} autotune_causal_conv1d_args;

/* stream: a CUstream (cudaStream_t), NULL for the legacy default stream. */
int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream);
/* Writes "source variant" (e.g. "tuned threads=128,...") of the variant args resolve to. */
int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size);

#ifdef __cplusplus
}
#endif

#endif
