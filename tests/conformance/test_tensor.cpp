// Conformance of the tensor API on every device: casts, copy_ into views (cat, stack), arange,
// fills of every dtype, rand/randn/randint (the CPU's values for the same seed, and sane
// statistics), index_select and its backward, views read back, and printing. Integer and bool
// results compare exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "cases.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::conformance;

namespace {

// Host values of a tensor of any dtype the tensor API makes, as doubles.
std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  switch (t.dtype()) {
    case DType::f32:
      for (float x : t.to_vector<float>()) v.push_back(x);
      break;
    case DType::f64:
      return t.to_vector<double>();
    case DType::i32:
      for (auto x : t.to_vector<std::int32_t>()) v.push_back(x);
      break;
    case DType::i64:
      for (auto x : t.to_vector<std::int64_t>()) v.push_back(static_cast<double>(x));
      break;
    default:  // u8, bool
      for (auto x : t.to_vector<std::uint8_t>()) v.push_back(x);
      break;
  }
  return v;
}

// A tensor of |dtype| holding |v| (whole numbers for integer dtypes, 0/1 for bool).
Tensor make(Device& d, const std::vector<double>& v, const Shape& s, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      Vec f(v.begin(), v.end());
      return Tensor::from(f, s, &d);
    }
    case DType::f64:
      return Tensor::from<double>(v, s, &d);
    case DType::i32: {
      std::vector<std::int32_t> i(v.size());
      for (std::size_t k = 0; k < v.size(); ++k) i[k] = static_cast<std::int32_t>(v[k]);
      return Tensor::from<std::int32_t>(i, s, &d);
    }
    case DType::i64: {
      std::vector<std::int64_t> i(v.size());
      for (std::size_t k = 0; k < v.size(); ++k) i[k] = static_cast<std::int64_t>(v[k]);
      return Tensor::from<std::int64_t>(i, s, &d);
    }
    default: {
      std::vector<std::uint8_t> b(v.size());
      for (std::size_t k = 0; k < v.size(); ++k) b[k] = static_cast<std::uint8_t>(v[k]);
      return dtype == DType::boolean ? Tensor::from_mask(b, s, &d)
                                     : Tensor::from<std::uint8_t>(b, s, &d);
    }
  }
}

// Values that every dtype holds exactly: whole numbers in [-40, 40] (0/1 for bool, [0, 80] u8).
std::vector<double> whole(std::int64_t n, DType dtype) {
  const Vec u = uniform(n, -40.f, 40.f);
  std::vector<double> v(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    double x = std::trunc(u[i]);
    if (dtype == DType::boolean) x = std::abs(x) < 20 ? 0 : 1;
    if (dtype == DType::u8) x += 40;
    v[i] = x;
  }
  return v;
}

double cast_ref(double x, DType to) {
  if (to == DType::boolean) return x != 0 ? 1 : 0;
  if (to == DType::f32) return static_cast<float>(x);
  if (to == DType::f64) return x;
  return std::trunc(x);  // in range here
}

void expect_values(const Tensor& t, const std::vector<double>& ref, double tol = 0) {
  const std::vector<double> v = values(t);
  ASSERT_EQ(v.size(), ref.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (tol == 0)
      ASSERT_EQ(v[i], ref[i]) << "element " << i;
    else
      ASSERT_NEAR(v[i], ref[i], tol * std::max(1.0, std::abs(ref[i]))) << "element " << i;
  }
}

constexpr DType kDTypes[] = {DType::f32, DType::i32, DType::i64, DType::boolean};

std::vector<Case> cast_cases() {
  std::vector<Case> c;
  const DType all[] = {DType::f32, DType::i32, DType::i64, DType::boolean, DType::u8, DType::f64};
  for (DType from : all)
    for (DType to : all) {
      if (from == to) continue;
      c.push_back({fmt::format("cast_{}_to_{}", dtype_name(from), dtype_name(to)), OpId::cast,
                   [=](Device& d) {
                     // Odd sizes, a transposed view, and an empty tensor.
                     for (const Shape& s : {Shape{1}, Shape{127}, Shape{3, 5}, Shape{0, 4}}) {
                       std::vector<double> v = whole(s.numel(), from);
                       if (from == DType::f32 || from == DType::f64)  // fractions truncate
                         for (double& x : v) x += to == DType::u8 ? 0.75 : (x < 0 ? -0.5 : 0.5);
                       if (to == DType::u8)  // no wrap-around or saturation to compare
                         for (double& x : v) x = std::abs(x);
                       Tensor x = make(d, v, s, from);
                       std::vector<double> ref(v.size());
                       if (s.rank() == 2) {  // read through a transposed view
                         x = x.t();
                         for (std::int64_t i = 0; i < s[1]; ++i)
                           for (std::int64_t j = 0; j < s[0]; ++j)
                             ref[static_cast<std::size_t>(i * s[0] + j)] =
                                 cast_ref(v[static_cast<std::size_t>(j * s[1] + i)], to);
                       } else {
                         for (std::size_t i = 0; i < v.size(); ++i) ref[i] = cast_ref(v[i], to);
                       }
                       const Tensor y = x.to(to);
                       EXPECT_EQ(y.dtype(), to);
                       expect_values(y, ref);
                     }
                   }});
    }
  c.push_back(
      {"cast_f32_edges", OpId::cast, [](Device& d) {
         // Truncation toward zero, saturation and NaN as Tensor::to promises.
         const Vec v = {-2.7f, -0.5f, 0.5f, 2.7f, 3e9f, -3e9f, NAN, 0.0f};
         expect_values(Tensor::from(v, {8}, &d).to(DType::i32),
                       {-2, 0, 0, 2, 2147483647.0, -2147483648.0, 0, 0});
         expect_values(Tensor::from(v, {8}, &d).to(DType::boolean), {1, 1, 1, 1, 1, 1, 1, 0});
       }});
  return c;
}

std::vector<Case> copy_cases() {
  std::vector<Case> c;
  for (DType t : kDTypes) {
    const std::string n(dtype_name(t));
    c.push_back(
        {"cat_" + n, OpId::copy_into, [t](Device& d) {
           for (int dim : {0, 1, -1}) {
             const std::vector<double> a = whole(3 * 5 * 2, t), b = whole(3 * 1 * 2, t),
                                       e = whole(3 * 4 * 2, t);
             const Tensor y = cat(
                 {make(d, a, {3, 5, 2}, t), make(d, b, {3, 1, 2}, t), make(d, e, {3, 4, 2}, t)}, 1);
             std::vector<double> ref;
             for (int i = 0; i < 3; ++i) {
               for (int k = 0; k < 10; ++k) ref.push_back(a[i * 10 + k]);
               for (int k = 0; k < 2; ++k) ref.push_back(b[i * 2 + k]);
               for (int k = 0; k < 8; ++k) ref.push_back(e[i * 8 + k]);
             }
             EXPECT_EQ(y.shape(), (Shape{3, 10, 2}));
             expect_values(y, ref);
             // Along |dim| of [2,3] pieces, one of them a transposed [3,2].
             const std::vector<double> p = whole(6, t), q = whole(6, t);
             const Tensor qt = make(d, q, {3, 2}, t).t();
             const Tensor z = cat({make(d, p, {2, 3}, t), qt}, dim);
             std::vector<double> rz;
             const int dd = dim < 0 ? dim + 2 : dim;
             if (dd == 0) {
               rz = p;
               for (int i = 0; i < 2; ++i)
                 for (int j = 0; j < 3; ++j) rz.push_back(q[j * 2 + i]);
             } else {
               for (int i = 0; i < 2; ++i) {
                 for (int j = 0; j < 3; ++j) rz.push_back(p[i * 3 + j]);
                 for (int j = 0; j < 3; ++j) rz.push_back(q[j * 2 + i]);
               }
             }
             expect_values(z, rz);
           }
         }});
    c.push_back({"stack_split_chunk_" + n, OpId::copy_into, [t](Device& d) {
                   const std::vector<double> a = whole(127, t), b = whole(127, t);
                   const Tensor s = stack({make(d, a, {127}, t), make(d, b, {127}, t)}, 1);
                   EXPECT_EQ(s.shape(), (Shape{127, 2}));
                   std::vector<double> ref;
                   for (std::size_t i = 0; i < 127; ++i) {
                     ref.push_back(a[i]);
                     ref.push_back(b[i]);
                   }
                   expect_values(s, ref);
                   const std::vector<Tensor> parts = s.split(50, 0);
                   ASSERT_EQ(parts.size(), 3u);
                   EXPECT_EQ(parts[2].shape(), (Shape{27, 2}));
                   EXPECT_TRUE(parts[1].shares_storage(s));
                   expect_values(parts[1].select(1, 1),
                                 std::vector<double>(b.begin() + 50, b.begin() + 100));
                   const std::vector<Tensor> ch = s.chunk(3, 0);
                   ASSERT_EQ(ch.size(), 3u);
                   EXPECT_EQ(ch[0].dim(0), 43);
                   EXPECT_EQ(ch[2].dim(0), 41);
                 }});
    c.push_back({"copy_into_strided_broadcast_" + n, OpId::copy_into, [t](Device& d) {
                   // dst: every other column of a [4,7] tensor; src: one row broadcast.
                   const std::vector<double> base = whole(28, t), row = whole(4, t);
                   const Tensor dst = make(d, base, {4, 7}, t);
                   copy_(dst.slice(1, 0, 7, 2), make(d, row, {4}, t));
                   std::vector<double> ref = base;
                   for (int i = 0; i < 4; ++i)
                     for (int j = 0; j < 4; ++j)
                       ref[static_cast<std::size_t>(i * 7 + 2 * j)] = row[j];
                   expect_values(dst, ref);
                   // Overlapping source and destination: src is read before dst is written.
                   const std::vector<double> v = whole(9, t);
                   const Tensor x = make(d, v, {9}, t);
                   copy_(x.narrow(0, 1, 8), x.narrow(0, 0, 8));
                   std::vector<double> rv = v;
                   for (int i = 8; i >= 1; --i)
                     rv[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i - 1)];
                   expect_values(x, rv);
                   // A non-contiguous view read back (contiguous() copies on the device).
                   expect_values(dst.select(1, 3), {ref[3], ref[10], ref[17], ref[24]});
                 }});
    c.push_back({"fill_" + n, OpId::fill, [t](Device& d) {
                   for (double v : {0.0, 1.0, 7.0}) {
                     if (t == DType::boolean && v == 7.0) continue;
                     const Tensor z = full({3, 1025}, v, t, &d);
                     expect_values(z, std::vector<double>(3 * 1025, v));
                   }
                   expect_values(zeros({5}, t, &d), std::vector<double>(5, 0));
                   expect_values(ones({5}, t, &d), std::vector<double>(5, 1));
                 }});
  }
  return c;
}

std::vector<Case> factory_cases() {
  std::vector<Case> c;
  for (DType t : {DType::f32, DType::i32, DType::i64}) {
    c.push_back({fmt::format("arange_{}", dtype_name(t)), OpId::arange, [t](Device& d) {
                   const double tol = t == DType::f32 ? 1e-6 : 0;
                   for (auto [s, e, st] :
                        {std::array<double, 3>{0, 1025, 1}, {-5, 17, 3}, {10, -3, -2}, {4, 4, 1}}) {
                     const Tensor y = arange(s, e, st, t, &d);
                     const auto n =
                         static_cast<std::int64_t>(std::max(0.0, std::ceil((e - s) / st)));
                     ASSERT_EQ(y.numel(), n);
                     std::vector<double> ref;
                     for (std::int64_t i = 0; i < n; ++i)
                       ref.push_back(s + static_cast<double>(i) * st);
                     expect_values(y, ref, tol);
                   }
                   if (t == DType::f32)
                     expect_values(arange(0, 1, 0.25, t, &d), {0, 0.25, 0.5, 0.75}, 1e-7);
                 }});
  }
  c.push_back({"rand_same_as_cpu_and_uniform", OpId::rand, [](Device& d) {
                 TensorGenerator g(rng()());
                 const std::uint64_t seed = g.initial_seed();
                 const Tensor a = rand({100000}, &g, &d), b = rand({100000}, &g, &d);
                 // The numbers are those of op.h's formula (what cpu:0 computes) for this seed.
                 TensorGenerator again(seed);
                 const std::uint32_t key = random_key(again.next_stream(), 0);
                 const Vec va = a.to_vector<float>(), vb = b.to_vector<float>();
                 double mean = 0, var = 0;
                 for (std::size_t i = 0; i < va.size(); ++i) {
                   ASSERT_EQ(va[i],
                             random_uniform(random_bits(key, static_cast<std::uint32_t>(i))));
                   ASSERT_TRUE(va[i] >= 0 && va[i] < 1);
                   mean += va[i];
                 }
                 mean /= double(va.size());
                 for (float x : va) var += (x - mean) * (x - mean);
                 var /= double(va.size());
                 EXPECT_NEAR(mean, 0.5, 0.01);
                 EXPECT_NEAR(var, 1.0 / 12, 0.005);
                 EXPECT_NE(va, vb) << "consecutive draws must differ";
               }});
  c.push_back({"randn_same_as_cpu_and_normal", OpId::randn, [](Device& d) {
                 const std::uint64_t seed = rng()();
                 TensorGenerator g(seed);
                 const Vec v = randn({100000}, &g, &d).to_vector<float>();
                 TensorGenerator again(seed);
                 const std::uint64_t stream = again.next_stream();
                 const std::uint32_t k0 = random_key(stream, 0), k1 = random_key(stream, 1);
                 double mean = 0, var = 0;
                 for (std::size_t i = 0; i < v.size(); ++i) {
                   const auto idx = static_cast<std::uint32_t>(i);
                   const float ref = random_normal(random_bits(k0, idx), random_bits(k1, idx));
                   ASSERT_NEAR(v[i], ref, 1e-6f * std::max(1.0f, std::abs(ref))) << i;
                   mean += v[i];
                 }
                 mean /= double(v.size());
                 for (float x : v) var += (x - mean) * (x - mean);
                 var /= double(v.size());
                 EXPECT_NEAR(mean, 0.0, 0.02);
                 EXPECT_NEAR(var, 1.0, 0.03);
               }});
  for (DType t : {DType::i32, DType::i64}) {
    c.push_back({fmt::format("randint_{}", dtype_name(t)), OpId::randint, [t](Device& d) {
                   manual_seed(rng()());
                   const std::uint64_t seed = default_generator().initial_seed();
                   const Tensor x = randint(-3, 10, {100000}, t, nullptr, &d);
                   TensorGenerator again(seed);
                   const std::uint32_t key = random_key(again.next_stream(), 0);
                   const std::vector<double> v = values(x);
                   std::vector<int> count(13, 0);
                   for (std::size_t i = 0; i < v.size(); ++i) {
                     const double ref =
                         -3 +
                         double(random_below(random_bits(key, static_cast<std::uint32_t>(i)), 13));
                     ASSERT_EQ(v[i], ref) << i;
                     ++count[static_cast<std::size_t>(v[i] + 3)];
                   }
                   for (int k : count) EXPECT_NEAR(k, 100000 / 13.0, 400);  // ~5 sigma
                   // manual_seed repeats the sequence.
                   manual_seed(seed);
                   EXPECT_EQ(values(randint(-3, 10, {100000}, t, nullptr, &d)), v);
                 }});
  }
  return c;
}

std::vector<Case> index_cases() {
  std::vector<Case> c;
  for (DType t : kDTypes)
    for (DType it : {DType::i32, DType::i64}) {
      c.push_back({fmt::format("index_select_{}_index_{}", dtype_name(t), dtype_name(it)),
                   OpId::index_select, [t, it](Device& d) {
                     const std::int64_t dims[3] = {3, 5, 4};
                     const std::vector<double> x = whole(60, t);
                     const Tensor xt = make(d, x, {3, 5, 4}, t);
                     for (int dim = 0; dim < 3; ++dim) {
                       // Repeats, the ends, one out of range (zeros).
                       const std::vector<double> idx = {double(dims[dim] - 1), 0, 1, 1, 99};
                       const Tensor y = index_select(xt, dim, make(d, idx, {5}, it));
                       Shape s{3, 5, 4};
                       s[dim] = 5;
                       ASSERT_EQ(y.shape(), s);
                       std::vector<double> ref;
                       for (std::int64_t a = 0; a < s[0]; ++a)
                         for (std::int64_t b = 0; b < s[1]; ++b)
                           for (std::int64_t e = 0; e < s[2]; ++e) {
                             std::int64_t p[3] = {a, b, e};
                             const auto j =
                                 static_cast<std::int64_t>(idx[static_cast<std::size_t>(p[dim])]);
                             if (j >= dims[dim]) {
                               ref.push_back(0);
                               continue;
                             }
                             p[dim] = j;
                             ref.push_back(
                                 x[static_cast<std::size_t>((p[0] * 5 + p[1]) * 4 + p[2])]);
                           }
                       expect_values(y, ref);
                     }
                     // An empty index.
                     EXPECT_EQ(index_select(xt, 1, make(d, {}, {0}, it)).shape(), (Shape{3, 0, 4}));
                   }});
    }
  for (DType it : {DType::i32, DType::i64})
    c.push_back({fmt::format("index_select_backward_index_{}", dtype_name(it)),
                 OpId::index_select_backward, [it](Device& d) {
                   // grad [2, 7, 3] scattered into [2, 4, 3] along dim 1, with repeats.
                   const std::vector<double> idx = {3, 0, 3, 1, 3, 0, 9};
                   const Vec g = randn(42);
                   const Tensor gt = Tensor::from(g, {2, 7, 3}, &d);
                   const Tensor y = index_select_backward(gt, 1, make(d, idx, {7}, it), 4);
                   ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
                   // The same float sums in index order: the same bits as every other device.
                   std::vector<double> ref(24);
                   for (int o = 0; o < 2; ++o)
                     for (int j = 0; j < 4; ++j)
                       for (int i = 0; i < 3; ++i) {
                         float acc = 0;
                         for (int k = 0; k < 7; ++k)
                           if (idx[static_cast<std::size_t>(k)] == j)
                             acc += g[static_cast<std::size_t>((o * 7 + k) * 3 + i)];
                         ref[static_cast<std::size_t>((o * 4 + j) * 3 + i)] = acc;
                       }
                   expect_values(y, ref);
                   const Tensor again = index_select_backward(gt, 1, make(d, idx, {7}, it), 4);
                   expect_values(again, ref);
                 }});
  return c;
}

std::vector<Case> misc_cases() {
  std::vector<Case> c;
  c.push_back({"views_read_back", OpId::copy, [](Device& d) {
                 const Vec v = randn(2 * 3 * 4);
                 const Tensor x = Tensor::from(v, {2, 3, 4}, &d);
                 // permute(2,0,1) then slice with step and narrow: values as indexed on the host.
                 const Tensor y = x.permute({2, 0, 1}).slice(0, 1, 4, 2).narrow(2, 1, 2);
                 ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
                 std::vector<double> ref;
                 for (int a : {1, 3})
                   for (int b = 0; b < 2; ++b)
                     for (int e = 1; e < 3; ++e)
                       ref.push_back(v[static_cast<std::size_t>((b * 3 + e) * 4 + a)]);
                 expect_values(y, ref);
                 expect_values(x.unsqueeze(1).squeeze(1).flatten(),
                               std::vector<double>(v.begin(), v.end()));
                 EXPECT_TRUE(x.flatten(0, 1).shares_storage(x));
               }});
  c.push_back({"copy_permuted_f32", OpId::copy, [](Device& d) {
                 // The GPU plugins' copy takes 4 elements of the last dimension per invocation
                 // where it can (ops_base.cpp): a permute keeping the last dimension (4-float
                 // loads), one moving it (4 strided loads), and an offset view whose last extent
                 // is a multiple of 4 but whose source groups are not aligned.
                 const Vec v = randn(3 * 5 * 8);
                 const Tensor x = Tensor::from(v, {3, 5, 8}, &d);
                 auto at = [&](int a, int b, int e) {
                   return double(v[static_cast<std::size_t>((a * 5 + b) * 8 + e)]);
                 };
                 std::vector<double> keep, move, shifted;
                 for (int b = 0; b < 5; ++b)
                   for (int a = 0; a < 3; ++a)
                     for (int e = 0; e < 8; ++e) keep.push_back(at(a, b, e));
                 for (int a = 0; a < 3; ++a)
                   for (int e = 0; e < 8; ++e)
                     for (int b = 1; b < 5; ++b) move.push_back(at(a, b, e));
                 for (int a = 0; a < 3; ++a)
                   for (int b = 0; b < 5; ++b)
                     for (int e = 1; e < 5; ++e) shifted.push_back(at(a, b, e));
                 expect_values(x.permute({1, 0, 2}).contiguous(), keep);
                 expect_values(x.narrow(1, 1, 4).transpose(1, 2).contiguous(), move);
                 expect_values(x.narrow(2, 1, 4).contiguous(), shifted);
               }});
  c.push_back(
      {"copy_transposed_tiles", OpId::copy, [](Device& d) {
         // The GPU plugins copy a view that transposes the last two dimensions through
         // 64 x 64 tiles (ops_base.cpp's transpose_copy): ragged tiles, a batch of two
         // dimensions that do not merge (a narrowed view, with an offset), and a matrix.
         const Vec v = randn(3 * 5 * 45 * 70);
         const Tensor x = Tensor::from(v, {3, 5, 45, 70}, &d);
         auto at = [&](int a, int b, int r, int e) {
           return double(v[static_cast<std::size_t>(((a * 5 + b) * 45 + r) * 70 + e)]);
         };
         std::vector<double> batch, matrix;
         for (int a = 0; a < 3; ++a)
           for (int b = 1; b < 4; ++b)
             for (int e = 0; e < 70; ++e)
               for (int r = 0; r < 45; ++r) batch.push_back(at(a, b, r, e));
         for (int e = 0; e < 70; ++e)
           for (int r = 0; r < 45 * 3; ++r) matrix.push_back(at(0, r / 45, r % 45, e));
         expect_values(x.narrow(1, 1, 3).transpose(2, 3).contiguous(), batch);
         expect_values(x.reshape({15 * 45, 70}).narrow(0, 0, 45 * 3).t().contiguous(), matrix);
       }});
  c.push_back(
      {"print", OpId::copy, [](Device& d) {
         std::ostringstream s;
         s << Tensor::from(Vec{0.1234f, -1.0f, 2.5f, 3.0f}, {2, 2}, &d);
         const std::string dev = d.id() == "cpu:0" ? "" : fmt::format(", device='{}'", d.id());
         EXPECT_EQ(s.str(), fmt::format("tensor([[ 0.1234, -1.0000],\n        [ 2.5000,  "
                                        "3.0000]]{})",
                                        dev));
         std::ostringstream i;
         i << make(d, {1, 0, 1}, {3}, DType::boolean) << ' ' << make(d, {-3, 12}, {2}, DType::i32);
         EXPECT_EQ(i.str(), fmt::format("tensor([ True, False,  True]{}) tensor([-3, "
                                        "12]{}, dtype=i32)",
                                        dev, dev));
         std::ostringstream big;
         big << zeros({40, 40}, DType::f32, &d);
         EXPECT_NE(big.str().find("..."), std::string::npos);
         EXPECT_LT(big.str().size(), 400u) << big.str();
       }});
  return c;
}

}  // namespace

std::vector<Case> tessera::conformance::tensor_cases() {
  std::vector<Case> c;
  for (auto* f : {cast_cases, copy_cases, factory_cases, index_cases, misc_cases})
    for (Case& k : f()) c.push_back(std::move(k));
  return c;
}
