#include "support/inproc_values.h"

#include <algorithm>
#include <cstring>

#include "kernels/reduce.h"

namespace perseus::testing {

double testValue(int rank, size_t i, DataType t, uint32_t seed) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               (i + seed * 7919ull) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  int v = static_cast<int>(h % 7) - 3;  // -3..3
  if (t == DataType::kBool) return (h >> 8) % 3 != 0;
  if (t == DataType::kUInt8) return std::abs(v);
  // Avoid zeros in products dominating: map 0 to 1 for every 4th element.
  if (v == 0 && (i & 3) == 0) v = 1;
  return v;
}

void putValue(Bytes& buf, size_t i, DataType t, double x) {
  unsigned char* p = buf.data() + i * dataTypeSize(t);
  switch (t) {
    case DataType::kUInt8:
      *p = static_cast<uint8_t>(static_cast<int64_t>(x));
      return;
    case DataType::kBool:
      *p = x != 0;
      return;
    case DataType::kInt8: {
      auto v = static_cast<int8_t>(static_cast<int64_t>(x));
      std::memcpy(p, &v, 1);
      return;
    }
    case DataType::kInt32: {
      auto v = static_cast<int32_t>(static_cast<int64_t>(x));
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::kInt64: {
      auto v = static_cast<int64_t>(x);
      std::memcpy(p, &v, 8);
      return;
    }
    case DataType::kFloat16: {
      auto v = kernels::floatToHalf(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::kBFloat16: {
      auto v = kernels::floatToBfloat16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::kFloat32: {
      auto v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(p, &x, 8);
      return;
  }
}

Bytes testVector(int rank, size_t count, DataType t, uint32_t seed) {
  Bytes buf(count * dataTypeSize(t));
  for (size_t i = 0; i < count; ++i) putValue(buf, i, t, testValue(rank, i, t, seed));
  return buf;
}

Bytes referenceReduce(int size, size_t count, DataType t, ReduceOp op, uint32_t seed) {
  Bytes buf(count * dataTypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    // Integers in int64 (wrapping on store), bools as truth values: exact for these inputs.
    double acc = testValue(0, i, t, seed);
    for (int r = 1; r < size; ++r) {
      double x = testValue(r, i, t, seed);
      if (t == DataType::kBool) {
        bool a = acc != 0, b = x != 0;
        acc = (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (a || b) : (a && b);
        continue;
      }
      switch (op) {
        case ReduceOp::kSum:
          acc += x;
          break;
        case ReduceOp::kProduct:
          acc *= x;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, x);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, x);
          break;
        default:
          break;
      }
      // The 8-bit types wrap at every step, as the kernels do.
      if (t == DataType::kUInt8) acc = static_cast<uint8_t>(static_cast<int64_t>(acc));
      if (t == DataType::kInt8) acc = static_cast<int8_t>(static_cast<int64_t>(acc));
    }
    putValue(buf, i, t, acc);
  }
  return buf;
}

Bytes testBytes(int rank, size_t bytes, uint32_t seed) {
  Bytes buf(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    buf[i] = static_cast<unsigned char>(
        (i * 131 + static_cast<size_t>(rank) * 17 + seed * 3 + (i >> 8)) & 0xff);
  }
  return buf;
}

long firstDifference(const Bytes& a, const Bytes& b, DataType t) {
  if (a.size() != b.size()) return 0;
  size_t es = dataTypeSize(t);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<long>(i / es);
  }
  return -1;
}

}  // namespace perseus::testing
