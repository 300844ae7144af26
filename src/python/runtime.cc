// Bindings of lifetime, topology, process sets, introspection and the launcher's store server
// and client.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "callbacks.h"
#include "errors.h"
#include "handle.h"

namespace py = pybind11;

namespace perseus_py {
namespace {

// The rendezvous store that perseusrun hosts for its job; stopped on stop() or destruction.
class StoreServer {
 public:
  StoreServer(const std::string& bind_address, int32_t port, const std::string& secret) {
    check(perseus_store_server_start(bind_address.c_str(), port, secret.c_str(), &port_, &server_),
          "perseus_store_server_start");
  }
  ~StoreServer() {
    if (server_ != nullptr) perseus_store_server_stop(server_);
  }
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  void stop() {
    if (server_ == nullptr) return;
    void* server = server_;
    server_ = nullptr;
    py::gil_scoped_release release;
    check(perseus_store_server_stop(server), "perseus_store_server_stop");
  }
  int32_t port() const { return port_; }

 private:
  int32_t port_ = 0;
  void* server_ = nullptr;
};

// A connection to a rendezvous store (perseusrun's elastic driver and its workers); closed on
// close() or destruction. Every call releases the GIL: a get may wait.
class StoreClient {
 public:
  StoreClient(const std::string& host, int32_t port, const std::string& secret, double timeout_s) {
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_store_client_connect(host.c_str(), port, secret.c_str(), timeout_s, &client_);
    }
    check(s, "perseus_store_client_connect");
  }
  ~StoreClient() {
    if (client_ != nullptr) perseus_store_client_close(client_);
  }
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void close() {
    if (client_ == nullptr) return;
    void* client = client_;
    client_ = nullptr;
    check(perseus_store_client_close(client), "perseus_store_client_close");
  }
  void set(const std::string& key, const py::bytes& value) {
    std::string v = value;
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_store_client_set(open(), key.c_str(), v.data(), static_cast<int64_t>(v.size()));
    }
    check(s, "perseus_store_client_set");
  }
  // timeout_s < 0: None when the key is missing; otherwise waits, raising on timeout.
  py::object get(const std::string& key, double timeout_s) {
    int32_t found = 0;
    void* value = nullptr;
    int64_t bytes = 0;
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_store_client_get(open(), key.c_str(), timeout_s, &found, &value, &bytes);
    }
    check(s, "perseus_store_client_get");
    if (!found) return py::none();
    py::bytes out(static_cast<const char*>(value), static_cast<size_t>(bytes));
    perseus_store_free(value);
    return py::object(std::move(out));
  }
  int64_t add(const std::string& key, int64_t delta) {
    int64_t result = 0;
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_store_client_add(open(), key.c_str(), delta, &result);
    }
    check(s, "perseus_store_client_add");
    return result;
  }

 private:
  void* open() const {
    if (client_ == nullptr) throw std::runtime_error("StoreClient is closed");
    return client_;
  }
  void* client_ = nullptr;
};

py::dict topology() {
  perseus_topology t{};
  check(perseus_get_topology(&t), "perseus_get_topology");
  py::dict d;
  d["rank"] = t.rank;
  d["size"] = t.size;
  d["local_rank"] = t.local_rank;
  d["local_size"] = t.local_size;
  d["cross_rank"] = t.cross_rank;
  d["cross_size"] = t.cross_size;
  return d;
}

std::vector<int32_t> processSetRanks(int32_t id) {
  int32_t count = 0;
  check(perseus_process_set_ranks(id, nullptr, 0, &count), "perseus_process_set_ranks");
  std::vector<int32_t> ranks(static_cast<size_t>(count));
  check(perseus_process_set_ranks(id, ranks.data(), count, &count), "perseus_process_set_ranks");
  ranks.resize(static_cast<size_t>(count));
  return ranks;
}

// The job's life: init, shutdown and what describes the running job.
void registerLifecycle(py::module_& m) {
  m.def(
      "init",
      [] {
        perseus_status s;
        {
          py::gil_scoped_release release;  // rendezvous waits for every rank
          s = perseus_init();
        }
        check(s, "perseus_init");
      },
      "Rendezvous with the other ranks and start the engine (idempotent).");
  m.def("shutdown", [] {
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_shutdown();
    }
    dropOrphans();  // every pending handle has failed: the engine holds no buffer now
    check(s, "perseus_shutdown");
  });
  m.def("is_initialized", [] { return perseus_is_initialized() != 0; });
  m.def("topology", &topology, "rank, size, local_rank, local_size, cross_rank, cross_size.");
  m.def("last_error", [] { return std::string(perseus_last_error()); });
  m.def("build_info", [] { return std::string(perseus_build_info()); });
  m.def("runtime_info", [] {
    py::gil_scoped_release release;  // loading libnccl can take a while
    return std::string(perseus_runtime_info());
  });
  m.def("params_dump", [] { return std::string(perseus_params_dump()); });
}

// What a running engine tells about itself: the timeline and its counters.
void registerIntrospection(py::module_& m) {
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        perseus_status s;
        {
          py::gil_scoped_release release;  // waits for the engine thread's cycle lock
          s = perseus_start_timeline(path.c_str(), mark_cycles ? 1 : 0);
        }
        check(s, "perseus_start_timeline");
      },
      py::arg("path"), py::arg("mark_cycles") = false);
  m.def("stop_timeline", [] {
    perseus_status s;
    {
      py::gil_scoped_release release;
      s = perseus_stop_timeline();
    }
    check(s, "perseus_stop_timeline");
  });
  m.def(
      "engine_stats",
      [] {
        perseus_engine_stats s;
        check(perseus_get_engine_stats(&s), "perseus_get_engine_stats");
        py::dict d;
        d["cycles"] = s.cycles;
        d["control_exchanges"] = s.control_exchanges;
        d["control_bytes"] = s.control_bytes;
        d["coordinator_rounds"] = s.coordinator_rounds;
        d["cached_responses"] = s.cached_responses;
        d["coordinated_responses"] = s.coordinated_responses;
        d["negotiation_ns"] = s.negotiation_ns;
        d["posted_allreduces"] = s.posted_allreduces;
        d["posted_collectives"] = s.posted_collectives;
        return d;
      },
      "This rank's engine counters since init (perseus_engine_stats).");
}

void registerProcessSets(py::module_& m) {
  using py::arg;
  m.def(
      "add_process_set",
      [](const std::vector<int32_t>& ranks) {
        int32_t id = -1;
        perseus_status s;
        {
          py::gil_scoped_release release;  // collective over all ranks
          s = perseus_add_process_set(ranks.data(), static_cast<int32_t>(ranks.size()), &id);
        }
        check(s, "perseus_add_process_set");
        return id;
      },
      arg("ranks"));
  m.def(
      "remove_process_set",
      [](int32_t id) {
        perseus_status s;
        {
          py::gil_scoped_release release;
          s = perseus_remove_process_set(id);
        }
        check(s, "perseus_remove_process_set");
      },
      arg("id"));
  m.def(
      "process_set_info",
      [](int32_t id) {
        int32_t rank = -1, size = 0;
        check(perseus_process_set_info(id, &rank, &size), "perseus_process_set_info");
        return py::make_tuple(rank, size);
      },
      arg("id"), "(rank_in_set or -1, size)");
  m.def("process_set_ranks", &processSetRanks, arg("id"));
  m.def("_stop_callbacks", &stopCallbacks);
}

// The launcher's authenticated store, both ends.
void registerStores(py::module_& m) {
  using py::arg;
  py::class_<StoreServer>(m, "StoreServer",
                          "The authenticated rendezvous store, hosted by a launcher.")
      .def(py::init<const std::string&, int32_t, const std::string&>(), arg("bind_address"),
           arg("port"), arg("secret"))
      .def("stop", &StoreServer::stop)
      .def_property_readonly("port", &StoreServer::port);

  py::class_<StoreClient>(m, "StoreClient", "A connection to an authenticated rendezvous store.")
      .def(py::init<const std::string&, int32_t, const std::string&, double>(), arg("host"),
           arg("port"), arg("secret"), arg("timeout_s") = 30.0)
      .def("set", &StoreClient::set, arg("key"), arg("value"))
      .def("get", &StoreClient::get, arg("key"), arg("timeout_s") = -1.0,
           "bytes; timeout_s < 0: None at once when the key is missing.")
      .def("add", &StoreClient::add, arg("key"), arg("delta"))
      .def("close", &StoreClient::close);

  m.attr("PROCESS_SET_GLOBAL") = PERSEUS_PROCESS_SET_GLOBAL;
  m.attr("PROCESS_SET_LOCAL") = PERSEUS_PROCESS_SET_LOCAL;
  m.attr("PROCESS_SET_CROSS") = PERSEUS_PROCESS_SET_CROSS;
  m.attr("C_API_VERSION") = PERSEUS_C_API_VERSION;
}

}  // namespace

void registerRuntime(py::module_& m) {
  registerLifecycle(m);
  registerIntrospection(m);
  registerProcessSets(m);
  registerStores(m);
}

}  // namespace perseus_py
