#include "common/params.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/status.h"

namespace perseus {
namespace {

// Horovod's names still work, so that existing job scripts keep their tuning.
const char* horovodAlias(const std::string& variable) {
  if (variable == "PERSEUS_FUSION_THRESHOLD") return "HOROVOD_FUSION_THRESHOLD";
  if (variable == "PERSEUS_TIMELINE") return "HOROVOD_TIMELINE";
  if (variable == "PERSEUS_TIMELINE_MARK_CYCLES") return "HOROVOD_TIMELINE_MARK_CYCLES";
  if (variable == "PERSEUS_LOG_LEVEL") return "HOROVOD_LOG_LEVEL";
  if (variable == "PERSEUS_STALL_WARNING") return "HOROVOD_STALL_CHECK_TIME_SECONDS";
  if (variable == "PERSEUS_STALL_SHUTDOWN") return "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS";
  if (variable == "PERSEUS_HIERARCHICAL_ALLREDUCE") return "HOROVOD_HIERARCHICAL_ALLREDUCE";
  if (variable == "PERSEUS_CACHE_CAPACITY") return "HOROVOD_CACHE_CAPACITY";
  return nullptr;
}

[[noreturn]] void badValue(const std::string& variable, const std::string& text,
                           const char* expected) {
  throw InvalidArgumentError(variable + "='" + text + "' is not " + expected +
                             "; unset it or give a valid value");
}

void parse(const std::string& v, const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0') badValue(v, text, "an integer");
  *out = value;
}

void parse(const std::string& v, const std::string& text, double* out) {
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0') badValue(v, text, "a number");
  *out = value;
}

void parse(const std::string& v, const std::string& text, bool* out) {
  if (text == "1" || text == "true" || text == "True" || text == "yes" || text == "on") {
    *out = true;
  } else if (text == "0" || text == "false" || text == "False" || text == "no" || text == "off") {
    *out = false;
  } else {
    badValue(v, text, "a boolean (1/0, true/false)");
  }
}

void parse(const std::string&, const std::string& text, std::string* out) { *out = text; }

std::string show(int64_t v) { return std::to_string(v); }
std::string show(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string show(bool v) { return v ? "1" : "0"; }
std::string show(const std::string& v) { return v; }

}  // namespace

Params Params::fromEnvironment(const Lookup& lookup) {
  auto get = [&](const char* name) -> const char* {
    const char* value = lookup ? lookup(name) : std::getenv(name);
    return (value != nullptr && *value != '\0') ? value : nullptr;
  };
  Params p;
#define PERSEUS_PARAM_PARSE(type, member, variable, default_value, description) \
  {                                                                             \
    const char* text = get(variable);                                           \
    std::string name = variable;                                                \
    if (text == nullptr) {                                                      \
      if (const char* alias = horovodAlias(variable)) {                         \
        text = get(alias);                                                      \
        name = alias;                                                           \
      }                                                                         \
    }                                                                           \
    if (text != nullptr) parse(name, text, &p.member);                          \
  }
  PERSEUS_PARAM_LIST(PERSEUS_PARAM_PARSE)
#undef PERSEUS_PARAM_PARSE
  if (p.fusion_threshold < 0)
    badValue("PERSEUS_FUSION_THRESHOLD", show(p.fusion_threshold), "a size >= 0");
  if (p.posted_by_address < 0)
    badValue("PERSEUS_POSTED_BY_ADDRESS", show(p.posted_by_address), "a size >= 0 (0: off)");
  if (p.timeout_s <= 0)
    badValue("PERSEUS_TIMEOUT", show(p.timeout_s), "a positive number of seconds");
  if (p.tcp_connections < 1 || p.tcp_connections > 64)
    badValue("PERSEUS_TCP_CONNECTIONS", show(p.tcp_connections), "between 1 and 64");
  if (p.shm_slot_bytes < 4096)
    badValue("PERSEUS_SHM_SLOT_BYTES", show(p.shm_slot_bytes), "at least 4096");
  if (p.reduce_threads < 0 || p.reduce_threads > 64)
    badValue("PERSEUS_REDUCE_THREADS", show(p.reduce_threads), "between 0 (auto) and 64");
  if (p.staged_chunk_bytes < 4096)
    badValue("PERSEUS_STAGED_CHUNK_BYTES", show(p.staged_chunk_bytes), "at least 4096");
  if (p.gpu_output_cache_bytes < -1)
    badValue("PERSEUS_GPU_OUTPUT_CACHE_BYTES", show(p.gpu_output_cache_bytes),
             "-1 (auto), 0 (off) or a size");
  if (p.shm_stores != "auto" && p.shm_stores != "cached" && p.shm_stores != "streaming")
    badValue("PERSEUS_SHM_STORES", p.shm_stores, "auto, cached or streaming");
  if (p.bind_to != "none" && p.bind_to != "core")
    badValue("PERSEUS_BIND_TO", p.bind_to, "core or none");
  if (p.num_streams < 1) badValue("PERSEUS_NUM_STREAMS", show(p.num_streams), "at least 1");
  if (p.allreduce_dtype < 0 || p.allreduce_dtype > 2)
    badValue("PERSEUS_ALLREDUCE_DTYPE", show(p.allreduce_dtype), "0, 1 or 2");
  return p;
}

std::vector<Params::Entry> Params::describe() const {
  std::vector<Entry> entries;
#define PERSEUS_PARAM_DESCRIBE(type, member, variable, default_value, description) \
  entries.push_back({variable, show(member), show(type(default_value)), description});
  PERSEUS_PARAM_LIST(PERSEUS_PARAM_DESCRIBE)
#undef PERSEUS_PARAM_DESCRIBE
  return entries;
}

namespace env {
const char* get(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}
bool has(const char* name) { return get(name) != nullptr; }
int64_t getInt(const char* name, int64_t fallback) {
  const char* text = get(name);
  if (text == nullptr) return fallback;
  int64_t value = 0;
  parse(name, text, &value);
  return value;
}
}  // namespace env

}  // namespace perseus
