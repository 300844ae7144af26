// Joins a job started by horovodrun 0.28 in Gloo mode: rank 0 hands the Perseus store to the
// other ranks through horovodrun's own HTTP rendezvous server (Note [horovodrun rendezvous]).
#pragma once

#include <chrono>
#include <string>

#include "common/params.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/store_from_env.h"

namespace perseus::rendezvous {

// A client of the key-value store that horovodrun serves at HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT
// (horovod/runner/http/http_server.py): one HTTP/1.0 request per call on "/<scope>/<key>".
// Throws PeerLostError naming the server when it cannot be reached or answers oddly.
class HorovodKvClient {
 public:
  HorovodKvClient(std::string host, int port) : host_(std::move(host)), port_(port) {}

  void put(const std::string& scope, const std::string& key, const std::string& value);
  // False while the key is absent (404).
  bool get(const std::string& scope, const std::string& key, std::string* value);
  void erase(const std::string& scope, const std::string& key);

  std::string where() const { return host_ + ":" + std::to_string(port_); }

 private:
  // The status code; `body` gets the payload.
  int request(const std::string& verb, const std::string& path, const std::string& payload,
              std::string* body);

  std::string host_;
  int port_;
};

StoreConnection horovodrunStore(const LaunchInfo& info, const Params& params);

}  // namespace perseus::rendezvous
