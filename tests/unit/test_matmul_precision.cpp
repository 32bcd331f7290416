// torch.set_float32_matmul_precision's twin: the process-wide setting, its names, and the
// precision that matmul, addmm and bmm hand to the device's kernel.
#include <gtest/gtest.h>

#include <string>

#include "mock_device.h"
#include "tessera/errors.h"
#include "tessera/ops.h"

using namespace tessera;
using tessera::testing::MockDevice;
using ::testing::_;
using ::testing::Invoke;

namespace {

// Restores the default when a test ends, whatever it set.
struct PrecisionReset {
  ~PrecisionReset() { set_float32_matmul_precision(MatmulPrecision::highest); }
};

}  // namespace

TEST(MatmulPrecision, NamesRoundTripAndAnUnknownNameIsRefused) {
  PrecisionReset reset;
  EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::highest);
  for (const char* name : {"high", "medium", "highest"}) {
    set_float32_matmul_precision(name);
    EXPECT_EQ(matmul_precision_name(float32_matmul_precision()), name);
  }
  set_float32_matmul_precision("medium");
  try {
    set_float32_matmul_precision("HIGH");
    ADD_FAILURE() << "an unknown precision was accepted";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'HIGH'"), std::string::npos) << what;
    EXPECT_NE(what.find("\"highest\", \"high\" or \"medium\""), std::string::npos) << what;
  }
  // A refused name leaves the setting as it was.
  EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::medium);
}

TEST(MatmulPrecision, MatmulAddmmAndBmmCarryTheSettingOfTheirCall) {
  PrecisionReset reset;
  MockDevice dev("cpu", 0);
  MatmulPrecision seen = MatmulPrecision::highest;
  int calls = 0;
  auto record = [&](const OpCall& call, Queue&) {
    seen = call.attr<MatmulAttrs>().precision;
    ++calls;
  };
  EXPECT_CALL(dev.add(OpId::matmul), launch(_, _)).WillRepeatedly(Invoke(record));
  EXPECT_CALL(dev.add(OpId::addmm), launch(_, _)).WillRepeatedly(Invoke(record));
  EXPECT_CALL(dev.add(OpId::bmm), launch(_, _)).WillRepeatedly(Invoke(record));
  const Tensor a = Tensor::from(std::vector<float>(6, 1.0f), {2, 3}, &dev);
  const Tensor b = Tensor::from(std::vector<float>(12, 1.0f), {3, 4}, &dev);
  const Tensor bias = Tensor::from(std::vector<float>(4, 1.0f), {4}, &dev);
  const Tensor a3 = Tensor::from(std::vector<float>(12, 1.0f), {2, 2, 3}, &dev);
  const Tensor b3 = Tensor::from(std::vector<float>(24, 1.0f), {2, 3, 4}, &dev);
  for (MatmulPrecision p :
       {MatmulPrecision::high, MatmulPrecision::medium, MatmulPrecision::highest}) {
    set_float32_matmul_precision(p);
    (void)matmul(a, b);
    EXPECT_EQ(seen, p) << "matmul at " << matmul_precision_name(p);
    (void)addmm(a, b, bias);
    EXPECT_EQ(seen, p) << "addmm at " << matmul_precision_name(p);
    (void)bmm(a3, b3);
    EXPECT_EQ(seen, p) << "bmm at " << matmul_precision_name(p);
  }
  EXPECT_EQ(calls, 9);
}
