// shardmill.native_ext._native_testing: hooks into the reader's parts for the Python tests.
//
// Kept out of the production module (_native): they pin internals (the keyed
// hash's test vectors shared with Python, the Feistel permutation, the
// window-buffer cache's choice, the definition-level check) and have no use
// in a training loop. Built from the same sources as the extension.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "feistel.h"
#include "keyed_hash.h"
#include "large_buffer.h"
#include "plain_pages.h"

namespace py = pybind11;

PYBIND11_MODULE(_native_testing, m) {
  m.doc() = "Test hooks of shardmill's native reader (not for use in training code).";

  m.def(
      "hash_words",
      [](uint64_t seed, uint64_t stream, const std::vector<uint64_t>& words) {
        uint64_t h = shardmill::Mix64(seed ^ stream);
        for (uint64_t w : words) h = shardmill::Mix64(h ^ w);
        return h;
      },
      py::arg("seed"), py::arg("stream"), py::arg("words"),
      "The keyed SplitMix64 chain of shardmill.transforms.common.keyed_hash.hash_words, in C++.");

  m.def(
      "buffer_cache_pick",
      [](const std::vector<int64_t>& given_back, int64_t take) {
        py::gil_scoped_release release;
        shardmill::LargeBuffer::ReleaseCached();
        std::vector<const uint8_t*> addresses;
        {
          std::vector<shardmill::LargeBuffer> buffers;
          for (int64_t bytes : given_back) {
            buffers.push_back(shardmill::LargeBuffer::Take(bytes));
            addresses.push_back(buffers.back().data());
          }
          for (auto& buffer : buffers) buffer = shardmill::LargeBuffer();  // given back in this order
        }
        const shardmill::LargeBuffer taken = shardmill::LargeBuffer::Take(take);
        auto found = std::find(addresses.begin(), addresses.end(), taken.data());
        return found == addresses.end() ? int64_t{-1} : static_cast<int64_t>(found - addresses.begin());
      },
      py::arg("given_back"), py::arg("take"),
      "Empties the buffer cache, gives back buffers of the sizes `given_back` in that order, then takes\n"
      "one of `take` bytes: which of them it got (-1: a new mapping). Pins the cache's choice.");
  m.def(
      "all_levels_defined",
      [](py::bytes levels, int64_t values) {
        const std::string_view view(levels);
        return shardmill::AllLevelsDefined(reinterpret_cast<const uint8_t*>(view.data()),
                                           static_cast<int64_t>(view.size()), values);
      },
      py::arg("levels"), py::arg("values"),
      "Whether RLE/bit-packed hybrid definition levels of bit width 1 define the first `values` values\n"
      "(the check that lets the reader take a page's values as they lie).");
  m.def(
      "feistel_permutation",
      [](uint64_t n, uint64_t key, int64_t first, int64_t count, bool one_at_a_time, bool inverse) {
        if (count < 0) count = static_cast<int64_t>(n) - first;
        if (first < 0 || count < 0 || static_cast<uint64_t>(first + count) > n) {
          throw py::value_error("positions out of range");
        }
        py::array_t<uint64_t> out(static_cast<py::ssize_t>(count));
        uint64_t* data = out.mutable_data();
        {
          py::gil_scoped_release release;
          shardmill::FeistelPermutation permutation(n, key);
          if (inverse) {
            permutation.InverseRange(static_cast<uint64_t>(first), count, data);
          } else if (one_at_a_time) {
            for (int64_t i = 0; i < count; ++i) data[i] = permutation.Apply(static_cast<uint64_t>(first + i));
          } else {
            permutation.ApplyRange(static_cast<uint64_t>(first), count, data);
          }
        }
        return out;
      },
      py::arg("n"), py::arg("key"), py::arg("first") = 0, py::arg("count") = -1, py::arg("one_at_a_time") = false,
      py::arg("inverse") = false,
      "The images of first..first+count-1 (default: all of 0..n-1) under the reader's Feistel permutation;\n"
      "one_at_a_time uses the scalar Apply (the reference the blocked ApplyRange must match), inverse\n"
      "gives preimages instead.");

}
