#include "engine/entry.h"

#include <utility>

namespace perseus::engine {

void Entry::recycle() {
  Entry blank;
  blank.request.name.swap(request.name);
  blank.request.name.clear();
  blank.request.tensors.swap(request.tensors);
  blank.inputs.swap(inputs);
  blank.inputs.clear();
  blank.outputs.swap(outputs);
  blank.outputs.clear();
  blank.splits.swap(splits);
  blank.splits.clear();
  *this = std::move(blank);
}

}  // namespace perseus::engine
