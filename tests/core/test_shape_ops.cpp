// Shape ops: hand-computed forward values, views that really share storage (and copies
// that really do not), gradchecks with size-1 and negative dims, and the errors.
#include "testing.h"

using namespace sima;
using namespace sima::testing;

namespace {
// arange(24) as (2, 3, 4): x[i, j, k] = 12i + 4j + k.
Tensor arange234() { return reshape(arange(24.f), {2, 3, 4}); }

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.impl()->storage == b.impl()->storage;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
void gradcheck1(const Tensor& x, const Fn& fn) { CHECK_GRADCHECK(fn, std::vector<Tensor>{x}); }
}  // namespace

// ---- reshape / view / flatten / unsqueeze / squeeze -------------------------------------

TEST_CASE("reshape: shapes, -1 inference, shared storage") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = reshape(x, {3, 2});
  CHECK(y.shape() == Shape{3, 2});
  CHECK(y.at({2, 0}) == 5.f);
  CHECK(reshape(x, {-1}).shape() == Shape{6});
  CHECK(reshape(x, {3, -1}).shape() == Shape{3, 2});
  CHECK(reshape(x, {-1, 1, 2}).shape() == Shape{3, 1, 2});
  CHECK(view(x, {1, 6}).shape() == Shape{1, 6});
  CHECK(reshape(scalar_tensor(2.f), {1, 1}).shape() == Shape{1, 1});
  CHECK(reshape(zeros({0, 3}), {3, 0}).shape() == Shape{3, 0});
  // A view: writing through one handle is seen through the other.
  CHECK(shares_storage(x, y));
  y.at({0, 1}) = 42.f;
  CHECK(x.at({0, 1}) == 42.f);
  x.at({1, 2}) = -1.f;
  CHECK(y.at({2, 1}) == -1.f);
}

TEST_CASE("flatten / unsqueeze / squeeze: shapes and shared storage") {
  Tensor x = arange234();
  CHECK(flatten(x).shape() == Shape{24});
  CHECK(flatten(x, 1).shape() == Shape{2, 12});
  CHECK(flatten(x, 0, 1).shape() == Shape{6, 4});
  CHECK(flatten(x, -2, -1).shape() == Shape{2, 12});
  CHECK(flatten(x, 1, 1).shape() == Shape{2, 3, 4});
  CHECK(flatten(scalar_tensor(1.f)).shape() == Shape{1});
  Tensor f = flatten(x, 1);
  CHECK(f.at({1, 5}) == 17.f);
  CHECK(shares_storage(f, x));

  Tensor a = zeros({2, 3});
  CHECK(unsqueeze(a, 0).shape() == Shape{1, 2, 3});
  CHECK(unsqueeze(a, 1).shape() == Shape{2, 1, 3});
  CHECK(unsqueeze(a, 2).shape() == Shape{2, 3, 1});
  CHECK(unsqueeze(a, -1).shape() == Shape{2, 3, 1});
  CHECK(unsqueeze(a, -3).shape() == Shape{1, 2, 3});
  CHECK(unsqueeze(scalar_tensor(1.f), 0).shape() == Shape{1});
  Tensor u = unsqueeze(a, 1);
  u.at({1, 0, 2}) = 9.f;
  CHECK(a.at({1, 2}) == 9.f);

  Tensor b = zeros({2, 1, 3, 1});
  CHECK(squeeze(b, 1).shape() == Shape{2, 3, 1});
  CHECK(squeeze(b, -1).shape() == Shape{2, 1, 3});
  CHECK(squeeze(b, -3).shape() == Shape{2, 3, 1});
  CHECK(squeeze(zeros({1}), 0).shape() == Shape{});
  Tensor s = squeeze(b, 1);
  s.at({0, 2, 0}) = 4.f;
  CHECK(b.at({0, 0, 2, 0}) == 4.f);
}

TEST_CASE("views: gradcheck and gradient shape") {
  Tensor x = uniform_leaf({2, 1, 3}, -1.f, 1.f, 1);
  gradcheck1(x, [](const std::vector<Tensor>& v) { return reshape(v[0], {3, -1}); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return flatten(v[0]); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return flatten(v[0], -2); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return unsqueeze(v[0], -1); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return squeeze(v[0], -2); });
  // A chain of views ending in a non-linear op: the gradient lands with x's shape.
  x.zero_grad();
  Tensor y = mul(reshape(x, {6}), reshape(x, {6}));
  y.backward(ones({6}));
  REQUIRE(x.grad().shape() == Shape{2, 1, 3});
  for (int i = 0; i < 6; ++i) CHECK(x.grad().data()[i] == doctest::Approx(2 * x.data()[i]));
}

TEST_CASE("reshape / flatten / unsqueeze / squeeze errors") {
  Tensor x = zeros({3, 5});
  CHECK_THROWS_WITH_AS(reshape(x, {4, 4}),
                       "reshape: shape (4, 4) is invalid for input of shape (3, 5) (15 elements)", Error);
  CHECK_THROWS_WITH_AS(reshape(x, {2, -1}),
                       "reshape: shape (2, -1) is invalid for input of shape (3, 5) (15 elements)", Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-1, -1}), doctest::Contains("only one dimension can be -1"), Error);
  CHECK_THROWS_WITH_AS(reshape(x, {-2, 3}), doctest::Contains("invalid size -2"), Error);
  CHECK_THROWS_AS(reshape(zeros({0, 3}), {0, -1}), Error);
  CHECK_THROWS_WITH_AS(flatten(x, 1, 0), doctest::Contains("flatten: start_dim 1 comes after end_dim 0"),
                       Error);
  CHECK_THROWS_WITH_AS(unsqueeze(x, 3), "unsqueeze: dim 3 out of range for a 3-d tensor", Error);
  CHECK_THROWS_WITH_AS(squeeze(x, 0), "squeeze: dim 0 has size 3, not 1, in shape (3, 5)", Error);
  CHECK_THROWS_AS(squeeze(x, 2), Error);
}

// ---- permute / transpose / contiguous ---------------------------------------------------

TEST_CASE("permute / transpose: values, and they copy") {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = transpose(a, 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  check_close(t, {1, 4, 2, 5, 3, 6});
  check_close(transpose(a, -1, -2), {1, 4, 2, 5, 3, 6});
  check_close(transpose(a, 1, 1), {1, 2, 3, 4, 5, 6});
  CHECK_FALSE(shares_storage(t, a));
  t.at({0, 0}) = 100.f;
  CHECK(a.at({0, 0}) == 1.f);

  Tensor x = arange234();
  Tensor p = permute(x, {2, 0, 1});  // p[k, i, j] = x[i, j, k] = 12i + 4j + k
  CHECK(p.shape() == Shape{4, 2, 3});
  check_close(p, {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
  Tensor q = permute(x, {-2, -3, -1});  // q[j, i, k]
  CHECK(q.shape() == Shape{3, 2, 4});
  check_close(q, {0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23});
  Tensor r = transpose(x, 0, 2);  // r[k, j, i]
  CHECK(r.shape() == Shape{4, 3, 2});
  CHECK(r.at({3, 1, 0}) == 7.f);
  CHECK(r.at({1, 2, 1}) == 21.f);
}

TEST_CASE("permute: a large shape against index arithmetic") {
  Tensor x = uniform_leaf({13, 70, 33}, -1.f, 1.f, 2, false);
  Tensor y = permute(x, {2, 0, 1});  // y[c, a, b] = x[a, b, c]
  bool ok = true;
  for (int64_t a = 0; a < 13; ++a)
    for (int64_t b = 0; b < 70; ++b)
      for (int64_t c = 0; c < 33; ++c)
        ok = ok && y.data()[(c * 13 + a) * 70 + b] == x.data()[(a * 70 + b) * 33 + c];
  CHECK(ok);
  Tensor z = permute(y, {1, 2, 0});  // back to x
  CHECK(max_abs_diff(z, x) == 0.f);
}

TEST_CASE("permute / transpose / contiguous: gradcheck") {
  Tensor x = uniform_leaf({2, 1, 3, 2}, -1.f, 1.f, 3);
  for (std::vector<int> perm : {std::vector<int>{3, 1, 0, 2}, {0, 2, 1, 3}, {-1, -2, -3, -4}}) {
    CAPTURE(perm[0]);
    gradcheck1(x, [perm](const std::vector<Tensor>& v) { return permute(v[0], perm); });
  }
  gradcheck1(x, [](const std::vector<Tensor>& v) { return transpose(v[0], -1, 0); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return transpose(v[0], 1, 2); });
  gradcheck1(x, [](const std::vector<Tensor>& v) { return contiguous(v[0]); });
  Tensor c = contiguous(x);
  CHECK_FALSE(shares_storage(c, x));
  CHECK(max_abs_diff(c, x.detach()) == 0.f);
}

TEST_CASE("permute / transpose errors") {
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(permute(x, {0, 1}), "permute: 2 dims (0, 1) for a tensor of shape (2, 3, 4)", Error);
  CHECK_THROWS_WITH_AS(permute(x, {0, 1, -3}), "permute: dim -3 repeats in (0, 1, -3) for shape (2, 3, 4)",
                       Error);
  CHECK_THROWS_AS(permute(x, {0, 1, 3}), Error);
  CHECK_THROWS_WITH_AS(transpose(x, 0, 3), "transpose: dim 3 out of range for a 3-d tensor", Error);
}

// ---- narrow / slice ---------------------------------------------------------------------

TEST_CASE("narrow: a view over leading dims, a copy otherwise") {
  Tensor x = from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
  Tensor rows = narrow(x, 0, 1, 2);
  CHECK(rows.shape() == Shape{2, 3});
  check_close(rows, {3, 4, 5, 6, 7, 8});
  CHECK(shares_storage(rows, x));
  rows.at({1, 2}) = -8.f;
  CHECK(x.at({2, 2}) == -8.f);
  x.at({1, 0}) = 30.f;
  CHECK(rows.at({0, 0}) == 30.f);

  check_close(narrow(x, 0, -1, 1), {9, 10, 11});  // negative start counts from the end
  Tensor cols = narrow(x, 1, 1, 2);
  CHECK(cols.shape() == Shape{4, 2});
  check_close(cols, {1, 2, 4, 5, 7, -8, 10, 11});
  CHECK_FALSE(shares_storage(cols, x));
  cols.at({0, 0}) = 77.f;
  CHECK(x.at({0, 1}) == 1.f);

  // Leading dims of size 1 keep it a view: (1, 1, 4, 3) narrowed along dim 2.
  Tensor y = reshape(x, {1, 1, 4, 3});
  Tensor v = narrow(y, 2, 2, 2);
  CHECK(v.shape() == Shape{1, 1, 2, 3});
  check_close(v, {6, 7, -8, 9, 10, 11});
  CHECK(shares_storage(v, x));
  CHECK(narrow(x, 1, 3, 0).shape() == Shape{4, 0});

  // 3-d, middle dim: x[i, j, k] = 12i + 4j + k, j in [1, 3).
  check_close(narrow(arange234(), 1, 1, 2), {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
}

TEST_CASE("slice: python semantics, clamped") {
  Tensor x = from_vector({0, 1, 2, 3, 4, 5}, {6});
  check_close(slice(x, 0, 1, 4), {1, 2, 3});
  check_close(slice(x, 0, -2, 100), {4, 5});
  check_close(slice(x, -1, -100, 2), {0, 1});
  CHECK(slice(x, 0, 4, 2).numel() == 0);
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  check_close(slice(a, 1, 1, 3), {2, 3, 5, 6});
  check_close(slice(a, -1, 0, -1), {1, 2, 4, 5});
}

TEST_CASE("narrow / slice: gradcheck on the view and the copy paths") {
  Tensor x = uniform_leaf({4, 1, 5}, -1.f, 1.f, 4);
  gradcheck1(x, [](const std::vector<Tensor>& v) { return narrow(v[0], 0, 1, 2); });   // view
  gradcheck1(x, [](const std::vector<Tensor>& v) { return narrow(v[0], -1, 1, 3); });  // copy
  gradcheck1(x, [](const std::vector<Tensor>& v) { return narrow(v[0], 1, 0, 1); });   // copy (4 outer)
  gradcheck1(x, [](const std::vector<Tensor>& v) { return slice(v[0], 2, -3, 100); });
  // Two overlapping narrows of the same tensor: gradients add up.
  gradcheck1(x, [](const std::vector<Tensor>& v) {
    return mul(narrow(v[0], 0, 0, 3), narrow(v[0], 0, 1, 3));
  });
  Tensor y = uniform_leaf({1, 6, 2}, -1.f, 1.f, 5);
  gradcheck1(y, [](const std::vector<Tensor>& v) { return narrow(v[0], 1, 2, 3); });  // view
  x.zero_grad();
  narrow(x, 2, 1, 2).backward(ones({4, 1, 2}));
  check_close(x.grad(), {0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0});
}

TEST_CASE("narrow / slice errors") {
  Tensor x = zeros({4, 3});
  CHECK_THROWS_WITH_AS(narrow(x, 1, 2, 2),
                       "narrow: start 2 length 2 is out of range for dim 1 of size 3 in shape (4, 3)", Error);
  CHECK_THROWS_AS(narrow(x, 0, -5, 1), Error);
  CHECK_THROWS_AS(narrow(x, 0, 0, -1), Error);
  CHECK_THROWS_WITH_AS(narrow(x, 2, 0, 1), "narrow: dim 2 out of range for a 2-d tensor", Error);
  CHECK_THROWS_AS(narrow(scalar_tensor(1.f), 0, 0, 1), Error);
  CHECK_THROWS_WITH_AS(slice(x, -3, 0, 1), "slice: dim -3 out of range for a 2-d tensor", Error);
}

// ---- cat / stack ------------------------------------------------------------------------

TEST_CASE("cat / stack: values along every dim") {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector({5, 6}, {1, 2});
  Tensor c = from_vector({7, 8, 9, 10, 11, 12}, {2, 3});
  Tensor r = cat({a, b}, 0);
  CHECK(r.shape() == Shape{3, 2});
  check_close(r, {1, 2, 3, 4, 5, 6});
  Tensor s = cat({a, c}, 1);
  CHECK(s.shape() == Shape{2, 5});
  check_close(s, {1, 2, 7, 8, 9, 3, 4, 10, 11, 12});
  check_close(cat({c, a, c}, -1), {7, 8, 9, 1, 2, 7, 8, 9, 10, 11, 12, 3, 4, 10, 11, 12});
  check_close(cat({a}, 0), {1, 2, 3, 4});
  CHECK_FALSE(shares_storage(cat({a}, 0), a));
  check_close(cat({from_vector({1}), zeros({0}), from_vector({2, 3})}, 0), {1, 2, 3});
  // Middle dim of 3-d: (2,1,2) and (2,2,2) along dim 1.
  Tensor d = from_vector({1, 2, 3, 4}, {2, 1, 2});
  Tensor e = from_vector({5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 2});
  check_close(cat({d, e}, 1), {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});

  Tensor u = from_vector({1, 2, 3}), v = from_vector({4, 5, 6});
  Tensor s0 = stack({u, v}, 0);
  CHECK(s0.shape() == Shape{2, 3});
  check_close(s0, {1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({u, v}, 1);
  CHECK(s1.shape() == Shape{3, 2});
  check_close(s1, {1, 4, 2, 5, 3, 6});
  CHECK(stack({u, v}, -1).shape() == Shape{3, 2});
  Tensor s2 = stack({a, a * 10.f, a * 100.f}, 1);  // (2, 3, 2)
  CHECK(s2.shape() == Shape{2, 3, 2});
  check_close(s2, {1, 2, 10, 20, 100, 200, 3, 4, 30, 40, 300, 400});
  CHECK(stack({scalar_tensor(1.f), scalar_tensor(2.f)}, 0).shape() == Shape{2});
}

TEST_CASE("cat / stack: gradcheck, incl. an input that needs no gradient") {
  Tensor a = uniform_leaf({2, 1, 3}, -1.f, 1.f, 6);
  Tensor b = uniform_leaf({2, 2, 3}, -1.f, 1.f, 7);
  Tensor c = uniform_leaf({2, 3, 3}, -1.f, 1.f, 8, /*grad=*/false);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return cat({v[0], v[1], v[2]}, 1); },
                  std::vector<Tensor>{a, b, c});
  CHECK_FALSE(c.grad().defined());
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return cat({v[1], v[0]}, -2); },
                  std::vector<Tensor>{a, b});
  Tensor d = uniform_leaf({2, 1, 3}, -1.f, 1.f, 9);
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return cat({v[0], v[1], v[0]}, 0); },
                  std::vector<Tensor>{a, d});
  CHECK_GRADCHECK([](const std::vector<Tensor>& v) { return cat({v[0], v[1]}, -1); },
                  std::vector<Tensor>{a, d});
  for (int dim : {0, 1, 2, 3, -1, -4}) {
    CAPTURE(dim);
    CHECK_GRADCHECK([dim](const std::vector<Tensor>& v) { return stack({v[0], v[1], v[0]}, dim); },
                    std::vector<Tensor>{a, d});
  }
}

TEST_CASE("cat / stack errors name the tensors and shapes") {
  Tensor a = zeros({2, 3}), b = zeros({2, 4});
  CHECK_THROWS_WITH_AS(cat({a, b}, 0), "cat: tensor 1 has shape (2, 4) but tensor 0 has (2, 3) (dim 0 may differ)",
                       Error);
  CHECK_THROWS_WITH_AS(cat({a, zeros({2, 3, 1})}, 1),
                       "cat: tensor 1 has shape (2, 3, 1) but tensor 0 has (2, 3) (dim 1 may differ)", Error);
  CHECK_THROWS_WITH_AS(cat({}, 0), "cat: expected a non-empty list of tensors", Error);
  CHECK_THROWS_WITH_AS(cat({a, b}, 2), "cat: dim 2 out of range for a 2-d tensor", Error);
  CHECK_THROWS_AS(cat({scalar_tensor(1.f), scalar_tensor(2.f)}, 0), Error);
  CHECK_THROWS_WITH_AS(stack({a, a, b}, 0), "stack: tensor 2 has shape (2, 4) but tensor 0 has (2, 3) (all must match)",
                       Error);
  CHECK_THROWS_WITH_AS(stack({a, a}, 3), "stack: dim 3 out of range for a 3-d tensor", Error);
  CHECK_THROWS_AS(stack({}, 0), Error);
}

// ---- split / chunk ----------------------------------------------------------------------

TEST_CASE("split / split_with_sizes / chunk: pieces, values and views") {
  Tensor x = reshape(arange(10.f), {5, 2});
  auto p = split(x, 2, 0);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == Shape{2, 2});
  CHECK(p[2].shape() == Shape{1, 2});
  check_close(p[1], {4, 5, 6, 7});
  check_close(p[2], {8, 9});
  CHECK(shares_storage(p[1], x));  // leading-dim pieces are views
  p[1].at({0, 1}) = 50.f;
  CHECK(x.at({2, 1}) == 50.f);

  auto q = split(x, 1, -1);
  REQUIRE(q.size() == 2);
  check_close(q[0], {0, 2, 4, 6, 8});
  check_close(q[1], {1, 3, 50, 7, 9});
  CHECK(split(x, 7, 0).size() == 1);

  auto w = split_with_sizes(x, {1, 0, 4}, 0);
  REQUIRE(w.size() == 3);
  CHECK(w[1].shape() == Shape{0, 2});
  check_close(w[0], {0, 1});
  CHECK(w[2].shape() == Shape{4, 2});

  Tensor y = arange(6.f);
  auto c = chunk(y, 4, 0);  // ceil(6 / 4) = 2 -> 3 pieces, as torch.chunk
  REQUIRE(c.size() == 3);
  check_close(c[2], {4, 5});
  auto c5 = chunk(arange(5.f), 3, -1);  // 2, 2, 1
  REQUIRE(c5.size() == 3);
  CHECK(c5[2].numel() == 1);
  check_close(c5[1], {2, 3});
  CHECK(chunk(arange(5.f), 1, 0).size() == 1);
  // The usual qkv split: (2, 9) into 3 chunks along the last dim.
  auto qkv = chunk(reshape(arange(18.f), {2, 9}), 3, -1);
  REQUIRE(qkv.size() == 3);
  check_close(qkv[1], {3, 4, 5, 12, 13, 14});
}

TEST_CASE("split / chunk: gradcheck through some of the pieces") {
  Tensor x = uniform_leaf({5, 1, 3}, -1.f, 1.f, 10);
  // Pieces 0 and 2 used (1 unused gets zero gradient), piece 0 twice.
  gradcheck1(x, [](const std::vector<Tensor>& v) {
    auto p = split(v[0], 2, 0);
    return cat({mul(p[0], p[0]), p[2]}, 0);
  });
  gradcheck1(x, [](const std::vector<Tensor>& v) {
    auto p = chunk(v[0], 3, -1);
    return mul(p[0], p[2]);
  });
  gradcheck1(x, [](const std::vector<Tensor>& v) {
    auto p = split_with_sizes(v[0], {1, 3, 1}, 0);
    return cat({p[2], mul(p[1], 3.f)}, 0);
  });
}

TEST_CASE("split / chunk errors") {
  Tensor x = zeros({5, 2});
  CHECK_THROWS_WITH_AS(split_with_sizes(x, {2, 2}, 0),
                       "split_with_sizes: sizes (2, 2) sum to 4 but dim 0 has size 5 in shape (5, 2)", Error);
  CHECK_THROWS_AS(split_with_sizes(x, {6, -1}, 0), Error);
  CHECK_THROWS_WITH_AS(split(x, 0, 0), doctest::Contains("split: split_size must be positive"), Error);
  CHECK_THROWS_WITH_AS(chunk(x, 0, 0), "chunk: chunks must be positive, got 0", Error);
  CHECK_THROWS_AS(split(x, 1, 2), Error);
  CHECK_THROWS_AS(chunk(scalar_tensor(1.f), 1, 0), Error);
}

// ---- expand -----------------------------------------------------------------------------

TEST_CASE("expand: values, -1, leading dims, materialised") {
  Tensor x = from_vector({1, 2, 3}, {3, 1});
  Tensor y = expand(x, {3, 2});
  CHECK(y.shape() == Shape{3, 2});
  check_close(y, {1, 1, 2, 2, 3, 3});
  Tensor z = expand(x, {2, -1, 4});
  CHECK(z.shape() == Shape{2, 3, 4});
  check_close(z, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  check_close(expand(from_vector({1, 2}), {2, 2}), {1, 2, 1, 2});
  CHECK(expand(scalar_tensor(5.f), {2}).shape() == Shape{2});
  CHECK(expand(x, {3, 0}).numel() == 0);
  CHECK_FALSE(shares_storage(y, x));

  Tensor w = uniform_leaf({3, 1}, -1.f, 1.f, 11);
  gradcheck1(w, [](const std::vector<Tensor>& v) { return expand(v[0], {2, -1, 4}); });
  gradcheck1(w, [](const std::vector<Tensor>& v) { return expand(v[0], {3, 1}); });
  Tensor u = uniform_leaf({1, 2, 1}, -1.f, 1.f, 12);
  gradcheck1(u, [](const std::vector<Tensor>& v) { return expand(v[0], {3, -1, 2, 3}); });
  // Backward sums over the copies: (3,1) -> (2,3,4) gives 8 per element.
  w.zero_grad();
  expand(w, {2, 3, 4}).backward(ones({2, 3, 4}));
  check_close(w.grad(), {8, 8, 8});
}

TEST_CASE("expand errors") {
  Tensor x = zeros({3, 1});
  CHECK_THROWS_WITH_AS(expand(x, {4, 2}), "expand: shape (3, 1) cannot be expanded to (4, 2) (dim 0 has size 3, not 1)",
                       Error);
  CHECK_THROWS_WITH_AS(expand(x, {-1, 2, 2}), "expand: -1 is not allowed for the new leading dim 0 in (-1, 2, 2)",
                       Error);
  CHECK_THROWS_WITH_AS(expand(x, {2}), "expand: 1 sizes (2) for a tensor of shape (3, 1) (need at least 2)", Error);
  CHECK_THROWS_AS(expand(x, {3, -2}), Error);
}

// ---- index_select -----------------------------------------------------------------------

TEST_CASE("index_select: rows with repeats, scatter-add backward") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  x.requires_grad_(true);
  Tensor y = index_select(x, 0, {3, 0, 3});
  CHECK(y.shape() == Shape{3, 2});
  check_close(y, {7, 8, 1, 2, 7, 8});
  y.backward(from_vector({1, 2, 3, 4, 5, 6}, {3, 2}));
  check_close(x.grad(), {3, 4, 0, 0, 0, 0, 6, 8});  // row 3 gets rows 0 and 2 of gy
  CHECK(index_select(x, -2, {}).shape() == Shape{0, 2});
  Tensor z = index_select(arange234(), 0, {1});
  CHECK(z.shape() == Shape{1, 3, 4});
  CHECK(z.at({0, 2, 3}) == 23.f);

  Tensor w = uniform_leaf({4, 1, 3}, -1.f, 1.f, 13);
  gradcheck1(w, [](const std::vector<Tensor>& v) { return index_select(v[0], 0, {2, 2, 0, 3, 2}); });
  gradcheck1(w, [](const std::vector<Tensor>& v) { return index_select(v[0], -3, {1}); });
  // Many repeats over wide rows (the threaded backward).
  Tensor big = uniform_leaf({3, 40000}, -1.f, 1.f, 14);
  std::vector<int64_t> idx(7, 1);
  idx[3] = 2;
  index_select(big, 0, idx).backward(ones({7, 40000}));
  CHECK(big.grad().at({1, 39999}) == 6.f);
  CHECK(big.grad().at({2, 0}) == 1.f);
  CHECK(big.grad().at({0, 123}) == 0.f);
}

TEST_CASE("index_select errors") {
  Tensor x = zeros({4, 2});
  CHECK_THROWS_WITH_AS(index_select(x, 0, {0, 4}),
                       "index_select: index 4 at position 1 is out of range for dim 0 of size 4 in shape (4, 2)",
                       Error);
  CHECK_THROWS_AS(index_select(x, 0, {-1}), Error);
  CHECK_THROWS_WITH_AS(index_select(x, 1, {0}), doctest::Contains("index_select: only dim 0 is supported, got dim 1"),
                       Error);
  CHECK_THROWS_AS(index_select(x, -1, {0}), Error);
  CHECK_THROWS_AS(index_select(x, 2, {0}), Error);
  CHECK_THROWS_AS(index_select(scalar_tensor(1.f), 0, {0}), Error);
}

// ---- pad --------------------------------------------------------------------------------

TEST_CASE("pad: values, last dim first, gradcheck") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = pad(x, {1, 2});
  CHECK(y.shape() == Shape{2, 6});
  check_close(y, {0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0});
  Tensor z = pad(x, {0, 1, 1, 0}, -1.f);  // last dim: (0, 1); first dim: (1, 0)
  CHECK(z.shape() == Shape{3, 4});
  check_close(z, {-1, -1, -1, -1, 1, 2, 3, -1, 4, 5, 6, -1});
  check_close(pad(x, {}), {1, 2, 3, 4, 5, 6});
  CHECK(pad(arange234(), {1, 1, 0, 0, 2, 0}).shape() == Shape{4, 3, 6});
  CHECK(pad(arange234(), {1, 1, 0, 0, 2, 0}).at({3, 2, 4}) == 23.f);
  CHECK(pad(arange234(), {1, 1, 0, 0, 2, 0}).at({1, 0, 1}) == 0.f);

  Tensor w = uniform_leaf({2, 1, 3}, -1.f, 1.f, 15);
  gradcheck1(w, [](const std::vector<Tensor>& v) { return pad(v[0], {1, 2}); });
  gradcheck1(w, [](const std::vector<Tensor>& v) { return pad(v[0], {0, 0, 2, 1}, 3.f); });
  gradcheck1(w, [](const std::vector<Tensor>& v) { return pad(v[0], {1, 0, 0, 1, 1, 1}); });
}

TEST_CASE("pad errors") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH_AS(pad(x, {1}), "pad: pads (1) must have an even number of entries", Error);
  CHECK_THROWS_WITH_AS(pad(x, {1, 1, 1, 1, 1, 1}),
                       "pad: pads (1, 1, 1, 1, 1, 1) cover 3 dims but the tensor has shape (2, 3)", Error);
  CHECK_THROWS_WITH_AS(pad(x, {-1, 0}), doctest::Contains("pad: negative padding in (-1, 0) is not supported"),
                       Error);
}
