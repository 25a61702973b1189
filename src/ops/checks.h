// Argument checks every backend makes the same way, so a bad call gets the same message on any device.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "ops/backend.h"

namespace plumb {

// Checks a tensor's shape, naming the op and the argument.
inline void expect_shape(const Tensor& t, const Shape& shape, const char* op, const char* arg) {
  PLUMB_CHECK(t.shape() == shape, "{}: {} has shape {}, expected {}", op, arg, shape_str(t.shape()), shape_str(shape));
}

// Checks that a batch covers rows [0, rows) of its token-major tensors sequence after sequence, each sequence at
// least one row, with one state per sequence. (Two sequences claiming one row would also race on the GPU.)
inline void expect_batch(const BatchRows& batch, int64_t rows, size_t states, const char* op) {
  PLUMB_CHECK(batch.size() == states, "{}: {} sequences but {} states", op, batch.size(), states);
  int64_t next = 0;
  for (const SequenceRows& s : batch) {
    PLUMB_CHECK(s.begin == next && s.count > 0 && s.past >= 0,
                "{}: sequence rows [{}, +{}) (past {}) do not continue the batch at row {}", op, s.begin, s.count,
                s.past, next);
    next += s.count;
  }
  PLUMB_CHECK(next == rows, "{}: the batch covers {} rows of {}", op, next, rows);
}

}  // namespace plumb
