#include "backends/nccl/comm_state.h"

#include <unistd.h>

#include <cstring>
#include <map>

#include "backends/nccl/cuda_util.h"
#include "backends/nccl/nccl_api.h"
#include "collectives/collectives.h"
#include "common/logging.h"

namespace perseus::nccl {
namespace {

// What each member tells the others when a set first uses a device.
struct MemberRecord {
  char host[64];
  char bus_id[32];
  int32_t nccl_ok;
  int32_t reserved;
};

std::string hostOf(const backends::GpuBackendOptions& options, int global_rank) {
  if (global_rank >= 0 && static_cast<size_t>(global_rank) < options.hostnames.size()) {
    return options.hostnames[static_cast<size_t>(global_rank)];
  }
  char name[64] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string labelOf(const collectives::Communicator& comm) {
  std::string s = "process set [";
  for (int i = 0; i < comm.size() && i < 8; ++i)
    s += (i ? "," : "") + std::to_string(comm.globalRank(i));
  if (comm.size() > 8) s += ",... " + std::to_string(comm.size()) + " ranks";
  return s + "]";
}

}  // namespace

std::unique_ptr<CommState> CommState::create(collectives::Communicator& comm, int device,
                                             const backends::GpuBackendOptions& options) {
  auto s = std::make_unique<CommState>();
  s->label = labelOf(comm);
  std::string why;
  const bool nccl_ok = ncclApi(&why) != nullptr;

  MemberRecord mine{};
  std::strncpy(mine.host, hostOf(options, comm.globalRank(comm.rank())).c_str(),
               sizeof(mine.host) - 1);
  checkCuda(cudaDeviceGetPCIBusId(mine.bus_id, sizeof(mine.bus_id), device),
            "cudaDeviceGetPCIBusId");
  mine.nccl_ok = nccl_ok ? 1 : 0;
  std::vector<MemberRecord> all(static_cast<size_t>(comm.size()));
  if (comm.size() > 1) {
    collectives::allgatherv(comm, &mine, all.data(),
                            std::vector<size_t>(all.size(), sizeof(MemberRecord)));
  } else {
    all[0] = mine;
  }

  // Hosts in order of first appearance; members per host.
  std::map<std::string, int> host_ids;
  std::vector<int> per_host;
  bool shared_gpu = false, all_nccl = true;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string host(all[i].host);
    auto it = host_ids.emplace(host, static_cast<int>(per_host.size())).first;
    if (it->second == static_cast<int>(per_host.size())) per_host.push_back(0);
    if (static_cast<int>(i) == comm.rank()) {
      s->host_index = it->second;
      s->local_index = per_host[static_cast<size_t>(it->second)];
    }
    per_host[static_cast<size_t>(it->second)]++;
    all_nccl = all_nccl && all[i].nccl_ok != 0;
    for (size_t j = 0; j < i; ++j) {
      shared_gpu = shared_gpu || (std::strcmp(all[i].host, all[j].host) == 0 &&
                                  std::strcmp(all[i].bus_id, all[j].bus_id) == 0);
    }
  }
  s->hosts = static_cast<int>(per_host.size());
  s->local_size = per_host[static_cast<size_t>(s->host_index)];
  for (int n : per_host) s->uniform = s->uniform && n == s->local_size;

  // Every member saw the same records, so every member takes the same decision.
  if (shared_gpu) {
    s->staged = true;
    s->staged_reason = "two ranks of the set share one GPU (NCCL refuses that)";
  } else if (!all_nccl) {
    s->staged = true;
    s->staged_reason = nccl_ok ? "NCCL cannot be loaded on some rank of the set" : why;
  }
  if (s->staged) {
    PERSEUS_LOG(INFO, kCuda) << s->label << " on device " << device
                             << " uses the host-staged data plane: " << s->staged_reason;
  } else {
    s->flat = NcclComm::create(comm, device, options.params.timeout_s, s->label);
  }
  return s;
}

void CommState::ensureHierarchical() {
  if (local) return;
  local = flat->split(host_index, flat->rank(), label + " (this host)");
  cross = flat->split(local_index, host_index, label + " (across hosts)");
}

void CommState::abort() {
  for (auto* c : {&flat, &local, &cross}) {
    if (*c) (*c)->abort();
  }
}

}  // namespace perseus::nccl
