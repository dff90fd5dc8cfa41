/* Prints the C ABI structs' sizes and field offsets as JSON, for
 * tests/check_python_abi.py to compare with runtime/python/autotune_runtime.py. */
#include "autotune.h"

#include <stddef.h>
#include <stdio.h>

#define FIELD(T, f) printf("%s\"%s\": %zu", first++ ? ", " : "", #f, offsetof(T, f))

int main(void) {
  int first = 0;
  printf("{\"causal_conv1d\": {\"size\": %zu, \"fields\": {", sizeof(autotune_causal_conv1d_args));
  FIELD(autotune_causal_conv1d_args, x);
  FIELD(autotune_causal_conv1d_args, weight);
  FIELD(autotune_causal_conv1d_args, bias);
  FIELD(autotune_causal_conv1d_args, out);
  FIELD(autotune_causal_conv1d_args, batch);
  FIELD(autotune_causal_conv1d_args, channels);
  FIELD(autotune_causal_conv1d_args, length);
  FIELD(autotune_causal_conv1d_args, width);
  FIELD(autotune_causal_conv1d_args, x_dtype);
  FIELD(autotune_causal_conv1d_args, weight_dtype);
  FIELD(autotune_causal_conv1d_args, silu);
  FIELD(autotune_causal_conv1d_args, x_batch_stride);
  FIELD(autotune_causal_conv1d_args, x_channel_stride);
  FIELD(autotune_causal_conv1d_args, out_batch_stride);
  FIELD(autotune_causal_conv1d_args, out_channel_stride);
  FIELD(autotune_causal_conv1d_args, initial_states);
  FIELD(autotune_causal_conv1d_args, final_states);
  printf("}}}\n");
  return 0;
}
