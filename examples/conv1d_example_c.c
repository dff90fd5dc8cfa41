/* The C ABI: create a runtime, ask which variant a call resolves to. Pointers
 * here are fake (nothing launches; a call would refuse them as not GPU memory), so
 * this runs anywhere a GPU is present. */
#include <autotune/autotune.h>

#include <stdio.h>

/* Contiguous [d0, d1, d2] and [d0, d1] tensors (strides in elements). */
static autotune_tensor tensor3(const void* data, int32_t dtype, int64_t d0, int64_t d1,
                               int64_t d2) {
  autotune_tensor t = {0};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 3;
  t.shape[0] = d0, t.shape[1] = d1, t.shape[2] = d2;
  t.strides[0] = d1 * d2, t.strides[1] = d2, t.strides[2] = 1;
  return t;
}

static autotune_tensor tensor2(const void* data, int32_t dtype, int64_t d0, int64_t d1) {
  autotune_tensor t = {0};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape[0] = d0, t.shape[1] = d1;
  t.strides[0] = d1, t.strides[1] = 1;
  return t;
}

int main(void) {
  autotune_runtime* rt = NULL;
  if (autotune_runtime_create(NULL, 0, &rt) != AUTOTUNE_OK) {
    fprintf(stderr, "autotune: %s\n", autotune_last_error());
    return 3;
  }
  autotune_causal_conv1d_args a = {0};
  a.x = tensor3((const void*)0x100000, AUTOTUNE_BF16, 8, 4096, 2048);
  a.weight = tensor2((const void*)0x200000, AUTOTUNE_BF16, 4096, 4);
  a.out = tensor3((const void*)0x300000, AUTOTUNE_BF16, 8, 4096, 2048);
  a.silu = 1;
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
