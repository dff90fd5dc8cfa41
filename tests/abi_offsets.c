/* Prints the C ABI structs' sizes and field offsets as JSON, for
 * tests/check_python_abi.py to compare with what the library describes. */
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
  FIELD(autotune_causal_conv1d_args, initial_states);
  FIELD(autotune_causal_conv1d_args, out);
  FIELD(autotune_causal_conv1d_args, final_states);
  FIELD(autotune_causal_conv1d_args, silu);
  FIELD(autotune_causal_conv1d_args, seq_idx);
  first = 0;
  printf("}}, \"attention\": {\"size\": %zu, \"fields\": {", sizeof(autotune_attention_args));
  FIELD(autotune_attention_args, q);
  FIELD(autotune_attention_args, k);
  FIELD(autotune_attention_args, v);
  FIELD(autotune_attention_args, o);
  FIELD(autotune_attention_args, lse);
  FIELD(autotune_attention_args, causal);
  FIELD(autotune_attention_args, scale);
  FIELD(autotune_attention_args, workspace);
  FIELD(autotune_attention_args, workspace_bytes);
  FIELD(autotune_attention_args, window);
  FIELD(autotune_attention_args, window_left);
  FIELD(autotune_attention_args, window_right);
  FIELD(autotune_attention_args, softcap);
  FIELD(autotune_attention_args, alibi_slopes);
  FIELD(autotune_attention_args, cu_seqlens_q);
  FIELD(autotune_attention_args, cu_seqlens_k);
  FIELD(autotune_attention_args, max_seqlen_q);
  FIELD(autotune_attention_args, max_seqlen_k);
  FIELD(autotune_attention_args, cache_seqlens);
  FIELD(autotune_attention_args, block_table);
  FIELD(autotune_attention_args, k_new);
  FIELD(autotune_attention_args, v_new);
  FIELD(autotune_attention_args, cache_leftpad);
  FIELD(autotune_attention_args, cache_batch_idx);
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
  FIELD(autotune_selective_scan_args, delta_softplus);
  first = 0;
  printf("}}, \"causal_conv1d_update\": {\"size\": %zu, \"fields\": {",
         sizeof(autotune_causal_conv1d_update_args));
  FIELD(autotune_causal_conv1d_update_args, x);
  FIELD(autotune_causal_conv1d_update_args, conv_state);
  FIELD(autotune_causal_conv1d_update_args, weight);
  FIELD(autotune_causal_conv1d_update_args, bias);
  FIELD(autotune_causal_conv1d_update_args, out);
  FIELD(autotune_causal_conv1d_update_args, cache_seqlens);
  FIELD(autotune_causal_conv1d_update_args, conv_state_indices);
  FIELD(autotune_causal_conv1d_update_args, silu);
  first = 0;
  printf("}}, \"selective_state_update\": {\"size\": %zu, \"fields\": {",
         sizeof(autotune_selective_state_update_args));
  FIELD(autotune_selective_state_update_args, state);
  FIELD(autotune_selective_state_update_args, x);
  FIELD(autotune_selective_state_update_args, dt);
  FIELD(autotune_selective_state_update_args, A);
  FIELD(autotune_selective_state_update_args, B);
  FIELD(autotune_selective_state_update_args, C);
  FIELD(autotune_selective_state_update_args, D);
  FIELD(autotune_selective_state_update_args, z);
  FIELD(autotune_selective_state_update_args, dt_bias);
  FIELD(autotune_selective_state_update_args, out);
  FIELD(autotune_selective_state_update_args, state_batch_indices);
  FIELD(autotune_selective_state_update_args, dt_softplus);
  printf("}}}\n");
  return 0;
}
