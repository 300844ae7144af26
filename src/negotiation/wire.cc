#include "negotiation/wire.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace perseus::engine {
namespace {

// A lower bound of the encoded size of one Request or Response (their fixed-size fields).
constexpr size_t kMinEncodedBytes = 32;

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "pod only");
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) pod<T>(x);
  }
  void tensors(const std::vector<TensorMeta>& ts) {
    pod<uint32_t>(static_cast<uint32_t>(ts.size()));
    for (const auto& t : ts) {
      pod(t.dtype);
      vec(t.shape);
    }
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> vec() {
    uint32_t n = pod<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(T));
    std::vector<T> v(n);
    for (auto& x : v) x = pod<T>();
    return v;
  }
  std::vector<TensorMeta> tensors() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::vector<TensorMeta> ts(n);
    for (auto& t : ts) {
      t.dtype = pod<DataType>();
      t.shape = vec<int64_t>();
    }
    return ts;
  }
  bool done() const { return pos_ == in_.size(); }
  // A list length, checked against the bytes left (each element takes at least min_bytes)
  // before the caller allocates the list: a corrupt length must not size an allocation.
  uint32_t count(size_t min_bytes) {
    uint32_t n = pod<uint32_t>();
    need(static_cast<size_t>(n) * min_bytes);
    return n;
  }

 private:
  void need(size_t n) const {
    PERSEUS_CHECK(pos_ + n <= in_.size(), "truncated negotiation message ("
                                              << in_.size() << " bytes, need " << pos_ + n << ")");
  }
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encodeRequests(const std::vector<Request>& requests) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const Request& r : requests) {
    w.pod(r.op);
    w.str(r.name);
    w.pod(r.process_set);
    w.tensors(r.tensors);
    w.pod(r.reduce_op);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.pod(r.root);
    w.pod(r.num_splits);
    w.vec(r.set_ranks);
    w.pod(r.set_id);
    w.pod(r.device_kind);
    w.pod(r.waited_s);
  }
  return w.take();
}

std::vector<Request> decodeRequests(const std::vector<uint8_t>& bytes) {
  Reader rd(bytes);
  std::vector<Request> out(rd.count(kMinEncodedBytes));
  for (Request& r : out) {
    r.op = rd.pod<OpType>();
    r.name = rd.str();
    r.process_set = rd.pod<int32_t>();
    r.tensors = rd.tensors();
    r.reduce_op = rd.pod<ReduceOp>();
    r.prescale = rd.pod<double>();
    r.postscale = rd.pod<double>();
    r.root = rd.pod<int32_t>();
    r.num_splits = rd.pod<int32_t>();
    r.set_ranks = rd.vec<int32_t>();
    r.set_id = rd.pod<int32_t>();
    r.device_kind = rd.pod<DeviceKind>();
    r.waited_s = rd.pod<double>();
  }
  PERSEUS_CHECK(rd.done(), "trailing bytes in a request list");
  return out;
}

std::vector<uint8_t> encodeResponses(const std::vector<Response>& responses,
                                     const std::vector<StallNotice>& notices) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const Response& r : responses) {
    w.pod(r.op);
    w.str(r.name);
    w.pod<uint8_t>(r.is_error ? 1 : 0);
    w.pod(r.error_code);
    w.str(r.error_message);
    w.tensors(r.tensors);
    w.pod(r.reduce_op);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.pod(r.root);
    w.vec(r.first_dims);
    w.pod(r.last_joined_rank);
    w.vec(r.set_ranks);
    w.pod(r.set_id);
    w.pod(r.device_kind);
    w.pod<uint8_t>(r.cross_set ? 1 : 0);
  }
  w.pod<uint32_t>(static_cast<uint32_t>(notices.size()));
  for (const StallNotice& n : notices) {
    w.pod(n.op);
    w.str(n.name);
    w.str(n.tensors);
    w.vec(n.missing);
    w.pod<uint32_t>(static_cast<uint32_t>(n.hosts.size()));
    for (const std::string& h : n.hosts) w.str(h);
    w.pod(n.waited_s);
    w.pod(n.process_set);
  }
  return w.take();
}

std::vector<Response> decodeResponses(const std::vector<uint8_t>& bytes,
                                      std::vector<StallNotice>* notices) {
  Reader rd(bytes);
  std::vector<Response> out(rd.count(kMinEncodedBytes));
  for (Response& r : out) {
    r.op = rd.pod<OpType>();
    r.name = rd.str();
    r.is_error = rd.pod<uint8_t>() != 0;
    r.error_code = rd.pod<StatusCode>();
    r.error_message = rd.str();
    r.tensors = rd.tensors();
    r.reduce_op = rd.pod<ReduceOp>();
    r.prescale = rd.pod<double>();
    r.postscale = rd.pod<double>();
    r.root = rd.pod<int32_t>();
    r.first_dims = rd.vec<int64_t>();
    r.last_joined_rank = rd.pod<int32_t>();
    r.set_ranks = rd.vec<int32_t>();
    r.set_id = rd.pod<int32_t>();
    r.device_kind = rd.pod<DeviceKind>();
    r.cross_set = rd.pod<uint8_t>() != 0;
  }
  std::vector<StallNotice> read(rd.count(kMinEncodedBytes));
  for (StallNotice& n : read) {
    n.op = rd.pod<OpType>();
    n.name = rd.str();
    n.tensors = rd.str();
    n.missing = rd.vec<int32_t>();
    n.hosts.resize(rd.count(sizeof(uint32_t)));
    for (std::string& h : n.hosts) h = rd.str();
    n.waited_s = rd.pod<double>();
    n.process_set = rd.pod<int32_t>();
  }
  if (notices != nullptr) *notices = std::move(read);
  PERSEUS_CHECK(rd.done(), "trailing bytes in a response list");
  return out;
}

}  // namespace perseus::engine
