// Reaches the rendezvous store that the launcher provides (see Note [Store discovery]).
#pragma once

#include <functional>
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

// Starts a store served by this process at `*port` (0: any free port; *port gets the port).
// The secret is random unless given.
StoreConnection startLocalServer(const std::string& host, const Params& params, int* port,
                                 const std::string& secret_hex = std::string());

// How rank 0 hands its store to the other ranks through the launcher's own channel (a PMI
// value, an MPI broadcast, horovodrun's HTTP store): "host,port,secret" (no spaces).
std::string publishedStore(const std::string& host, int port, const std::string& secret_hex);
// A rank other than 0: connects to the store that rank 0 published through `via`.
StoreConnection connectPublished(std::string value, const char* via, const Params& params);

// Throws InvalidArgumentError (no way to find a store), TimeoutError (not found in time).
StoreConnection connectStore(const LaunchInfo& info, const Params& params);

}  // namespace perseus::rendezvous
