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
 * Pointers must be aligned for what they point to: a float32 buffer to alignof(float), a
 * float64 buffer to alignof(double), an out-parameter or struct to its type's alignment; a
 * misaligned one is HG_ERROR_INVALID_ARGUMENT. Element counts (`size`) of every create
 * function are checked the same way for every optimizer and object: at least 1 and at most
 * PTRDIFF_MAX / (bytes per element), so SIZE_MAX or a count whose byte count overflows is
 * HG_ERROR_INVALID_ARGUMENT.
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

/* ---- distributed objects over MPI -----------------------------------------------------------
 * An MPI communicator is passed as its Fortran handle (MPI_Fint: MPI_Comm_c2f(MPI_COMM_WORLD)
 * in C, comm.py2f() in mpi4py, or hg_mpi_world below), so that this header needs no mpi.h.
 * MPI must be initialised first (MPI_Init_thread, or hg_mpi_init); creating an object is
 * collective over the communicator (heterograd duplicates it); destroy objects before
 * MPI_Finalize. Buffers are host memory (the MPI transport moves host buffers). The CPU work
 * of these objects runs on the calling process's OpenMP team: one team per process, so run
 * one rank per process (or set OMP_NUM_THREADS to cores / ranks per node). */

/* MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is initialised already; *provided (may be
 * NULL) receives the thread level. */
HG_C_EXPORT hg_status hg_mpi_init(int* provided);
/* MPI_Finalize unless finalised already. */
HG_C_EXPORT hg_status hg_mpi_finalize(void);
/* The Fortran handle of MPI_COMM_WORLD, and this process's rank and the world's size (each
 * pointer may be NULL). */
HG_C_EXPORT hg_status hg_mpi_world(int64_t* comm, int* rank, int* size);

/* ---- local SGD (algorithms/sync: local_sgd_worker) ---------------------------------------- */

typedef enum hg_averaging {
  HG_AVERAGING_UNIFORM = 0,         /* 1 / n */
  HG_AVERAGING_SAMPLE_WEIGHTED = 1  /* b_i H_i / sum_j b_j H_j: samples processed in the round */
} hg_averaging;

typedef enum hg_state_policy {
  HG_STATE_KEEP_LOCAL = 0, /* optimizer states stay per rank */
  HG_STATE_AVERAGE = 1,    /* averaged with the parameters */
  HG_STATE_RESET = 2       /* zeroed at every average */
} hg_state_policy;

typedef struct hg_local_sgd_config {
  uint64_t period;         /* H: local steps per round, then an average (>= 1) */
  uint64_t warmup_steps;   /* post-local SGD: the first rounds are single synchronous steps */
  int32_t weighting;       /* hg_averaging */
  int32_t state_policy;    /* hg_state_policy */
  double timeout_seconds;  /* deadline of each collective */
} hg_local_sgd_config;

typedef struct hg_local_sgd_t* hg_local_sgd;

HG_C_EXPORT hg_status hg_local_sgd_config_init(hg_local_sgd_config* config);

/* Collective over `mpi_comm`. `local_optimizer`: each rank's own optimizer (its state stays
 * local unless the state policy says otherwise). `batches`: every rank's batch size b_i
 * (comm size entries, the same on every rank) for sample weighting; NULL means equal.
 * `params`: this rank's initial parameters, equal on every rank (read only here). */
HG_C_EXPORT hg_status hg_local_sgd_create_mpi(hg_local_sgd* out, int64_t mpi_comm,
                                              const hg_optimizer_config* local_optimizer,
                                              const hg_local_sgd_config* config,
                                              const uint64_t* batches, int32_t dtype,
                                              const void* params, size_t size, int32_t device);

/* One local optimizer step with this rank's gradient; after the round's last step, the
 * average over the ranks (collective: every rank calls step the same number of times).
 * *averaged (may be NULL) receives 1 when this step ended with an average. A gradient holding
 * a NaN or an infinity is HG_ERROR_INVALID_ARGUMENT, before the update and the average (the
 * local SGD policy's non-finite rule, fail; hg_last_error names the element). A failed step,
 * including one whose average failed (HG_ERROR_TIMEOUT, HG_ERROR_COMMUNICATION), changes
 * nothing on this rank: params, the optimizer state, the round and step counters are as
 * before the call (the step works on a copy it puts back). A failed collective usually leaves
 * the communicator aborted, so the peers' steps fail too. */
HG_C_EXPORT hg_status hg_local_sgd_step(hg_local_sgd avg, void* params, const void* grads,
                                        size_t size, int32_t device, int32_t* averaged);

/* Rounds (averages) completed and local steps taken (each pointer may be NULL). */
HG_C_EXPORT hg_status hg_local_sgd_progress(hg_local_sgd avg, uint64_t* rounds, uint64_t* steps);

HG_C_EXPORT hg_status hg_local_sgd_destroy(hg_local_sgd avg);

/* ---- asynchronous parameter server (algorithms/async: serve, worker_client) --------------- */

typedef enum hg_async_policy {
  HG_ASYNC_ASGD = 0,             /* every gradient applied with the same step */
  HG_ASYNC_DELAY_ADAPTIVE = 1,   /* step x n / max(n, delay) (Ringmaster's baseline) */
  HG_ASYNC_STALENESS_SCALED = 2  /* step x (1 + delay)^-0.5 (FedAsync's polynomial rule) */
} hg_async_policy;

typedef struct hg_async_config {
  int32_t policy;          /* hg_async_policy */
  int32_t server_rank;     /* the server's rank; every other rank is a worker */
  uint64_t max_updates;    /* the server stops its workers after this many updates */
  double timeout_seconds;  /* deadline of every receive */
  int32_t tag_base;        /* four MPI tags from here */
  int32_t reserved;        /* 0 */
} hg_async_config;

typedef struct hg_async_server_t* hg_async_server;
typedef struct hg_async_worker_t* hg_async_worker;

HG_C_EXPORT hg_status hg_async_config_init(hg_async_config* config);

/* On the server rank (collective with hg_async_worker_create_mpi on the other ranks). The
 * server keeps its own copy of the model, starting from `initial_params`, and updates it with
 * `server_optimizer` (its learning rate is the step gamma). */
HG_C_EXPORT hg_status hg_async_server_create_mpi(hg_async_server* out, int64_t mpi_comm,
                                                 const hg_optimizer_config* server_optimizer,
                                                 const hg_async_config* config, int32_t dtype,
                                                 const void* initial_params, size_t size,
                                                 int32_t device);

/* Serves the workers until config.max_updates updates, then stops them. *updates and
 * *dropped (each may be NULL) receive the updates applied and the results dropped. */
HG_C_EXPORT hg_status hg_async_server_run(hg_async_server server, uint64_t* updates,
                                          uint64_t* dropped);

/* Copies the server's current model into `params`. */
HG_C_EXPORT hg_status hg_async_server_params(hg_async_server server, void* params, size_t size,
                                             int32_t device);

HG_C_EXPORT hg_status hg_async_server_destroy(hg_async_server server);

/* On every rank but the server's. */
HG_C_EXPORT hg_status hg_async_worker_create_mpi(hg_async_worker* out, int64_t mpi_comm,
                                                 const hg_async_config* config, int32_t dtype,
                                                 size_t size);

/* Waits for the next job: *has_job = 1 and the model in `params`, or *has_job = 0 when the
 * server has stopped (then only destroy is left to do). */
HG_C_EXPORT hg_status hg_async_worker_pull(hg_async_worker worker, void* params, size_t size,
                                           int32_t device, int32_t* has_job);

/* Sends the gradient of the current job; *accepted (may be NULL) = 0 when the server
 * interrupted the job meanwhile (nothing was sent). */
HG_C_EXPORT hg_status hg_async_worker_push(hg_async_worker worker, const void* grads,
                                           size_t size, int32_t device, int32_t* accepted);

HG_C_EXPORT hg_status hg_async_worker_destroy(hg_async_worker worker);

#ifdef __cplusplus
} /* extern "C" */
#endif

#if defined(HG_C_API_IMPLEMENTATION) && defined(__cplusplus)
#include "heterograd/c/detail/implementation.hpp"
#endif

#endif /* HETEROGRAD_C_HETEROGRAD_H */
