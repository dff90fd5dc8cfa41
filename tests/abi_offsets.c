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
  first = 0;
  printf("}}, \"attention\": {\"size\": %zu, \"fields\": {", sizeof(autotune_attention_args));
  FIELD(autotune_attention_args, q);
  FIELD(autotune_attention_args, k);
  FIELD(autotune_attention_args, v);
  FIELD(autotune_attention_args, o);
  FIELD(autotune_attention_args, lse);
  FIELD(autotune_attention_args, batch);
  FIELD(autotune_attention_args, heads_q);
  FIELD(autotune_attention_args, heads_kv);
  FIELD(autotune_attention_args, seq_q);
  FIELD(autotune_attention_args, seq_k);
  FIELD(autotune_attention_args, head_dim);
  FIELD(autotune_attention_args, dtype);
  FIELD(autotune_attention_args, causal);
  FIELD(autotune_attention_args, layout_bhsd);
  FIELD(autotune_attention_args, scale);
  FIELD(autotune_attention_args, q_strides);
  FIELD(autotune_attention_args, k_strides);
  FIELD(autotune_attention_args, v_strides);
  FIELD(autotune_attention_args, o_strides);
  FIELD(autotune_attention_args, workspace);
  FIELD(autotune_attention_args, workspace_bytes);
  first = 0;
  printf("}}, \"selective_scan\": {\"size\": %zu, \"fields\": {",
         sizeof(autotune_selective_scan_args));
  FIELD(autotune_selective_scan_args, u);
  FIELD(autotune_selective_scan_args, delta);
  FIELD(autotune_selective_scan_args, A);
  FIELD(autotune_selective_scan_args, B);
  FIELD(autotune_selective_scan_args, C);
  FIELD(autotune_selective_scan_args, D);
  FIELD(autotune_selective_scan_args, z);
  FIELD(autotune_selective_scan_args, delta_bias);
  FIELD(autotune_selective_scan_args, out);
  FIELD(autotune_selective_scan_args, last_state);
  FIELD(autotune_selective_scan_args, batch);
  FIELD(autotune_selective_scan_args, dim);
  FIELD(autotune_selective_scan_args, length);
  FIELD(autotune_selective_scan_args, dstate);
  FIELD(autotune_selective_scan_args, groups);
  FIELD(autotune_selective_scan_args, dtype);
  FIELD(autotune_selective_scan_args, variable_bc);
  FIELD(autotune_selective_scan_args, delta_softplus);
  FIELD(autotune_selective_scan_args, u_strides);
  FIELD(autotune_selective_scan_args, delta_strides);
  FIELD(autotune_selective_scan_args, z_strides);
  FIELD(autotune_selective_scan_args, out_strides);
  FIELD(autotune_selective_scan_args, b_strides);
  FIELD(autotune_selective_scan_args, c_strides);
  printf("}}}\n");
  return 0;
}
