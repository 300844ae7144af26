// A collective call as its caller makes it, before the engine allocates anything for it.
//
// Contract: plain values, any thread. A Call and its views only borrow the caller's memory (the
// tensors, their shapes, the name) for the duration of the Engine entry that takes it: the post
// path (Note [Posted collectives]) reads them in place and keeps only the tensors' data
// pointers; a call that goes to negotiation is copied into an Entry (engine/entry.h) then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "negotiation/request.h"

namespace perseus::engine {

// A read-only run of `size()` values that the caller owns (std::span's shape, for C++17).
template <typename T>
class Span {
 public:
  Span() = default;
  Span(const T* data, size_t size) : data_(data), size_(size) {}
  // A braced list in a call lives until the end of the full expression, i.e. the entry's
  // return: a Span made from one is for passing arguments, never for keeping.
  Span(std::initializer_list<T> list) : Span(list.begin(), list.size()) {}
  Span(const std::vector<T>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT: implicit

  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

// One dense, row-major tensor, read in place.
struct TensorView {
  const void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  const int64_t* shape = nullptr;
  size_t ndim = 0;
  int device = -1;              // PERSEUS_DEVICE_CPU (-1) or a CUDA ordinal
  void* cuda_stream = nullptr;  // CUDA: the cudaStream_t that produced data (null: default)
};

// A tensor argument that owns its shape, for C++ callers that build one in an expression
// (tests): it converts to the view of itself.
struct TensorArg {
  const void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  int device = -1;
  void* cuda_stream = nullptr;

  operator TensorView() const {  // NOLINT: implicit, so that {arg(...)} binds to Span<TensorView>
    return TensorView{data, dtype, shape.data(), shape.size(), device, cuda_stream};
  }
};

// A blocking call that the post path published and its caller finishes itself
// (Engine::openPost(), finishOpened()): the caller makes the output meanwhile, while the other
// ranks' posts are on their way. Filled by the post path; the name and input are the caller's,
// borrowed until the finish.
struct OpenedPost {
  OpType op = OpType::kAllreduce;
  std::string_view name;
  size_t slot = 0;
  uint64_t gen = 0;
  const void* input = nullptr;
};

// One collective call (the Engine entries build it; Engine::submit takes it).
struct Call {
  OpType op = OpType::kAllreduce;
  std::string_view name;
  int32_t set = 0;  // the process set's id
  Span<TensorView> inputs;
  // Allreduce, broadcast, allgather into a buffer: the caller's output per input. Empty for the
  // others, whose outputs the library allocates in the handle.
  Span<void*> outputs;
  ReduceOp reduce_op = ReduceOp::kSum;  // allreduce, reducescatter
  double prescale = 1.0, postscale = 1.0;
  int32_t root = 0;         // broadcast: the root's set rank
  Span<int64_t> splits;     // alltoall; empty: an even split
  Span<int32_t> set_ranks;  // add_process_set: the new set's sorted global ranks
  int32_t set_id = 0;       // remove_process_set
  // The entry returns once the collective completed, throwing its error; it returns no handle
  // (null) when the post path finished it without one (Note [Posted collectives]).
  bool blocking = false;
  // An opened allgather's result shape, filled by the post path (OpenedPost below).
  std::vector<int64_t>* gather_shape = nullptr;
  // A blocking allreduce or allgather whose caller finishes it (OpenedPost): the post path
  // fills it (an allgather's output shape into *gather_shape) instead of watching the post.
  OpenedPost* opened = nullptr;
};

}  // namespace perseus::engine
