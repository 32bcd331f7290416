// Device selection: auto preference, explicit specs, errors, and the scoped guard.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mock_device.h"
#include "tessera/errors.h"
#include "tessera/runtime.h"

using namespace tessera;
using tessera::testing::MockDevice;
using ::testing::HasSubstr;

namespace {
std::string error_of(const std::vector<DeviceSpec>& specs, const std::vector<Device*>& devs,
                     const std::vector<Unavailable>& unavailable = {}) {
  try {
    resolve_device(specs, devs, unavailable, "TESSERA_DEVICE=x");
  } catch (const DeviceUnavailable& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST(Auto, PrefersDiscreteThenIntegratedThenCpuThenScore) {
  MockDevice cpu("cpu", 0, DeviceType::cpu, 100), lavapipe("vulkan", 0, DeviceType::cpu, 10);
  MockDevice igpu("opencl", 0, DeviceType::integrated_gpu, 5),
      dgpu("vulkan", 1, DeviceType::discrete_gpu, 1);
  EXPECT_EQ(pick_auto({&cpu, &lavapipe}), &cpu);
  EXPECT_EQ(pick_auto({&lavapipe, &cpu}), &cpu);
  EXPECT_EQ(pick_auto({&cpu, &igpu, &lavapipe}), &igpu);
  EXPECT_EQ(pick_auto({&cpu, &igpu, &dgpu}), &dgpu);
  EXPECT_EQ(pick_auto({}), nullptr);
}

TEST(Resolve, NamesIndicesAndListsInOrderOfPreference) {
  MockDevice cpu("cpu", 0), v0("vulkan", 0), v1("vulkan", 1);
  const std::vector<Device*> all{&cpu, &v0, &v1};
  EXPECT_EQ(&resolve_device({{"vulkan", std::nullopt}}, all, {}, "s"), &v0);
  EXPECT_EQ(&resolve_device({{"vulkan", 1}}, all, {}, "s"), &v1);
  EXPECT_EQ(&resolve_device({{"opencl", std::nullopt}, {"cpu", std::nullopt}}, all,
                            {{"opencl", "no OpenCL platform"}}, "s"),
            &cpu);
}

TEST(Resolve, AnUnavailableDeviceIsAnErrorThatSaysWhyAndWhatIsAvailable) {
  MockDevice cpu("cpu", 0), ocl("opencl", 0);
  const std::string msg =
      error_of({{"vulkan", std::nullopt}}, {&cpu, &ocl},
               {{"vulkan", "no Vulkan device found (plugin vulkan loaded from /p)"}});
  EXPECT_EQ(msg,
            "DeviceUnavailable: 'vulkan' was requested (TESSERA_DEVICE=x) but can not run on this "
            "system: no Vulkan device found (plugin vulkan loaded from /p). Available: cpu:0, "
            "opencl:0. Run tessera-devices for details.");
}

TEST(Resolve, AnIndexPastTheLastDeviceListsTheDevices) {
  MockDevice cpu("cpu", 0), v0("vulkan", 0);
  EXPECT_THAT(error_of({{"vulkan", 3}}, {&cpu, &v0}),
              HasSubstr("vulkan has 1 device(s): vulkan:0"));
}

TEST(Resolve, AMisspeltNameListsTheKnownNamesAndSuggests) {
  MockDevice cpu("cpu", 0), v0("vulkan", 0);
  const std::string msg = error_of({{"vulkn", std::nullopt}}, {&cpu, &v0}, {{"opencl", "x"}});
  EXPECT_THAT(msg, HasSubstr("unknown device 'vulkn'"));
  EXPECT_THAT(msg, HasSubstr("Did you mean 'vulkan'?"));
  EXPECT_THAT(msg, HasSubstr("Known devices: auto, cpu, vulkan, opencl."));
  // A misspelling inside a list is an error too, not silently skipped.
  EXPECT_THAT(error_of({{"cpuu", std::nullopt}, {"cpu", std::nullopt}}, {&cpu}),
              HasSubstr("unknown device 'cpuu'"));
}

TEST(Resolve, AutoWithNoDeviceIsAnError) {
  EXPECT_THAT(error_of({{"auto", std::nullopt}}, {}), HasSubstr("no device was found"));
}

TEST(Guard, NestsAndRestores) {
  MockDevice a("cpu", 0), b("vulkan", 0);
  {
    DeviceGuard ga(a);
    EXPECT_EQ(&default_device(), &a);
    {
      DeviceGuard gb(b);
      EXPECT_EQ(&default_device(), &b);
    }
    EXPECT_EQ(&default_device(), &a);
  }
}

namespace {
// A device with a kernel for every op (what the cpu, vulkan and opencl plugins have), or for only
// the first |n| ops (an out-of-tree plugin that implements a few).
void give_ops(MockDevice& d, int n = kNumOps) {
  for (int op = 0; op < n; ++op) d.add(static_cast<OpId>(op));
}
}  // namespace

// The out-of-tree discrete GPU that implements 3 ops: auto must not pick it when fallback is off
// (training would fail on its first missing op), and says why.
TEST(Auto, PrefersADeviceThatRunsEveryOpUnlessFallbackIsOn) {
  MockDevice cpu("cpu", 0, DeviceType::cpu, 100), partial("outoftree", 0, DeviceType::discrete_gpu);
  MockDevice lavapipe("vulkan", 0, DeviceType::cpu, 10);
  give_ops(cpu);
  give_ops(lavapipe);
  give_ops(partial, 3);
  const std::vector<Device*> all{&partial, &lavapipe, &cpu};
  const AutoChoice off = choose_auto(all, false);
  EXPECT_EQ(off.device, &cpu);
  EXPECT_THAT(off.reason, HasSubstr("cpu:0 is a CPU, score 100, runs every op"));
  EXPECT_THAT(off.reason,
              HasSubstr(fmt::format("passed over outoftree:0 (discrete GPU, 3 of {} ops) because "
                                    "fallback is off (TESSERA_FALLBACK=1 would choose it",
                                    kNumOps)));
  const AutoChoice on = choose_auto(all, true);
  EXPECT_EQ(on.device, &partial);
  EXPECT_THAT(on.reason,
              HasSubstr(fmt::format("3 of {} ops; the others run on the fallback chain", kNumOps)));
  EXPECT_EQ(pick_auto(all), &cpu);
  EXPECT_EQ(pick_auto(all, true), &partial);
}

TEST(Auto, WithFallbackOnACompleteDeviceWinsWithinItsType) {
  MockDevice partial("outoftree", 0, DeviceType::discrete_gpu, 50),
      full("vulkan", 0, DeviceType::discrete_gpu, 1), cpu("cpu", 0, DeviceType::cpu, 100);
  give_ops(partial, 3);
  give_ops(full);
  give_ops(cpu);
  EXPECT_EQ(pick_auto({&partial, &full, &cpu}, true), &full);
  EXPECT_EQ(pick_auto({&partial, &full, &cpu}, false), &full);
}

TEST(Auto, AddmmNeedsNoKernelAndWithoutACompleteDeviceTheBestPartialOneIsTaken) {
  MockDevice no_addmm("vulkan", 0, DeviceType::discrete_gpu), cpu("cpu", 0, DeviceType::cpu, 100);
  give_ops(no_addmm);
  no_addmm.remove(OpId::addmm);  // every op but addmm
  give_ops(cpu);
  EXPECT_TRUE(runs_every_op(no_addmm));
  EXPECT_EQ(pick_auto({&cpu, &no_addmm}), &no_addmm);
  MockDevice a("a", 0, DeviceType::cpu, 1), b("b", 0, DeviceType::discrete_gpu, 1);
  give_ops(a, 5);
  give_ops(b, 3);
  const AutoChoice c = choose_auto({&a, &b}, false);
  EXPECT_EQ(c.device, &b);
  EXPECT_THAT(c.reason, HasSubstr("no device implements every op"));
}

TEST(Resolve, AutoFollowsTheFallbackSetting) {
  MockDevice cpu("cpu", 0, DeviceType::cpu, 100), partial("outoftree", 0, DeviceType::discrete_gpu);
  give_ops(cpu);
  give_ops(partial, 3);
  EXPECT_EQ(&resolve_device({{"auto", std::nullopt}}, {&partial, &cpu}, {}, "s"), &cpu);
  EXPECT_EQ(&resolve_device({{"auto", std::nullopt}}, {&partial, &cpu}, {}, "s", true), &partial);
}
