/* Creates a runtime through the installed C ABI; built by tests/install/run.sh with
 * `cc main.c $(pkg-config --cflags --libs autotune)`. Includes nothing but the
 * installed header. Exit 0 when a GPU is present, 3 on AUTOTUNE_ERROR_NO_DEVICE,
 * 1 on any other status. */
#include <autotune/autotune.h>

#include <stdio.h>

int main(void) {
  autotune_runtime* runtime = NULL;
  int status = autotune_runtime_create(NULL, 0, &runtime);
  if (status == AUTOTUNE_ERROR_NO_DEVICE) {
    fprintf(stderr, "c_consumer: no device: %s\n", autotune_last_error());
    return 3;
  }
  if (status != AUTOTUNE_OK) {
    fprintf(stderr, "c_consumer: status %d: %s\n", status, autotune_last_error());
    return 1;
  }
  printf("c_consumer: runtime ready\n");
  autotune_runtime_destroy(runtime);
  return 0;
}
