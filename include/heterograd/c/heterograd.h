/* heterograd's C API: heterograd's optimizers and distributed algorithms for C, Rust, Python
 * (ctypes) and any language with a C foreign-function interface.
 *
 * Everything is reached through opaque handles. Callers pass raw pointers, element counts
 * and a device flag (host or CUDA memory); heterograd works on that memory in place and never
 * copies parameters or gradients to a buffer of its own.
 *
 * Errors. Every function returns an hg_status; HG_OK (0) is success. A failed call changes
 * nothing (no parameter, state or handle is modified) and leaves a message naming the
 * argument, its value and the rule it broke, read with hg_last_error() on the same thread.
 * No function aborts the process on bad input: null pointers, size mismatches, unknown or
 * destroyed handles, handles of the wrong kind and out-of-range options are reported as errors.
 *
 * Implementation. The functions are implemented in C++ (header-only): exactly one C++
 * translation unit of the program or shared library defines HG_C_API_IMPLEMENTATION before
 * including this header:
 *
 *     #define HG_C_API_IMPLEMENTATION
 *     #include <heterograd/c/heterograd.h>
 *
 * and is compiled as C++20 with heterograd's include path (link heterograd::openmp for
 * multi-threaded CPU steps, heterograd::mpi for the MPI objects; compile it with nvcc for
 * HG_DEVICE_CUDA). Every other file, C or C++, includes the header without the macro.
 * docs/integration.md is the reference of every function.
 */
#ifndef HETEROGRAD_C_HETEROGRAD_H
#define HETEROGRAD_C_HETEROGRAD_H
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Symbols of the implementation are exported from shared libraries built with
 * -fvisibility=hidden. */
#ifndef HG_C_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define HG_C_EXPORT __attribute__((visibility("default")))
#else
#define HG_C_EXPORT
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes and messages ----------------------------------------------------------- */

typedef enum hg_status {
  HG_OK = 0,
  HG_ERROR_NULL_POINTER = 1,     /* a required pointer argument is NULL */
  HG_ERROR_SIZE_MISMATCH = 2,    /* a buffer's element count differs from the handle's */
  HG_ERROR_UNKNOWN_HANDLE = 3,   /* not a live handle of the expected kind */
  HG_ERROR_INVALID_ARGUMENT = 4, /* an option or value out of its range */
  HG_ERROR_UNSUPPORTED = 5,      /* a feature this build lacks (CUDA, MPI) */
  HG_ERROR_COMMUNICATION = 6,    /* a transport failure (peer aborted, message mismatch) */
  HG_ERROR_TIMEOUT = 7,          /* a distributed operation passed its deadline */
  HG_ERROR_OUT_OF_MEMORY = 8,
  HG_ERROR_INTERNAL = 9          /* anything else (a bug: please report it) */
} hg_status;

/* The message of the last call that failed on the calling thread ("" if none failed). The
 * pointer stays valid until the next failing call on this thread. */
HG_C_EXPORT const char* hg_last_error(void);

/* A static name for a status code ("HG_OK", "HG_ERROR_NULL_POINTER", ...; "unknown" else). */
HG_C_EXPORT const char* hg_status_name(int status);

/* heterograd's version (each pointer may be NULL). */
HG_C_EXPORT hg_status hg_version(int* major, int* minor, int* patch);

/* What this build supports: HG_DEVICE_CUDA buffers (compiled by nvcc), the MPI objects. */
HG_C_EXPORT int hg_has_cuda(void);
HG_C_EXPORT int hg_has_mpi(void);

/* ---- memory --------------------------------------------------------------------------------- */

typedef enum hg_device {
  HG_DEVICE_HOST = 0, /* memory the CPU reaches (malloc, NumPy, CPU tensors, pinned) */
  HG_DEVICE_CUDA = 1  /* CUDA device memory (cudaMalloc, CUDA tensors) */
} hg_device;

typedef enum hg_dtype { HG_FLOAT32 = 0, HG_FLOAT64 = 1 } hg_dtype;

/* ---- optimizers ------------------------------------------------------------------------------- */

typedef enum hg_optimizer_kind {
  HG_OPTIMIZER_SGD = 0,      /* p -= lr (g + wd p) */
  HG_OPTIMIZER_MOMENTUM = 1, /* heavy ball, PyTorch's form */
  HG_OPTIMIZER_NESTEROV = 2,
  HG_OPTIMIZER_ADAM = 3,     /* Kingma & Ba 2015, L2 weight decay added to the gradient */
  HG_OPTIMIZER_ADAMW = 4     /* Loshchilov & Hutter 2019, decoupled weight decay */
} hg_optimizer_kind;

/* Hyper-parameters; fill with hg_optimizer_config_init (the defaults of heterograd::optim)
 * and change what you need. Fields a kind does not use are ignored. */
typedef struct hg_optimizer_config {
  int32_t kind;          /* hg_optimizer_kind */
  int32_t bias_correction; /* Adam/AdamW: nonzero divides the moments by 1 - beta^t */
  double lr;
  double weight_decay;
  double momentum;       /* momentum, nesterov */
  double dampening;      /* momentum, nesterov */
  double beta1, beta2, eps; /* adam, adamw */
} hg_optimizer_config;

typedef struct hg_optimizer_t* hg_optimizer;

/* Fills *config with the defaults of `kind`. */
HG_C_EXPORT hg_status hg_optimizer_config_init(hg_optimizer_config* config, int32_t kind);

/* A fused optimizer for parameter buffers of `size` elements of `dtype` in `device` memory.
 * Its state (moments, velocity) is allocated here, in the same memory, and zeroed. */
HG_C_EXPORT hg_status hg_optimizer_create(hg_optimizer* out, const hg_optimizer_config* config,
                              int32_t dtype, size_t size, int32_t device);

/* One fused step in place: params <- update(params, grads, state). Both buffers hold `size`
 * elements of the optimizer's dtype in `device` memory; grads may equal params exactly but
 * must not overlap it otherwise. On the CPU the step runs on the calling thread's OpenMP
 * team when the implementation was compiled with OpenMP. */
HG_C_EXPORT hg_status hg_optimizer_step(hg_optimizer opt, void* params, const void* grads, size_t size,
                            int32_t device);

/* The learning rate of the following steps (a framework's own schedule). */
HG_C_EXPORT hg_status hg_optimizer_set_lr(hg_optimizer opt, double lr);

/* Steps applied so far. */
HG_C_EXPORT hg_status hg_optimizer_step_count(hg_optimizer opt, int64_t* count);

/* Sets the CUDA stream (a cudaStream_t; NULL: the default stream) of later device steps. */
HG_C_EXPORT hg_status hg_optimizer_set_stream(hg_optimizer opt, void* cuda_stream);

/* The state as bytes (heterograd's versioned, checksummed optimizer-state format). With
 * buffer NULL, *size receives the size needed; else capacity must be at least that size and
 * *size receives the bytes written. */
HG_C_EXPORT hg_status hg_optimizer_save_state(hg_optimizer opt, void* buffer, size_t capacity, size_t* size);

/* Replaces the state by one saved from an optimizer of the same kind, dtype and size. */
HG_C_EXPORT hg_status hg_optimizer_load_state(hg_optimizer opt, const void* buffer, size_t size);

/* Frees the optimizer; the handle becomes unknown (later calls return
 * HG_ERROR_UNKNOWN_HANDLE). Destroying NULL is HG_OK. */
HG_C_EXPORT hg_status hg_optimizer_destroy(hg_optimizer opt);

#ifdef __cplusplus
} /* extern "C" */
#endif

#if defined(HG_C_API_IMPLEMENTATION) && defined(__cplusplus)
#include "heterograd/c/detail/implementation.hpp"
#endif

#endif /* HETEROGRAD_C_HETEROGRAD_H */
