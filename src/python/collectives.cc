// Bindings of the collectives: tensors in (DLPack capsules or buffers), a Handle out, or
// nothing for a blocking call (blocking=True). Validation beyond tensor layout is the core's job.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "handle.h"
#include "tensor_arg.h"

namespace py = pybind11;

namespace perseus_py {
namespace {

using Args = std::vector<std::unique_ptr<TensorArg>>;

TensorArg& addArg(Args& args, py::handle obj, bool writable, const char* role,
                  const std::string& name, uintptr_t stream) {
  args.push_back(std::make_unique<TensorArg>(obj, writable, role, name));
  if (args.back()->isCuda()) args.back()->setCudaStream(reinterpret_cast<void*>(stream));
  return *args.back();
}

std::vector<perseus_tensor> addArgs(Args& args, const py::list& objs, bool writable,
                                    const char* role, const std::string& name, uintptr_t stream) {
  std::vector<perseus_tensor> tensors;
  for (size_t i = 0; i < objs.size(); ++i) {
    tensors.push_back(
        addArg(args, objs[i], writable, role, name + "[" + std::to_string(i) + "]", stream)
            .tensor());
  }
  return tensors;
}

// An op's input and output; output None: in place (the output is the input).
std::pair<perseus_tensor, perseus_tensor> inputAndOutput(Args& args, py::handle input,
                                                         py::handle output, const std::string& name,
                                                         uintptr_t stream) {
  const bool in_place = output.is_none();
  const perseus_tensor in = addArg(args, input, in_place, "input", name, stream).tensor();
  return {in, in_place ? in : addArg(args, output, true, "output", name, stream).tensor()};
}

// Submits with the GIL released: the core may take its queue lock.
template <typename Fn>
py::object submit(Args args, const char* what, Fn&& fn) {
  perseus_handle handle = 0;
  perseus_status status;
  {
    py::gil_scoped_release release;
    status = fn(&handle);
  }
  check(status, what);
  return makeHandle(handle, std::move(args));
}

// A blocking call (blocking=True) returns None: there is no handle, and the tensors stay
// borrowed until the call returns. The GIL is released while it runs.
template <typename Fn>
py::object runBlocking(const char* what, Fn&& fn) {
  perseus_status status;
  {
    py::gil_scoped_release release;
    status = fn();
  }
  check(status, what);
  return py::none();
}

py::object allreduce(const std::string& name, py::handle input, py::handle output, int op,
                     double prescale, double postscale, int process_set, uintptr_t stream,
                     bool blocking) {
  Args args;
  const auto io = inputAndOutput(args, input, output, name, stream);
  if (blocking) {
    return runBlocking("perseus_allreduce_blocking", [&] {
      return perseus_allreduce_blocking(name.c_str(), &io.first, &io.second, op, prescale,
                                        postscale, process_set);
    });
  }
  return submit(std::move(args), "perseus_allreduce", [&](perseus_handle* h) {
    return perseus_allreduce(name.c_str(), &io.first, &io.second, op, prescale, postscale,
                             process_set, h);
  });
}

py::object groupedAllreduce(const std::string& name, const py::list& inputs, py::object outputs,
                            int op, double prescale, double postscale, int process_set,
                            uintptr_t stream) {
  Args args;
  const bool in_place = outputs.is_none();
  std::vector<perseus_tensor> in = addArgs(args, inputs, in_place, "input", name, stream);
  std::vector<perseus_tensor> out =
      in_place ? in : addArgs(args, outputs.cast<py::list>(), true, "output", name, stream);
  if (out.size() != in.size()) {
    invalidArgument("grouped_allreduce '" + name + "': " + std::to_string(in.size()) +
                    " inputs but " + std::to_string(out.size()) + " outputs");
  }
  const auto count = static_cast<int32_t>(in.size());
  return submit(std::move(args), "perseus_grouped_allreduce", [&](perseus_handle* h) {
    return perseus_grouped_allreduce(name.c_str(), count, in.data(), out.data(), op, prescale,
                                     postscale, process_set, h);
  });
}

py::object allgather(const std::string& name, py::handle input, int process_set, uintptr_t stream) {
  Args args;
  const perseus_tensor in = addArg(args, input, false, "input", name, stream).tensor();
  return submit(std::move(args), "perseus_allgather", [&](perseus_handle* h) {
    return perseus_allgather(name.c_str(), &in, process_set, h);
  });
}

py::object allgatherIntoTensor(const std::string& name, py::handle input, py::handle output,
                               int process_set) {
  Args args;
  const auto io = inputAndOutput(args, input, output, name, 0);
  return submit(std::move(args), "perseus_allgather_into", [&](perseus_handle* h) {
    return perseus_allgather_into(name.c_str(), &io.first, &io.second, process_set, h);
  });
}

py::object groupedAllgather(const std::string& name, const py::list& inputs, int process_set,
                            uintptr_t stream) {
  Args args;
  std::vector<perseus_tensor> in = addArgs(args, inputs, false, "input", name, stream);
  const auto count = static_cast<int32_t>(in.size());
  return submit(std::move(args), "perseus_grouped_allgather", [&](perseus_handle* h) {
    return perseus_grouped_allgather(name.c_str(), count, in.data(), process_set, h);
  });
}

py::object broadcast(const std::string& name, py::handle input, py::handle output, int root,
                     int process_set, uintptr_t stream, bool blocking) {
  Args args;
  const auto io = inputAndOutput(args, input, output, name, stream);
  if (blocking) {
    return runBlocking("perseus_broadcast_blocking", [&] {
      return perseus_broadcast_blocking(name.c_str(), &io.first, &io.second, root, process_set);
    });
  }
  return submit(std::move(args), "perseus_broadcast", [&](perseus_handle* h) {
    return perseus_broadcast(name.c_str(), &io.first, &io.second, root, process_set, h);
  });
}

py::object alltoall(const std::string& name, py::handle input,
                    std::optional<std::vector<int64_t>> splits, int process_set, uintptr_t stream) {
  Args args;
  const perseus_tensor in = addArg(args, input, false, "input", name, stream).tensor();
  const int64_t* split_data = splits ? splits->data() : nullptr;
  const auto num_splits = static_cast<int32_t>(splits ? splits->size() : 0);
  return submit(std::move(args), "perseus_alltoall", [&](perseus_handle* h) {
    return perseus_alltoall(name.c_str(), &in, split_data, num_splits, process_set, h);
  });
}

py::object reducescatter(const std::string& name, py::handle input, int op, double prescale,
                         double postscale, int process_set, uintptr_t stream) {
  Args args;
  const perseus_tensor in = addArg(args, input, false, "input", name, stream).tensor();
  return submit(std::move(args), "perseus_reducescatter", [&](perseus_handle* h) {
    return perseus_reducescatter(name.c_str(), &in, op, prescale, postscale, process_set, h);
  });
}

py::object groupedReducescatter(const std::string& name, const py::list& inputs, int op,
                                double prescale, double postscale, int process_set,
                                uintptr_t stream) {
  Args args;
  std::vector<perseus_tensor> in = addArgs(args, inputs, false, "input", name, stream);
  const auto count = static_cast<int32_t>(in.size());
  return submit(std::move(args), "perseus_grouped_reducescatter", [&](perseus_handle* h) {
    return perseus_grouped_reducescatter(name.c_str(), count, in.data(), op, prescale, postscale,
                                         process_set, h);
  });
}

}  // namespace

void registerCollectives(py::module_& m) {
  using py::arg;
  const int kGlobal = PERSEUS_PROCESS_SET_GLOBAL;
  m.def("allreduce", &allreduce, arg("name"), arg("input"), arg("output") = py::none(),
        arg("op") = static_cast<int>(PERSEUS_AVERAGE), arg("prescale") = 1.0,
        arg("postscale") = 1.0, arg("process_set") = kGlobal, arg("stream") = 0,
        arg("blocking") = false,
        "output=None reduces in place; blocking=True waits and returns None (no handle).");
  m.def("grouped_allreduce", &groupedAllreduce, arg("name"), arg("inputs"),
        arg("outputs") = py::none(), arg("op") = static_cast<int>(PERSEUS_AVERAGE),
        arg("prescale") = 1.0, arg("postscale") = 1.0, arg("process_set") = kGlobal,
        arg("stream") = 0);
  m.def("allgather", &allgather, arg("name"), arg("input"), arg("process_set") = kGlobal,
        arg("stream") = 0);
  m.def("allgather_into_tensor", &allgatherIntoTensor, arg("name"), arg("input"), arg("output"),
        arg("process_set") = kGlobal,
        "CPU: gathers every rank's input (all the same shape) into `output`, which holds the "
        "set's size times it; the handle has no output.");
  m.def("grouped_allgather", &groupedAllgather, arg("name"), arg("inputs"),
        arg("process_set") = kGlobal, arg("stream") = 0);
  m.def("broadcast", &broadcast, arg("name"), arg("input"), arg("output") = py::none(),
        arg("root_rank") = 0, arg("process_set") = kGlobal, arg("stream") = 0,
        arg("blocking") = false,
        "output=None broadcasts in place; blocking=True waits and returns None (no handle).");
  m.def("alltoall", &alltoall, arg("name"), arg("input"), arg("splits") = py::none(),
        arg("process_set") = kGlobal, arg("stream") = 0);
  m.def("reducescatter", &reducescatter, arg("name"), arg("input"),
        arg("op") = static_cast<int>(PERSEUS_AVERAGE), arg("prescale") = 1.0,
        arg("postscale") = 1.0, arg("process_set") = kGlobal, arg("stream") = 0);
  m.def("grouped_reducescatter", &groupedReducescatter, arg("name"), arg("inputs"),
        arg("op") = static_cast<int>(PERSEUS_AVERAGE), arg("prescale") = 1.0,
        arg("postscale") = 1.0, arg("process_set") = kGlobal, arg("stream") = 0);
  m.def(
      "barrier",
      [](int process_set) {
        return submit(Args(), "perseus_barrier",
                      [&](perseus_handle* h) { return perseus_barrier(process_set, h); });
      },
      arg("process_set") = kGlobal);
  m.def(
      "join",
      [](int device) {
        return submit(Args(), "perseus_join_device",
                      [&](perseus_handle* h) { return perseus_join_device(h, device); });
      },
      arg("device") = -1);
}

}  // namespace perseus_py
