/*
 * libperseus C API: the one boundary that the Python extension and any framework layer call.
 *
 * Conventions
 *  - Every function returns perseus_status. PERSEUS_OK is 0. On any other value,
 *    perseus_last_error() holds a message for this thread that names the tensor, the ranks and
 *    what to do.
 *  - Collectives are asynchronous: they enqueue the request and return a handle at once, from
 *    any thread. The handle completes when every rank of the process set has submitted a
 *    matching request and the data has moved. Input buffers must stay alive and unmodified,
 *    and output buffers alive, until the handle completes.
 *  - Names identify a collective across ranks: every rank submits the same name for the same
 *    operation, in any order. A name still in flight on this rank is a PERSEUS_ERR_DUPLICATE_NAME.
 *  - Tensors are dense and row-major (C-contiguous).
 *  - A handle is released exactly once with perseus_release(); outputs owned by the library
 *    (allgather, alltoall, reducescatter) stay valid until then.
 */
#ifndef PERSEUS_C_API_H_
#define PERSEUS_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PERSEUS_API __attribute__((visibility("default")))
#define PERSEUS_C_API_VERSION 1

typedef enum {
  PERSEUS_OK = 0,
  PERSEUS_ERR_INVALID_ARGUMENT = 1, /* bad dtype, shape, root, split, name... */
  PERSEUS_ERR_NOT_INITIALIZED = 2,  /* called before perseus_init() */
  PERSEUS_ERR_MISMATCH = 3,         /* ranks disagree on shape/dtype/op/root/process set */
  PERSEUS_ERR_PEER_LOST = 4,        /* a rank died or its connection broke */
  PERSEUS_ERR_TIMEOUT = 5,
  PERSEUS_ERR_DUPLICATE_NAME = 6,
  PERSEUS_ERR_UNSUPPORTED = 7, /* dtype/device/op not supported for this collective */
  PERSEUS_ERR_INTERNAL = 8,
  PERSEUS_ERR_SHUT_DOWN = 9,    /* called after perseus_shutdown() */
  PERSEUS_ERR_IN_PROGRESS = 10, /* perseus_wait with a timeout that expired */
  PERSEUS_ERR_AUTH_FAILED = 11
} perseus_status;

typedef enum {
  PERSEUS_UINT8 = 0,
  PERSEUS_INT8 = 1,
  PERSEUS_INT32 = 2,
  PERSEUS_INT64 = 3,
  PERSEUS_FLOAT16 = 4,
  PERSEUS_BFLOAT16 = 5,
  PERSEUS_FLOAT32 = 6,
  PERSEUS_FLOAT64 = 7,
  PERSEUS_BOOL = 8
} perseus_dtype;

typedef enum {
  PERSEUS_SUM = 0,
  PERSEUS_AVERAGE = 1,
  PERSEUS_MIN = 2,
  PERSEUS_MAX = 3,
  PERSEUS_PRODUCT = 4,
  /* Horovod's Adasum: allreduce only, floating-point tensors, a power-of-two number of ranks. */
  PERSEUS_ADASUM = 5
} perseus_reduce_op;

/* Process sets. 0 is every rank. LOCAL is the ranks of this host and CROSS the ranks with this
 * rank's local_rank on every host; both mean a different group on different ranks. Sets made
 * with perseus_add_process_set get ids >= 1. */
#define PERSEUS_PROCESS_SET_GLOBAL 0
#define PERSEUS_PROCESS_SET_LOCAL (-1)
#define PERSEUS_PROCESS_SET_CROSS (-2)

#define PERSEUS_DEVICE_CPU (-1)
#define PERSEUS_MAX_NDIM 16

typedef struct {
  void* data;
  int32_t dtype;        /* perseus_dtype */
  int32_t ndim;         /* 0 (a scalar) .. PERSEUS_MAX_NDIM */
  const int64_t* shape; /* ndim entries */
  int32_t device;       /* PERSEUS_DEVICE_CPU or a CUDA device ordinal */
  void* cuda_stream;    /* CUDA only: the cudaStream_t that produced data (NULL: legacy default) */
} perseus_tensor;

typedef int64_t perseus_handle;

typedef struct {
  int32_t rank, size;
  int32_t local_rank, local_size;
  int32_t cross_rank, cross_size;
} perseus_topology;

typedef void (*perseus_callback)(perseus_handle handle, perseus_status status, void* user_data);

/* Counters of this rank's engine since perseus_init(), for measuring what negotiation costs. */
typedef struct {
  uint64_t cycles;                /* engine cycles (each: one control AND per set with work) */
  uint64_t control_exchanges;     /* control vectors combined (AND-allreduce), all sets */
  uint64_t control_bytes;         /* bytes of those control vectors, summed */
  uint64_t coordinator_rounds;    /* negotiations that went to the set's coordinator (new names) */
  uint64_t cached_responses;      /* responses served from the response cache */
  uint64_t coordinated_responses; /* responses the coordinator produced */
  uint64_t negotiation_ns;        /* time in negotiation: control exchange and coordinator */
  uint64_t posted_allreduces;     /* small allreduces completed without negotiation (posted) */
  uint64_t posted_collectives;    /* the same for allreduce, broadcast, allgather, reducescatter */
} perseus_engine_stats;

/* --- lifetime and topology ------------------------------------------------------------ */
/* Reads the topology from the environment (PERSEUS_* from perseusrun, OMPI_COMM_WORLD_* from
 * mpirun, or a single rank when neither is set), runs rendezvous and starts the engine.
 * Idempotent. */
PERSEUS_API perseus_status perseus_init(void);
/* Fails every pending handle with PERSEUS_ERR_SHUT_DOWN and stops the engine. */
PERSEUS_API perseus_status perseus_shutdown(void);
PERSEUS_API int perseus_is_initialized(void);
PERSEUS_API perseus_status perseus_get_topology(perseus_topology* out);
PERSEUS_API const char* perseus_last_error(void);
/* Static text, e.g. "cpu=1 cuda=1 nccl=22809 mpi=1 version=0.1.0 cuda_archs=75-real,...":
 * nccl is the NCCL_VERSION_CODE of the nccl.h the build saw, 0 without CUDA. */
PERSEUS_API const char* perseus_build_info(void);
/* What this process finds at run time, "key=value" words: the CUDA runtime, driver and GPUs,
 * and which libnccl loaded and its version, or why none did (nccl_error=..., the last key,
 * runs to the end). "cuda=0" in a build without CUDA. Loads NCCL and touches the driver; needs
 * no perseus_init(). Valid until the next call on this thread. */
PERSEUS_API const char* perseus_runtime_info(void);
/* Every setting with its value, default and description, one "NAME=value\tdefault\tdoc" per
 * line. Valid until the next call on this thread. */
PERSEUS_API const char* perseus_params_dump(void);
/* This rank's engine counters (perseus_engine_stats). */
PERSEUS_API perseus_status perseus_get_engine_stats(perseus_engine_stats* out);
/* Horovod's start_timeline/stop_timeline: this rank writes a Chrome-trace timeline to `path`
 * ("t.json" becomes "t.<rank>.json" when the job has several ranks) until
 * perseus_stop_timeline, which returns once the file is complete. mark_cycles != 0 adds one
 * CYCLE span per engine cycle. Starting again replaces the running timeline. */
PERSEUS_API perseus_status perseus_start_timeline(const char* path, int mark_cycles);
PERSEUS_API perseus_status perseus_stop_timeline(void);

/* --- collectives (asynchronous) ------------------------------------------------------- */
/* output may alias input (in place). prescale multiplies inputs before the reduction and
 * postscale the result after it (1.0 for none). AVERAGE divides by the set size. */
PERSEUS_API perseus_status perseus_allreduce(const char* name, const perseus_tensor* input,
                                             const perseus_tensor* output, int32_t op,
                                             double prescale, double postscale, int32_t process_set,
                                             perseus_handle* handle);
/* `count` tensors negotiated and completed as one unit. */
PERSEUS_API perseus_status perseus_grouped_allreduce(const char* name, int32_t count,
                                                     const perseus_tensor* inputs,
                                                     const perseus_tensor* outputs, int32_t op,
                                                     double prescale, double postscale,
                                                     int32_t process_set, perseus_handle* handle);
/* Concatenates along the first dimension; ranks may differ in that dimension only.
 * The output is owned by the handle: perseus_handle_output(handle, 0, ...). */
PERSEUS_API perseus_status perseus_allgather(const char* name, const perseus_tensor* input,
                                             int32_t process_set, perseus_handle* handle);
/* An allgather into the caller's `output` (CPU tensors): every rank gives an input of the
 * same shape, and output holds the process set's size times it (its first dimension that many
 * times the input's, the rest equal). The handle has no output. */
PERSEUS_API perseus_status perseus_allgather_into(const char* name, const perseus_tensor* input,
                                                  const perseus_tensor* output, int32_t process_set,
                                                  perseus_handle* handle);
/* A blocking CPU allreduce or allgather of the global set in two steps, for a caller that makes
 * its output (a framework's new tensor) while the other ranks' inputs are on their way. When the
 * post path takes the call (docs/algorithms.md, "Posted collectives"), perseus_open_allreduce
 * and perseus_open_allgather publish the input and set opened->open to 1 (an allgather's result
 * shape in result_shape, PERSEUS_MAX_NDIM entries, its ndim in *result_ndim); the caller must
 * then call perseus_finish_opened exactly once, with the name and input alive until then, and
 * no other call of that name meanwhile. Otherwise opened->open is 0 and nothing was submitted:
 * make the call another way. The fields after `open` are the library's. */
typedef struct perseus_opened {
  int32_t open;
  int32_t op_;
  const char* name_;
  int64_t slot_;
  uint64_t gen_;
  const void* input_;
} perseus_opened;
PERSEUS_API perseus_status perseus_open_allreduce(const char* name, const perseus_tensor* input,
                                                  int32_t op, double prescale, double postscale,
                                                  perseus_opened* opened);
PERSEUS_API perseus_status perseus_open_allgather(const char* name, const perseus_tensor* input,
                                                  int64_t* result_shape, int32_t* result_ndim,
                                                  perseus_opened* opened);
/* Finishes an opened call into `output` (CPU, the input's shape for an allreduce, the result
 * shape for an allgather): *handle is 0 when it is done. Otherwise *handle is the call's handle,
 * maybe still running (wait for it and release it): an allreduce's result goes to `output`, to
 * be kept alive until the handle completes; an allgather's is the handle's output 0. */
PERSEUS_API perseus_status perseus_finish_opened(const perseus_opened* opened, void* output,
                                                 perseus_handle* handle);
PERSEUS_API perseus_status perseus_grouped_allgather(const char* name, int32_t count,
                                                     const perseus_tensor* inputs,
                                                     int32_t process_set, perseus_handle* handle);
/* root_rank is a rank within the process set. output may alias input. */
PERSEUS_API perseus_status perseus_broadcast(const char* name, const perseus_tensor* input,
                                             const perseus_tensor* output, int32_t root_rank,
                                             int32_t process_set, perseus_handle* handle);
/* splits[i] rows of the first dimension go to set rank i; NULL splits divide evenly.
 * The output and the received splits are owned by the handle. */
PERSEUS_API perseus_status perseus_alltoall(const char* name, const perseus_tensor* input,
                                            const int64_t* splits, int32_t num_splits,
                                            int32_t process_set, perseus_handle* handle);
/* Reduces, then gives set rank i the i-th block of the first dimension (the first
 * dim % size ranks get one more row). The output is owned by the handle. */
PERSEUS_API perseus_status perseus_reducescatter(const char* name, const perseus_tensor* input,
                                                 int32_t op, double prescale, double postscale,
                                                 int32_t process_set, perseus_handle* handle);
/* A reduce-scatter into the caller's `output` (CPU tensors): the input's first dimension is the
 * process set's size times the output's, the rest equal; this rank's block goes there. The
 * handle has no output. */
PERSEUS_API perseus_status perseus_reducescatter_into(const char* name, const perseus_tensor* input,
                                                      const perseus_tensor* output, int32_t op,
                                                      double prescale, double postscale,
                                                      int32_t process_set, perseus_handle* handle);
PERSEUS_API perseus_status perseus_grouped_reducescatter(const char* name, int32_t count,
                                                         const perseus_tensor* inputs, int32_t op,
                                                         double prescale, double postscale,
                                                         int32_t process_set,
                                                         perseus_handle* handle);
PERSEUS_API perseus_status perseus_barrier(int32_t process_set, perseus_handle* handle);
/* Horovod's join: this rank has no more work; it takes part with zeros in collectives the
 * others still run until every rank joined. The result is the last rank to join. */
PERSEUS_API perseus_status perseus_join(perseus_handle* handle);
/* perseus_join, naming the CUDA device of the zeros this rank contributes to CUDA collectives
 * after it joined; -1 (what perseus_join passes): the device this process already used, else
 * local_rank modulo the visible GPUs. */
PERSEUS_API perseus_status perseus_join_device(perseus_handle* handle, int32_t device);

/* --- collectives (blocking) ---------------------------------------------------------- */
/* The asynchronous call, then perseus_wait(handle, -1) and perseus_release(handle), in one
 * call with no handle: the synchronous form (Horovod's allreduce without _async). The
 * engine's PERSEUS_TIMEOUT bounds the wait. A small collective of a name that ran before is
 * finished on the calling thread without entering the handle table. */
PERSEUS_API perseus_status perseus_allreduce_blocking(const char* name, const perseus_tensor* input,
                                                      const perseus_tensor* output, int32_t op,
                                                      double prescale, double postscale,
                                                      int32_t process_set);
/* perseus_allreduce, then perseus_handle_cuda_stream_wait(handle, stream) and
 * perseus_release(handle), in one call with no handle: `stream` is ordered after the
 * allreduce on the GPU, and the host waits only until the engine has enqueued it (the form of
 * a framework's blocking call on its current stream). CPU tensors: as perseus_allreduce_blocking;
 * `stream` is not used. */
PERSEUS_API perseus_status perseus_allreduce_on_stream(const char* name,
                                                       const perseus_tensor* input,
                                                       const perseus_tensor* output, int32_t op,
                                                       double prescale, double postscale,
                                                       int32_t process_set, void* stream);
PERSEUS_API perseus_status perseus_broadcast_blocking(const char* name, const perseus_tensor* input,
                                                      const perseus_tensor* output,
                                                      int32_t root_rank, int32_t process_set);

/* --- handles ---------------------------------------------------------------------------- */
PERSEUS_API perseus_status perseus_poll(perseus_handle handle, int* done);
/* Blocks until done or timeout_s passes (< 0: no limit; the engine's PERSEUS_TIMEOUT still
 * bounds every transfer). Returns the operation's status. While it waits, the calling thread
 * may run the engine's cycles itself (PERSEUS_CALLER_CYCLES), completing other handles too. */
PERSEUS_API perseus_status perseus_wait(perseus_handle handle, double timeout_s);
/* Runs cb once, on the thread that completes the operation: the engine thread or a thread in
 * perseus_wait or perseus_poll (or at once if already done). cb must not block nor wait for a
 * handle. */
PERSEUS_API perseus_status perseus_set_callback(perseus_handle handle, perseus_callback cb,
                                                void* user_data);
PERSEUS_API perseus_status perseus_handle_num_outputs(perseus_handle handle, int32_t* count);
/* Library-owned output i of a completed handle; shape/data valid until perseus_release. */
PERSEUS_API perseus_status perseus_handle_output(perseus_handle handle, int32_t index,
                                                 perseus_tensor* out);
/* alltoall: rows received from each set rank. */
PERSEUS_API perseus_status perseus_handle_received_splits(perseus_handle handle,
                                                          const int64_t** splits, int32_t* count);
/* When the operation was submitted and when it completed, as the engine saw them: nanoseconds
 * of CLOCK_MONOTONIC (Python's time.perf_counter() on Linux, in seconds); completed_ns is 0
 * until the handle is done. Either pointer may be NULL. */
PERSEUS_API perseus_status perseus_handle_times(perseus_handle handle, int64_t* submitted_ns,
                                                int64_t* completed_ns);
/* Where the caller waits for the operation (for example "train.py:42"): if the collective
 * stalls, the early stall diagnosis (PERSEUS_STALL_DIAGNOSIS) names it. Meant for waits that
 * already took long; costs a lock. */
PERSEUS_API perseus_status perseus_handle_note_call_site(perseus_handle handle, const char* site);
/* Where this process's code is (for example "train.py:42 in step"), for the stall diagnosis's
 * collectives that no wait noted a site for (a wait inside a framework's C++, such as DDP's
 * reducer). The engine calls finder(site, capacity) on one of its threads, at most once per
 * diagnosis line and only for a collective that has waited PERSEUS_STALL_DIAGNOSIS already; it
 * writes a NUL-terminated site and returns nonzero, or returns 0. It must return within a
 * bounded time (it must not wait for the GIL without a limit). NULL removes it. Process-wide;
 * may be called before perseus_init(). */
typedef int (*perseus_call_site_finder)(char* site, size_t capacity);
PERSEUS_API perseus_status perseus_set_call_site_finder(perseus_call_site_finder finder);
/* join: the last rank that joined. */
PERSEUS_API perseus_status perseus_handle_join_rank(perseus_handle handle, int32_t* rank);
/* CUDA: makes `stream` wait for the collective on the GPU (no host block). */
PERSEUS_API perseus_status perseus_handle_cuda_stream_wait(perseus_handle handle, void* stream);
PERSEUS_API perseus_status perseus_release(perseus_handle handle);

/* --- process sets (collective over all ranks: every rank calls with the same list) ----- */
PERSEUS_API perseus_status perseus_add_process_set(const int32_t* ranks, int32_t count,
                                                   int32_t* id);
PERSEUS_API perseus_status perseus_remove_process_set(int32_t id);
/* rank_in_set is -1 when this rank is not a member. */
PERSEUS_API perseus_status perseus_process_set_info(int32_t id, int32_t* rank_in_set,
                                                    int32_t* size);
/* Global ranks of the set into ranks[0..capacity); *count gets the set size. */
PERSEUS_API perseus_status perseus_process_set_ranks(int32_t id, int32_t* ranks, int32_t capacity,
                                                     int32_t* count);

/* --- rendezvous server, for launchers ---------------------------------------------------- */
/* Starts the authenticated rendezvous store that ranks reach through PERSEUS_CONTROLLER_ADDR /
 * _PORT. port 0 picks a free one; *bound_port gets it. secret is the job secret (hex). */
PERSEUS_API perseus_status perseus_store_server_start(const char* bind_address, int32_t port,
                                                      const char* secret, int32_t* bound_port,
                                                      void** server);
PERSEUS_API perseus_status perseus_store_server_stop(void* server);

/* --- rendezvous store client, for launchers and elastic workers --------------------------
 * One authenticated connection to a store server; any thread may use it (calls are
 * serialised). Keys are plain strings; values are bytes. */
PERSEUS_API perseus_status perseus_store_client_connect(const char* host, int32_t port,
                                                        const char* secret, double timeout_s,
                                                        void** client);
PERSEUS_API perseus_status perseus_store_client_set(void* client, const char* key,
                                                    const void* value, int64_t bytes);
/* Waits up to timeout_s for the key (PERSEUS_ERR_TIMEOUT after). timeout_s < 0 does not wait:
 * *found is 0 when the key does not exist. On success *value is a buffer of *bytes bytes to be
 * released with perseus_store_free. */
PERSEUS_API perseus_status perseus_store_client_get(void* client, const char* key, double timeout_s,
                                                    int32_t* found, void** value, int64_t* bytes);
/* Atomically adds delta to the key's counter (a missing key counts as 0); *result: the sum. */
PERSEUS_API perseus_status perseus_store_client_add(void* client, const char* key, int64_t delta,
                                                    int64_t* result);
PERSEUS_API void perseus_store_free(void* value);
PERSEUS_API perseus_status perseus_store_client_close(void* client);

#ifdef __cplusplus
}
#endif

#endif /* PERSEUS_C_API_H_ */
