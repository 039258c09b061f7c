// Both binding modules raise one Python class for a shardmill::NativeError: shardmill.core.errors.NativeError,
// the class job and reader code catch (a ShardmillError and a RuntimeError), whichever module raised it.
#pragma once

#include <exception>

#include <pybind11/pybind11.h>

#include "status.h"

namespace shardmill::bind {

// Imports the class, registers this module's translator to it and sets it as the module's `NativeError`
// attribute (so `from shardmill.native_ext._native import NativeError` names the same class).
inline void TranslateNativeErrors(pybind11::module_& m) {
  // Kept for the life of the process: the translator runs long after module init returns.
  static pybind11::handle native_error =
      pybind11::object(pybind11::module_::import("shardmill.core.errors").attr("NativeError")).release();
  pybind11::register_local_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const shardmill::NativeError& e) {
      PyErr_SetString(native_error.ptr(), e.what());
    }
  });
  m.attr("NativeError") = native_error;
}

}  // namespace shardmill::bind
