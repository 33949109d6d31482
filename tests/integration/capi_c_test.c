/* The C API from C (C99, no C++): the header is valid C, the shared library links, a fused
 * Adam step matches Adam's first step in closed form, and bad input returns status codes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "heterograd/c/heterograd.h"

static int failures = 0;

#define EXPECT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, \
              __LINE__, #cond, hg_last_error());                           \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

int main(void) {
  enum { n = 37 };
  float p[n], g[n];
  hg_optimizer_config cfg;
  hg_optimizer opt = NULL;
  int i;
  for (i = 0; i < n; ++i) {
    p[i] = 1.0f;
    g[i] = (float)(i - 18) + 0.5f; /* both signs, never 0 */
  }
  EXPECT(hg_optimizer_config_init(&cfg, HG_OPTIMIZER_ADAM) == HG_OK);
  cfg.lr = 0.125;
  cfg.eps = 1e-30; /* must be > 0; negligible against sqrt(v) >= 0.5 */
  EXPECT(hg_optimizer_create(&opt, &cfg, HG_FLOAT32, n, HG_DEVICE_HOST) == HG_OK);
  EXPECT(hg_optimizer_step(opt, p, g, n, HG_DEVICE_HOST) == HG_OK);
  /* Adam's first step with bias correction and eps ~ 0 is p - lr * sign(g): the corrected
   * moments are g and g^2 (Kingma & Ba 2015, Sec. 2.1 and 3). */
  for (i = 0; i < n; ++i) EXPECT(fabsf(p[i] - (1.0f - 0.125f * (g[i] > 0 ? 1.0f : -1.0f))) < 1e-6f);

  EXPECT(hg_optimizer_step(opt, NULL, g, n, HG_DEVICE_HOST) == HG_ERROR_NULL_POINTER);
  EXPECT(strstr(hg_last_error(), "'params'") != NULL);
  EXPECT(hg_optimizer_step(opt, p, g, n - 1, HG_DEVICE_HOST) == HG_ERROR_SIZE_MISMATCH);
  /* A float buffer one byte off its alignment, and a count whose bytes overflow. */
  EXPECT(hg_optimizer_step(opt, (float*)((char*)p + 1), g, n, HG_DEVICE_HOST) ==
         HG_ERROR_INVALID_ARGUMENT);
  EXPECT(strstr(hg_last_error(), "alignof(float)") != NULL);
  {
    hg_optimizer big = NULL;
    EXPECT(hg_optimizer_create(&big, &cfg, HG_FLOAT32, SIZE_MAX, HG_DEVICE_HOST) ==
           HG_ERROR_INVALID_ARGUMENT);
    EXPECT(big == NULL);
    EXPECT(hg_optimizer_config_init(&cfg, HG_OPTIMIZER_SGD) == HG_OK);
    EXPECT(hg_optimizer_create(&big, &cfg, HG_FLOAT32, SIZE_MAX / 2, HG_DEVICE_HOST) ==
           HG_ERROR_INVALID_ARGUMENT);
    EXPECT(big == NULL);
  }
  EXPECT(hg_optimizer_destroy(opt) == HG_OK);
  EXPECT(hg_optimizer_step(opt, p, g, n, HG_DEVICE_HOST) == HG_ERROR_UNKNOWN_HANDLE);
  EXPECT(hg_optimizer_destroy(opt) == HG_ERROR_UNKNOWN_HANDLE);
  EXPECT(strcmp(hg_status_name(HG_ERROR_UNKNOWN_HANDLE), "HG_ERROR_UNKNOWN_HANDLE") == 0);
  if (failures == 0) printf("C API from C: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
