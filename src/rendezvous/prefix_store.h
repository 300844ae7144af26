// A view of a Store with every key under a fixed prefix (c10d's PrefixStore): one store serves
// many memberships of an elastic job, each under its epoch's prefix, without their keys
// meeting. Thread safety and ownership are those of the wrapped store, which this owns.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "rendezvous/store.h"

namespace perseus::rendezvous {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::unique_ptr<Store> inner)
      : prefix_(std::move(prefix)), inner_(std::move(inner)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_->add(prefix_ + key, delta);
  }

 private:
  std::string prefix_;
  std::unique_ptr<Store> inner_;
};

}  // namespace perseus::rendezvous
