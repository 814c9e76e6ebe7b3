// No fused multiply-adds in the functions that follow: for .cpp files that must match PyTorch or
// Pillow bit for bit.
//
// PyTorch's CPU kernels and Pillow's C code round a product and the sum it feeds separately
// (two roundings). With -march=native the compiler may contract a·b + c into one fused
// multiply-add, which rounds once: the result then differs from theirs by one unit in the last
// place now and then. These pragmas turn the contraction off.
//
// Include it from .cpp files only, after all their other includes: `#pragma GCC optimize` (and
// clang's file-scope `#pragma clang fp contract`) applies to every function defined after it in
// the translation unit, so included before another header it would change that header's inline
// functions too. Each including file says in a comment which roundings it must reproduce.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
