"""Horovod 0.28's public surface, listed from Horovod's own source, for the conformance test
(Horovod itself is not installed here):
  horovod/torch/__init__.py (v0.28: the `from horovod.torch... import` lines),
  horovod/mxnet/__init__.py and horovod/mxnet/mpi_ops.py (v0.28),
  horovod/runner/launch.py (parse_args, v0.28) for the horovodrun flags,
  docs/api.rst, docs/timeline.rst, docs/autotune.rst, docs/elastic.rst and
  horovod/common/utils/env_parser.h for the HOROVOD_* variables."""

TORCH = """
elastic Compression allgather_object broadcast_object broadcast_optimizer_state
broadcast_parameters allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce
grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async
allgather allgather_async grouped_allgather grouped_allgather_async broadcast broadcast_async
broadcast_ broadcast_async_ alltoall alltoall_async reducescatter reducescatter_async
grouped_reducescatter grouped_reducescatter_async join barrier poll synchronize init shutdown
is_initialized start_timeline stop_timeline size local_size cross_size rank local_rank
cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built
ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set add_process_set
remove_process_set Average Sum Adasum Min Max Product HorovodInternalError DistributedOptimizer
SyncBatchNorm
""".split()

MXNET = """
init shutdown is_initialized start_timeline stop_timeline size local_size cross_size rank
local_rank cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built
nccl_built ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set
add_process_set remove_process_set Average Sum Adasum Min Max Product Compression
broadcast_object allgather_object allreduce allreduce_ grouped_allreduce grouped_allreduce_
allgather grouped_allgather broadcast broadcast_ alltoall reducescatter grouped_reducescatter
DistributedOptimizer DistributedTrainer broadcast_parameters
""".split()

# horovodrun flag -> an example value (None: a switch). Every spelling of horovodrun 0.28.1's
# option table (horovod/runner/launch.py, parse_args), and only those.
HOROVODRUN_FLAGS = {
    "-np": "1", "--num-proc": "1", "-cb": None, "--check-build": None, "-v": None,
    "--version": None,
    "-p": "22", "--ssh-port": "22", "-i": "/dev/null", "--ssh-identity-file": "/dev/null",
    "--disable-cache": None, "--start-timeout": "30", "--network-interface": "lo",
    "--network-interfaces": "lo", "--output-filename": "out", "--verbose": None,
    "--config-file": None, "--fusion-threshold-mb": "32", "--cycle-time-ms": "5",
    "--cache-capacity": "1024", "--hierarchical-allreduce": None,
    "--no-hierarchical-allreduce": None, "--hierarchical-allgather": None,
    "--no-hierarchical-allgather": None,
    "--autotune": None, "--no-autotune": None, "--autotune-log-file": "a.csv",
    "--autotune-warmup-samples": "3", "--autotune-steps-per-sample": "10",
    "--autotune-bayes-opt-max-samples": "20", "--autotune-gaussian-process-noise": "0.8",
    "--min-np": "1", "--min-num-proc": "1", "--max-np": "2", "--max-num-proc": "2",
    "--slots-per-host": "1", "--elastic-timeout": "600",
    "--reset-limit": "1", "--blacklist-cooldown-range": "1 2", "--host-discovery-script": "d.sh",
    "--timeline-filename": "t.json", "--timeline-mark-cycles": None,
    "--no-timeline-mark-cycles": None, "--no-stall-check": None, "--stall-check": None,
    "--stall-check-warning-time-seconds": "60", "--stall-check-shutdown-time-seconds": "0",
    "--mpi-threads-disable": None, "--no-mpi-threads-disable": None, "--mpi-args": "-x A",
    "--tcp": None, "--binding-args": "-bind-to none", "--num-nccl-streams": "1",
    "--thread-affinity": "0", "--gloo-timeout-seconds": "30", "--log-level": "WARNING",
    "--log-with-timestamp": None, "--log-without-timestamp": None, "-prefix-timestamp": None,
    "--prefix-output-with-timestamp": None, "--log-hide-timestamp": None,
    "--no-log-hide-timestamp": None,
    "-H": "localhost:1", "--hosts": "localhost:1", "-hostfile": "h.txt", "--hostfile": "h.txt",
    "--gloo": None, "--mpi": None, "--jsrun": None,
}

# The HOROVOD_* runtime variables Horovod 0.28 documents or reads.
HOROVOD_ENV = """
HOROVOD_FUSION_THRESHOLD HOROVOD_CYCLE_TIME HOROVOD_CACHE_CAPACITY
HOROVOD_HIERARCHICAL_ALLREDUCE HOROVOD_HIERARCHICAL_ALLGATHER HOROVOD_TORUS_ALLREDUCE
HOROVOD_TIMELINE HOROVOD_TIMELINE_MARK_CYCLES HOROVOD_AUTOTUNE HOROVOD_AUTOTUNE_LOG
HOROVOD_AUTOTUNE_WARMUP_SAMPLES HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
HOROVOD_STALL_CHECK_DISABLE HOROVOD_STALL_CHECK_TIME_SECONDS
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS HOROVOD_CONTROLLER HOROVOD_CPU_OPERATIONS
HOROVOD_NUM_NCCL_STREAMS HOROVOD_BATCH_D2D_MEMCOPIES HOROVOD_DISABLE_GROUP_FUSION
HOROVOD_ENABLE_ASYNC_COMPLETION HOROVOD_MPI_THREADS_DISABLE HOROVOD_THREAD_AFFINITY
HOROVOD_DYNAMIC_PROCESS_SETS HOROVOD_ADASUM_MPI_CHUNK_SIZE HOROVOD_LOG_LEVEL
HOROVOD_LOG_HIDE_TIME HOROVOD_GLOO_TIMEOUT_SECONDS HOROVOD_GLOO_RENDEZVOUS_ADDR
HOROVOD_GLOO_RENDEZVOUS_PORT HOROVOD_GLOO_IFACE HOROVOD_RANK HOROVOD_SIZE HOROVOD_LOCAL_RANK
HOROVOD_LOCAL_SIZE HOROVOD_CROSS_RANK HOROVOD_CROSS_SIZE HOROVOD_HOSTNAME HOROVOD_ELASTIC
HOROVOD_START_TIMEOUT HOROVOD_DISABLE_NVTX_RANGES
""".split()
