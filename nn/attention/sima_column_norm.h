// SimA's normalisation option as the column-norm kernels name it (internal header: sima.cpp,
// sima_packed.cpp and sima_int8.cpp include it).
#pragma once
#include "nn/attention/column_norm.h"
#include "nn/attention/sima.h"

namespace sima {

inline ColumnNorm column_norm(SimaNorm n) {
  return n == SimaNorm::L1 ? ColumnNorm::L1 : n == SimaNorm::L2 ? ColumnNorm::L2 : ColumnNorm::None;
}

}  // namespace sima
