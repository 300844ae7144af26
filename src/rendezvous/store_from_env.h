// Reaches the rendezvous store that the launcher provides (see Note [Store discovery]).
#pragma once

#include <memory>
#include <string>

#include "common/params.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/store.h"

namespace perseus::rendezvous {

struct StoreConnection {
  std::unique_ptr<Store> store;  // owns the server too when this rank started it
  std::string secret_hex;        // the job secret, for the data plane's handshakes
  // Called once every rank has reached the store: removes the discovery file, if any.
  std::function<void()> after_rendezvous;
};

// How many consecutive ports from a derived store port rank 0 may take (Note [Derived store
// port]).
constexpr int kDerivedPortCandidates = 8;

// Throws InvalidArgumentError (no way to find a store), TimeoutError (not found in time).
StoreConnection connectStore(const LaunchInfo& info, const Params& params);

}  // namespace perseus::rendezvous
