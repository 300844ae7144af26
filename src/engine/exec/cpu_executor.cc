// Note [CPU execution]
// One fusion group runs as: copy-in (prescale fused into the copy), one collective over the
// fusion buffer, copy-out (postscale fused into the copy). A group of one tensor skips the
// buffer and runs on the caller's buffers. Average is Sum with a postscale of 1/size.

// Tensors of an allreduce group run in cache-sized pieces (Note [Cache-sized pieces],
// fusion/cpu_pieces.h).
#include <algorithm>
#include <cstring>
#include <memory>

#include "collectives/collectives.h"
#include "engine/exec/executor.h"
#include "engine/timeline.h"
#include "fusion/cpu_pieces.h"
#include "kernels/reduce.h"

namespace perseus::engine {

uint8_t* FusionBuffer::reserve(size_t bytes) {
  if (bytes > capacity_) {
    data_.reset(new uint8_t[bytes]);
    capacity_ = bytes;
  }
  return data_.get();
}

namespace {

using Clock = std::chrono::steady_clock;

// Records one phase for every tensor of the group (no clock reads when the timeline is off).
class PhaseTimer {
 public:
  PhaseTimer(Timeline* tl, const FusionGroup& g, const std::vector<Response>& rs)
      : tl_(tl), group_(g), responses_(rs) {}
  void begin() {
    if (tl_) start_ = Clock::now();
  }
  void end(const char* phase) {
    if (!tl_) return;
    auto now = Clock::now();
    for (const FusionItem& it : group_.items)
      tl_->span(responses_[it.response].name, phase, start_, now);
  }

 private:
  Timeline* tl_;
  const FusionGroup& group_;
  const std::vector<Response>& responses_;
  Clock::time_point start_;
};

// Copies `count` elements, multiplying by `factor` unless it is 1.
void copyScaled(void* dst, const void* src, size_t count, DataType t, double factor) {
  if (factor != 1.0) {
    kernels::scaleCopy(dst, src, count, t, factor);
  } else if (dst != src) {
    std::memcpy(dst, src, count * dataTypeSize(t));
  }
}

OwnedTensor& ownedOutput(Entry* e, size_t t, size_t count) {
  auto& outs = e->handle->outputs();
  if (outs.size() < count) outs.resize(count);
  return outs[t];
}

// Note [Allgather into]: an allgather into the caller's buffer (torch's all_gather_into_tensor)
// writes the gathered rows where the caller reads them, with no library output to copy from;
// so does a reduce-scatter into the caller's block (reduce_scatter_tensor).
// The submission checked that the buffer holds the set's size times this rank's input, so every
// rank must give the same rows: one that gave other rows fails this entry, which still takes
// part (into a scratch buffer), so that no rank waits for it.
template <typename Item>
uint8_t* intoCallerBuffer(Entry* e, size_t t, const Item& item, int64_t total, int n, int me,
                          const std::string& name,
                          std::vector<std::unique_ptr<uint8_t[]>>& scratch) {
  if (total == static_cast<int64_t>(n) * item.rows[me]) return static_cast<uint8_t*>(e->outputs[t]);
  e->error = StatusCode::kInvalidArgument;
  e->error_message =
      PERSEUS_STR("all_gather_into_tensor '"
                  << name << "': the ranks gave " << total << " rows in all where " << n
                  << " ranks of " << item.rows[me]
                  << " each fill the output; give every rank an input of the same shape");
  scratch.emplace_back(new uint8_t[std::max<size_t>(1, total * item.row_bytes)]);
  return scratch.back().get();
}

// Block r of a first dimension of `rows` split over `size` ranks (first rows % size get +1).

class CpuExecutor final : public Executor {
 public:
  void run(const FusionGroup& group, const std::vector<Response>& responses,
           const std::vector<Entry*>& entries, collectives::Communicator& comm,
           FusionBuffer& buffer, Timeline* timeline) override {
    PhaseTimer timer(timeline, group, responses);
    switch (group.op) {
      case OpType::kAllreduce:
        return allreduce(group, responses, entries, comm, buffer, timer);
      case OpType::kAllgather:
        return allgather(group, responses, entries, comm, buffer, timer);
      case OpType::kBroadcast:
        return broadcast(group, responses, entries, comm, buffer, timer);
      case OpType::kAlltoall:
        return alltoall(group, responses, entries, comm, timer);
      case OpType::kReducescatter:
        return reducescatter(group, responses, entries, comm, buffer, timer);
      default:
        PERSEUS_CHECK(false, "CPU executor got " << opTypeName(group.op));
    }
  }

 private:
  static void allreduce(const FusionGroup& g, const std::vector<Response>& rs,
                        const std::vector<Entry*>& es, collectives::Communicator& comm,
                        FusionBuffer& buffer, PhaseTimer& timer) {
    const Response& r0 = rs[g.items[0].response];
    const Reduction red = reductionOf(r0, comm.size());
    const DataType dt = r0.tensors[g.items[0].tensor].dtype;
    auto bytes_of = [&](size_t i) {
      return rs[g.items[i].response].tensors[g.items[i].tensor].bytes();
    };
    const size_t n = g.items.size();
    for (size_t i = 0; i < n;) {
      const fusion::CpuPiece p = fusion::nextCpuPiece(bytes_of, n, i, g.fused());
      i = p.end;
      if (p.alone) {
        allreduceAlone(g.items[p.begin], rs, es, comm, buffer, timer, red, dt);
      } else {
        allreducePiece(g.items.data() + p.begin, p.end - p.begin, p.bytes, rs, es, comm, buffer,
                       timer, red, dt);
      }
    }
  }

  // One tensor on its own buffers (a joined rank reduces zeros into scratch): one collective
  // call, or pieces when it has a prescale.
  static void allreduceAlone(const FusionItem& it, const std::vector<Response>& rs,
                             const std::vector<Entry*>& es, collectives::Communicator& comm,
                             FusionBuffer& buffer, PhaseTimer& timer, const Reduction& red,
                             DataType dt) {
    const TensorMeta& m = rs[it.response].tensors[it.tensor];
    Entry* e = es[it.response];
    const size_t esize = dataTypeSize(dt), count = static_cast<size_t>(m.numElements());
    const uint8_t* in;
    uint8_t* out;
    if (e == nullptr) {  // joined: contribute zeros, discard the result
      out = buffer.reserve(m.bytes());
      std::memset(out, 0, m.bytes());
      in = out;
    } else {
      in = static_cast<const uint8_t*>(e->inputs[it.tensor]);
      out = static_cast<uint8_t*>(e->outputs[it.tensor]);
    }
    // Only a prescale needs pieces (its copy must still be in cache when the collective reads
    // it); the postscale is applied inside the collective (Note [Scaled shm allreduce]). A
    // piece buys nothing else: the collective already works in L2-sized segments, and only a
    // call that sees the whole tensor knows to stream its output past the caches (Note
    // [Shared-memory allreduce]). In 2 MiB pieces an out-of-place 256 MiB Sum read every
    // output line before writing it: 5.7 GB/s against 9.2 in place.
    // Adasum combines whole tensors (Note [Adasum]): one call.
    const bool pieces = red.prescale != 1.0 && red.op != ReduceOp::kAdasum;
    const size_t step = pieces ? std::max<size_t>(1, fusion::kCpuPieceBytes / esize) : count;
    timer.begin();
    for (size_t k = 0; k < count; k += step) {
      const size_t n = std::min(step, count - k);
      const uint8_t* src = in + k * esize;
      uint8_t* dst = out + k * esize;
      if (red.prescale != 1.0) {
        copyScaled(dst, src, n, dt, red.prescale);
        src = dst;
      }
      // A joined rank passes the postscale too, though it discards the result: the
      // shared-memory allreduce scales each element on the rank that reduces it, and this rank
      // reduces a share of them (Note [Scaled shm allreduce]).
      collectives::allreduce(comm, src, dst, n, dt, red.op, red.postscale);
    }
    timer.end("COMMUNICATE");
  }

  // `n` small tensors through the fusion buffer: copy-in, one collective, copy-out.
  static void allreducePiece(const FusionItem* items, size_t n, size_t bytes,
                             const std::vector<Response>& rs, const std::vector<Entry*>& es,
                             collectives::Communicator& comm, FusionBuffer& buffer,
                             PhaseTimer& timer, const Reduction& red, DataType dt) {
    uint8_t* buf = buffer.reserve(bytes);
    timer.begin();
    size_t off = 0;
    for (size_t k = 0; k < n; ++k) {
      const TensorMeta& m = rs[items[k].response].tensors[items[k].tensor];
      if (Entry* e = es[items[k].response]) {
        copyScaled(buf + off, e->inputs[items[k].tensor], m.numElements(), dt, red.prescale);
      } else {
        std::memset(buf + off, 0, m.bytes());
      }
      off += m.bytes();
    }
    timer.end("MEMCPY_IN_FUSION");
    timer.begin();
    collectives::allreduce(comm, buf, buf, off / dataTypeSize(dt), dt, red.op);
    timer.end("COMMUNICATE");
    timer.begin();
    off = 0;
    for (size_t k = 0; k < n; ++k) {
      const TensorMeta& m = rs[items[k].response].tensors[items[k].tensor];
      if (Entry* e = es[items[k].response]) {
        copyScaled(e->outputs[items[k].tensor], buf + off, m.numElements(), dt, red.postscale);
      }
      off += m.bytes();
    }
    timer.end("MEMCPY_OUT");
  }

  static void allgather(const FusionGroup& g, const std::vector<Response>& rs,
                        const std::vector<Entry*>& es, collectives::Communicator& comm,
                        FusionBuffer& buffer, PhaseTimer& timer) {
    const int n = comm.size();
    const int me = comm.rank();
    // Per item: row bytes, rows of each rank, and the output allocated in the handle.
    struct Item {
      size_t row_bytes;
      const int64_t* rows;
      const void* in;
      uint8_t* out;
    };
    std::vector<Item> items;
    std::vector<size_t> bytes(n, 0);
    // A joined rank (no entry; Note [Join]) sends no rows and drops what it receives.
    std::vector<std::unique_ptr<uint8_t[]>> discard;
    for (const FusionItem& it : g.items) {
      const Response& r = rs[it.response];
      const TensorMeta& m = r.tensors[it.tensor];
      Entry* e = es[it.response];
      Item item{static_cast<size_t>(m.rowElements()) * dataTypeSize(m.dtype),
                &r.first_dims[it.tensor * n], e ? e->inputs[it.tensor] : nullptr, nullptr};
      int64_t total = 0;
      for (int k = 0; k < n; ++k) {
        total += item.rows[k];
        bytes[k] += item.rows[k] * item.row_bytes;
      }
      if (e == nullptr) {
        PERSEUS_CHECK(item.rows[me] == 0, "allgather '" << r.name << "': a joined rank has rows");
        discard.emplace_back(new uint8_t[std::max<size_t>(1, total * item.row_bytes)]);
        item.out = discard.back().get();
        item.in = item.out;  // zero bytes are read from it; never a null pointer to memcpy
        items.push_back(item);
        continue;
      }
      if (!e->outputs.empty() && e->outputs[it.tensor] != nullptr) {
        item.out = intoCallerBuffer(e, it.tensor, item, total, n, me, r.name, discard);
        items.push_back(item);
        continue;
      }
      std::vector<int64_t> shape = m.shape;
      shape[0] = total;
      OwnedTensor& out = ownedOutput(e, it.tensor, r.tensors.size());
      out.allocate(m.dtype, shape);
      item.out = out.data.get();
      items.push_back(item);
    }
    if (!g.fused()) {
      timer.begin();
      collectives::allgatherv(comm, items[0].in, items[0].out, bytes);
      timer.end("COMMUNICATE");
      return;
    }
    uint8_t* buf = buffer.reserve(g.bytes + bytes[me]);
    uint8_t* gathered = buf + bytes[me];
    timer.begin();
    size_t off = 0;
    for (const Item& item : items) {
      size_t b = item.rows[me] * item.row_bytes;
      std::memcpy(buf + off, item.in, b);
      off += b;
    }
    timer.end("MEMCPY_IN_FUSION");
    timer.begin();
    collectives::allgatherv(comm, buf, gathered, bytes);
    timer.end("COMMUNICATE");
    timer.begin();
    off = 0;
    std::vector<size_t> out_off(items.size(), 0);
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < items.size(); ++i) {
        size_t b = items[i].rows[k] * items[i].row_bytes;
        std::memcpy(items[i].out + out_off[i], gathered + off, b);
        out_off[i] += b;
        off += b;
      }
    }
    timer.end("MEMCPY_OUT");
  }

  static void broadcast(const FusionGroup& g, const std::vector<Response>& rs,
                        const std::vector<Entry*>& es, collectives::Communicator& comm,
                        FusionBuffer& buffer, PhaseTimer& timer) {
    const int root = rs[g.items[0].response].root;
    const bool is_root = comm.rank() == root;
    for (const FusionItem& it : g.items) {
      // Only a joined rank has no entry, and negotiation refuses a joined root (Note [Join]).
      PERSEUS_CHECK(es[it.response] != nullptr || !is_root,
                    "broadcast '" << rs[it.response].name << "' without a local entry on its root");
    }
    if (!g.fused()) {
      const FusionItem& it = g.items[0];
      Entry* e = es[it.response];
      size_t b = rs[it.response].tensors[it.tensor].bytes();
      std::unique_ptr<uint8_t[]> discard;  // a joined rank receives and drops
      if (e == nullptr) discard.reset(new uint8_t[std::max<size_t>(1, b)]);
      void* out = e ? e->outputs[it.tensor] : discard.get();
      if (is_root && out != e->inputs[it.tensor]) std::memcpy(out, e->inputs[it.tensor], b);
      timer.begin();
      collectives::broadcast(comm, out, b, root);
      timer.end("COMMUNICATE");
      return;
    }
    uint8_t* buf = buffer.reserve(g.bytes);
    size_t off = 0;
    if (is_root) {
      timer.begin();
      for (const FusionItem& it : g.items) {
        Entry* e = es[it.response];
        size_t b = rs[it.response].tensors[it.tensor].bytes();
        std::memcpy(buf + off, e->inputs[it.tensor], b);
        if (e->outputs[it.tensor] != e->inputs[it.tensor]) {
          std::memcpy(e->outputs[it.tensor], e->inputs[it.tensor], b);
        }
        off += b;
      }
      timer.end("MEMCPY_IN_FUSION");
    }
    timer.begin();
    collectives::broadcast(comm, buf, g.bytes, root);
    timer.end("COMMUNICATE");
    if (is_root) return;
    timer.begin();
    for (const FusionItem& it : g.items) {
      size_t b = rs[it.response].tensors[it.tensor].bytes();
      if (Entry* e = es[it.response]) std::memcpy(e->outputs[it.tensor], buf + off, b);
      off += b;
    }
    timer.end("MEMCPY_OUT");
  }

  static void alltoall(const FusionGroup& g, const std::vector<Response>& rs,
                       const std::vector<Entry*>& es, collectives::Communicator& comm,
                       PhaseTimer& timer) {
    const FusionItem& it = g.items[0];
    const Response& r = rs[it.response];
    Entry* e = es[it.response];
    PERSEUS_CHECK(e != nullptr, "alltoall '" << r.name << "' without a local entry");
    const TensorMeta& m = e->request.tensors[it.tensor];
    timer.begin();
    AlltoallPlan plan = planAlltoall(comm, *e, it.tensor);
    OwnedTensor& out = ownedOutput(e, it.tensor, r.tensors.size());
    out.allocate(m.dtype, plan.out_shape);
    collectives::alltoallv(comm, e->inputs[it.tensor], plan.send_bytes, out.data.get(),
                           plan.recv_bytes);
    timer.end("COMMUNICATE");
    e->handle->receivedSplits() = std::move(plan.recv_rows);
  }

  static void reducescatter(const FusionGroup& g, const std::vector<Response>& rs,
                            const std::vector<Entry*>& es, collectives::Communicator& comm,
                            FusionBuffer& buffer, PhaseTimer& timer) {
    const int n = comm.size();
    const int me = comm.rank();
    const Response& r0 = rs[g.items[0].response];
    const DataType dt = r0.tensors[g.items[0].tensor].dtype;
    const size_t esize = dataTypeSize(dt);
    const Reduction red = reductionOf(r0, n);
    struct Item {
      const void* in;
      uint8_t* out;
      int64_t rows, row_elems;
    };
    std::vector<Item> items;
    std::vector<size_t> counts(n, 0);
    for (const FusionItem& it : g.items) {
      const Response& r = rs[it.response];
      const TensorMeta& m = r.tensors[it.tensor];
      Entry* e = es[it.response];
      PERSEUS_CHECK(e != nullptr, "reducescatter '" << r.name << "' without a local entry");
      Item item{e->inputs[it.tensor], nullptr, m.shape[0], m.rowElements()};
      for (int k = 0; k < n; ++k) counts[k] += blockRows(item.rows, n, k) * item.row_elems;
      if (!e->outputs.empty() && e->outputs[it.tensor] != nullptr) {
        // The submission checked that the buffer holds this rank's block (Note [Allgather
        // into]); a reduction's ranks agree on the shape.
        item.out = static_cast<uint8_t*>(e->outputs[it.tensor]);
        items.push_back(item);
        continue;
      }
      std::vector<int64_t> shape = m.shape;
      shape[0] = blockRows(item.rows, n, me);
      OwnedTensor& out = ownedOutput(e, it.tensor, r.tensors.size());
      out.allocate(dt, shape);
      item.out = out.data.get();
      items.push_back(item);
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    const void* src = items[0].in;
    uint8_t* buf = nullptr;
    if (g.fused() || red.prescale != 1.0) {
      buf = buffer.reserve((total + counts[me]) * esize);
      timer.begin();
      // Rank-major layout: rank k's blocks of every tensor are adjacent.
      size_t off = 0;
      for (int k = 0; k < n; ++k) {
        for (const Item& item : items) {
          int64_t first = 0;
          for (int j = 0; j < k; ++j) first += blockRows(item.rows, n, j);
          size_t count = blockRows(item.rows, n, k) * item.row_elems;
          copyScaled(buf + off * esize,
                     static_cast<const uint8_t*>(item.in) + first * item.row_elems * esize, count,
                     dt, red.prescale);
          off += count;
        }
      }
      timer.end("MEMCPY_IN_FUSION");
      src = buf;
    }
    uint8_t* mine = g.fused() ? buf + total * esize : items[0].out;
    timer.begin();
    // Unfused, the collective applies the postscale (Note [Scaled shm reduce-scatter]).
    collectives::reducescatterv(comm, src, mine, counts, dt, red.op,
                                g.fused() ? 1.0 : red.postscale);
    timer.end("COMMUNICATE");
    if (!g.fused()) return;
    timer.begin();
    size_t off = 0;
    for (const Item& item : items) {
      size_t count = blockRows(item.rows, n, me) * item.row_elems;
      copyScaled(item.out, mine + off * esize, count, dt, red.postscale);
      off += count;
    }
    timer.end("MEMCPY_OUT");
  }
};

}  // namespace

std::unique_ptr<Executor> makeCpuExecutor() { return std::make_unique<CpuExecutor>(); }

}  // namespace perseus::engine
