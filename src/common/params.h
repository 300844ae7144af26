// One typed registry of every PERSEUS_* setting. Each is parsed once from the environment;
// a value that does not parse is an InvalidArgumentError naming the variable. The table is
// dumpable (`perseusrun --params`), and docs/environment.md's table is generated from it
// (scripts/gen_environment_doc.sh; the test common_params_doc_test fails when they differ).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace perseus {

// X(type, member, variable, default, description)
#define PERSEUS_PARAM_LIST(X)                                                                      \
  X(int64_t, fusion_threshold, "PERSEUS_FUSION_THRESHOLD", int64_t{64} << 20,                      \
    "Bytes of the fusion buffer; ready tensors of one kind are packed up to this size. 0 "         \
    "disables fusion.")                                                                            \
  X(double, timeout_s, "PERSEUS_TIMEOUT", 30.0,                                                    \
    "Seconds after which a lost peer or a stuck transfer fails every pending operation.")          \
  X(double, start_timeout_s, "PERSEUS_START_TIMEOUT", 60.0,                                        \
    "Seconds that rendezvous waits for every rank to arrive.")                                     \
  X(double, stall_warning_s, "PERSEUS_STALL_WARNING", 60.0,                                        \
    "Seconds a tensor may wait on a subset of ranks before it is logged with the missing ranks.")  \
  X(double, stall_shutdown_s, "PERSEUS_STALL_SHUTDOWN", 0.0,                                       \
    "If > 0, seconds after which a stalled tensor fails the job instead of only warning.")         \
  X(double, stall_diagnosis_s, "PERSEUS_STALL_DIAGNOSIS", 2.0,                                     \
    "Seconds a collective may wait on some ranks before every rank logs one line naming the "      \
    "ranks that have not submitted it (with hosts), the tensor (name, shape, op), the Python "     \
    "call "                                                                                        \
    "site where this rank waits for it and how long it waited; at most one line per this "         \
    "interval and process set. An early diagnosis, not an error; 0 turns it off.")                 \
  X(double, straggler_threshold, "PERSEUS_STRAGGLER_THRESHOLD", 0.05,                              \
    "Fraction of a step by which a rank must keep arriving later than the others at the "          \
    "negotiated collectives before rank 0 flags it, once, as a straggler (rank, host, how much "   \
    "later). Same value on every rank; 0 turns it off.")                                           \
  X(std::string, timeline, "PERSEUS_TIMELINE", std::string(),                                      \
    "Path of a Chrome-trace/Perfetto JSON timeline written by this rank (rank suffix added when "  \
    "several ranks share it); DYNAMIC: none until start_timeline().")                              \
  X(bool, timeline_mark_cycles, "PERSEUS_TIMELINE_MARK_CYCLES", false,                             \
    "Add one CYCLE span per engine cycle to the timeline.")                                        \
  X(std::string, log_level, "PERSEUS_LOG_LEVEL", std::string("warning"),                           \
    "trace, debug, info, warning, error or off.")                                                  \
  X(std::string, job_id, "PERSEUS_JOB_ID", std::string(),                                          \
    "Names the job's shared-memory segments (perseus-ID-RANK in /dev/shm) so that the launcher "   \
    "removes exactly this job's segments when ranks die. perseusrun sets it; unset (mpirun), "     \
    "rank 0 draws a random one.")                                                                  \
  X(std::string, store_prefix, "PERSEUS_STORE_PREFIX", std::string(),                              \
    "Prefix of every rendezvous store key of this membership, and a label the data-plane "         \
    "handshake is bound to, so that memberships sharing one store stay apart (perseusrun's "       \
    "elastic mode sets it per epoch; docs/elastic.md).")                                           \
  X(int64_t, port, "PERSEUS_PORT", int64_t{0},                                                     \
    "Port of the rendezvous store that rank 0 opens under torchrun, srun or mpiexec (MPICH, "      \
    "Intel MPI); 0: the first free one of 8 ports from torchrun's MASTER_PORT+1 or from a port "   \
    "derived from Slurm's job and step ids, any free port under mpiexec.")                         \
  X(std::string, port_range, "PERSEUS_PORT_RANGE", std::string(),                                  \
    "lo-hi: every rank's data-plane listener takes the first free port in this range (for "        \
    "firewalls and NetworkPolicies); empty: any free port.")                                       \
  X(std::string, secret_file, "PERSEUS_SECRET_FILE", std::string(),                                \
    "File (only its owner may read it) holding the job secret where the launcher hands out none "  \
    "(torchrun, srun) and PERSEUS_SECRET is unset; default ~/.perseus/secret if it exists.")       \
  X(std::string, iface, "PERSEUS_IFACE", std::string(),                                            \
    "Network interface (name) or address to listen on; default: the address that reaches the "     \
    "controller.")                                                                                 \
  X(std::string, hierarchical_allreduce, "PERSEUS_HIERARCHICAL_ALLREDUCE", std::string("auto"),    \
    "auto, 1 or 0: reduce within the host, then across hosts, then broadcast within the host.")    \
  X(std::string, allreduce_algo, "PERSEUS_ALLREDUCE_ALGO", std::string("auto"),                    \
    "Forces one allreduce algorithm by name (see docs/algorithms.md); auto picks by cost model.")  \
  X(std::string, reducescatter_algo, "PERSEUS_REDUCESCATTER_ALGO", std::string("auto"),            \
    "Forces one reduce-scatter algorithm by name (see docs/algorithms.md); auto picks by cost "    \
    "model.")                                                                                      \
  X(std::string, cpu_operations, "PERSEUS_CPU_OPERATIONS", std::string("auto"),                    \
    "Data plane for CPU tensors: auto (shared memory within a host, TCP across), tcp, or mpi.")    \
  X(int64_t, tcp_connections, "PERSEUS_TCP_CONNECTIONS", int64_t{2},                               \
    "TCP connections per pair of ranks on different hosts; large messages are striped over them.") \
  X(std::string, bind_to, "PERSEUS_BIND_TO", std::string("none"),                                  \
    "core: each rank binds all its threads to its share of the host's cores (the cores it may "    \
    "use, split evenly among the host's ranks; nothing when ranks outnumber cores); none: the "    \
    "scheduler places threads. perseusrun sets core unless --bind-to none (Note [Binding ranks "   \
    "to cores], src/transport/shm/cpu_budget.h); under a bare mpirun, use mpirun's own "           \
    "--bind-to.")                                                                                  \
  X(int64_t, spin_us, "PERSEUS_SPIN_US", int64_t{100},                                             \
    "Microseconds a waiting thread busy-polls before it blocks.")                                  \
  X(bool, caller_cycles, "PERSEUS_CALLER_CYCLES", true,                                            \
    "A thread that waits for a handle runs the engine's cycles itself (0: the engine thread "      \
    "only).")                                                                                      \
  X(bool, posted_allreduce, "PERSEUS_POSTED_ALLREDUCE", true,                                      \
    "Small CPU allreduces and reducescatters (<= 4 KiB per rank), broadcasts and allgathers "      \
    "(<= 64 KiB per rank) of names already negotiated skip negotiation when all ranks share a "    \
    "host (Note [Posted collectives]; 0: off).")                                                   \
  X(int64_t, posted_by_address, "PERSEUS_POSTED_BY_ADDRESS", int64_t{4} << 20,                     \
    "Posted broadcasts and allgathers of 8 KiB up to this many bytes per rank are posted by "      \
    "address: the readers copy straight from the poster's memory (cross-memory attach), and the "  \
    "poster returns once they have (Note [Posts by address]; at most 1 MiB where a rank has "      \
    "several reduce threads: Note [By-address cap on many cores]; 0: every post goes through the " \
    "pool, <= 64 KiB).")                                                                           \
  X(int64_t, cache_capacity, "PERSEUS_CACHE_CAPACITY", int64_t{1024},                              \
    "Negotiated tensors remembered by the response cache; 0 disables the cache.")                  \
  X(int64_t, num_streams, "PERSEUS_NUM_STREAMS", int64_t{1},                                       \
    "CUDA streams (fused buffers in flight) per device.")                                          \
  X(int64_t, allreduce_dtype, "PERSEUS_ALLREDUCE_DTYPE", int64_t{1},                               \
    "AIACC wire type for float32 allreduce: 0 fp16, 1 none, 2 mixed.")                             \
  X(bool, allreduce_nancheck, "PERSEUS_ALLREDUCE_NANCHECK", false,                                 \
    "Report which tensor first carried a NaN or Inf into an allreduce.")                           \
  X(int64_t, shm_slot_bytes, "PERSEUS_SHM_SLOT_BYTES", int64_t{2} << 20,                           \
    "Bytes of each rank's shared-memory staging slot; collectives pipeline through it.")           \
  X(int64_t, reduce_threads, "PERSEUS_REDUCE_THREADS", int64_t{0},                                 \
    "Threads per rank for large shared-memory allreduces; 0 = auto: the CPUs of this process's "   \
    "affinity mask divided by the ranks on this host (a bound rank's own share), 1 to 8.")         \
  X(std::string, shm_stores, "PERSEUS_SHM_STORES", std::string("auto"),                            \
    "How shared-memory collectives write what other cores read: cached, streaming (non-temporal "  \
    "stores, through memory) or auto (measured online, per size; docs/algorithms.md, Slot "        \
    "stores).")                                                                                    \
  X(bool, shm_single_copy, "PERSEUS_SHM_SINGLE_COPY", true,                                        \
    "Large broadcasts and allgathers among the ranks of one host copy straight from the other "    \
    "ranks' memory (cross-memory attach: one copy where the slots take two). 0: this rank does "   \
    "not, and the collectives it takes part in run through the slots; so do all of them wherever " \
    "the system forbids cross-memory attach (the ranks find out and agree at each call).")         \
  X(int64_t, staged_chunk_bytes, "PERSEUS_STAGED_CHUNK_BYTES", int64_t{8} << 20,                   \
    "GPU tensors without NCCL (the host-staged path): bytes per pipeline chunk; each chunk is "    \
    "copied to pinned host memory, reduced by the CPU collectives and copied back while the next " \
    "one moves.")                                                                                  \
  X(std::string, nccl_library, "PERSEUS_NCCL_LIBRARY", std::string(),                              \
    "Path of the libnccl.so.2 to load. Default: the NCCL the process already loaded (PyTorch's), " \
    "else NCCL_HOME/lib, the loader's search path, then the nvidia-nccl-cu* wheel beside the "     \
    "package.")                                                                                    \
  X(int64_t, gpu_output_cache_bytes, "PERSEUS_GPU_OUTPUT_CACHE_BYTES", int64_t{-1},                \
    "Bytes of idle device memory kept per GPU for the outputs the library allocates (allgather, "  \
    "alltoall, reducescatter on CUDA tensors): a dropped output returns here once the device has " \
    "finished the work issued before the drop, and serves the next output of its size class; "     \
    "idle blocks are freed first when the device runs out of memory. -1 = a sixteenth of the "     \
    "device's memory, 0 = free each output when it is dropped (Note [Output block cache]).")       \
  X(int64_t, shm_ring_bytes, "PERSEUS_SHM_RING_BYTES", int64_t{4} << 20,                           \
    "Bytes of each shared-memory ring (one per ordered pair of ranks on a host).")                 \
  X(int64_t, tcp_chunk_bytes, "PERSEUS_TCP_CHUNK_BYTES", int64_t{1} << 20,                         \
    "Segment size that TCP algorithms pipeline with.")

struct Params {
#define PERSEUS_PARAM_MEMBER(type, member, variable, default_value, description) \
  type member = default_value;
  PERSEUS_PARAM_LIST(PERSEUS_PARAM_MEMBER)
#undef PERSEUS_PARAM_MEMBER

  using Lookup = std::function<const char*(const char*)>;
  // Parses every variable through `lookup` (getenv by default). Throws InvalidArgumentError.
  static Params fromEnvironment(const Lookup& lookup = nullptr);

  struct Entry {
    std::string variable;
    std::string value;
    std::string default_value;
    std::string description;
  };
  std::vector<Entry> describe() const;
};

// Environment helpers shared by the bootstrap code. They throw InvalidArgumentError naming the
// variable when a value is set but does not parse.
namespace env {
const char* get(const char* name);  // nullptr when unset or empty
int64_t getInt(const char* name, int64_t fallback);
bool has(const char* name);
}  // namespace env

}  // namespace perseus
