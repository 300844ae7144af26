#!/bin/sh
# The AIACC guide's config.sh: one process per GPU, started by mpirun, e.g.
#   mpirun -np 32 -npernode 8 -hostfile mpi_host.txt ./mxnet_kvstore_config.sh
# Open MPI sets OMPI_COMM_WORLD_RANK / _LOCAL_SIZE; Perseus reads the same variables.
GPU=$((OMPI_COMM_WORLD_RANK % OMPI_COMM_WORLD_LOCAL_SIZE))

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MXNET_USE_OPERATOR_TUNING=0
export MXNET_USE_NUM_CORES_OPERATOR_TUNING=1

cd "$(dirname "$0")"
MXNET_VISIBLE_DEVICE=$GPU exec python mxnet_kvstore_fit.py \
    --kv-store dist_sync_perseus \
    --gpus "$GPU" "$@"
