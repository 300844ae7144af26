// The layout of one alltoall (executor.h: planAlltoall), shared by the CPU and GPU executors.
#include "collectives/collectives.h"
#include "engine/exec/executor.h"

namespace perseus::engine {

AlltoallPlan planAlltoall(collectives::Communicator& comm, const Entry& e, size_t tensor) {
  const int n = comm.size();
  const TensorMeta& m = e.request.tensors[tensor];
  const int64_t rows = m.shape.empty() ? 1 : m.shape[0];
  std::vector<int64_t> send_rows(n);
  AlltoallPlan plan;
  plan.recv_rows.resize(n);
  for (int k = 0; k < n; ++k) send_rows[k] = e.splits.empty() ? rows / n : e.splits[k];
  // The row counts are host metadata: they go over the CPU transport whatever the device.
  std::vector<size_t> eight(n, sizeof(int64_t));
  collectives::alltoallv(comm, send_rows.data(), eight, plan.recv_rows.data(), eight);
  const size_t row_bytes = static_cast<size_t>(m.rowElements()) * dataTypeSize(m.dtype);
  plan.send_bytes.resize(n);
  plan.recv_bytes.resize(n);
  int64_t total = 0;
  for (int k = 0; k < n; ++k) {
    plan.send_bytes[k] = static_cast<size_t>(send_rows[k]) * row_bytes;
    plan.recv_bytes[k] = static_cast<size_t>(plan.recv_rows[k]) * row_bytes;
    total += plan.recv_rows[k];
  }
  plan.out_shape = m.shape;
  if (plan.out_shape.empty()) plan.out_shape.push_back(1);
  plan.out_shape[0] = total;
  return plan;
}

}  // namespace perseus::engine
