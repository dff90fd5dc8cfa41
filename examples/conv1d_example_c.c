/* The C ABI: create a runtime, ask which variant a call resolves to. Pointers
 * here are fake (nothing launches), so this runs anywhere a GPU is present. */
#include "autotune.h"

#include <stdio.h>

int main(void) {
  autotune_runtime* rt = NULL;
  if (autotune_runtime_create(NULL, 0, &rt) != AUTOTUNE_OK) {
    fprintf(stderr, "autotune: %s\n", autotune_last_error());
    return 3;
  }
  autotune_causal_conv1d_args a = {0};
  a.x = (const void*)0x100000;
  a.weight = (const void*)0x200000;
  a.out = (void*)0x300000;
  a.batch = 8;
  a.channels = 4096;
  a.length = 2048;
  a.width = 4;
  a.x_dtype = AUTOTUNE_BF16;
  a.weight_dtype = AUTOTUNE_BF16;
  a.silu = 1;
  a.x_batch_stride = a.x_channel_stride = a.out_batch_stride = a.out_channel_stride = -1;
  char variant[256];
  int rc = autotune_causal_conv1d_variant(rt, &a, variant, sizeof variant);
  if (rc != AUTOTUNE_OK) {
    fprintf(stderr, "autotune: %s\n", autotune_last_error());
  } else {
    printf("B=8,C=4096,L=2048 runs: %s\n", variant);
  }
  autotune_runtime_destroy(rt);
  return rc;
}
