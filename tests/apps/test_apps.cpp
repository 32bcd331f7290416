// tessera-devices and tessera-bench run as a user runs them: exit codes, output, JSON parsed back.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_app.h"
#include "tessera/errors.h"
#include "tessera/op.h"
#include "tessera/runtime.h"
#include "tessera/tensor.h"

using nlohmann::json;
using tessera::testing::Result;
using tessera::testing::run;

namespace {

const json* find(const json& list, const std::string& key, const std::string& value) {
  for (const json& item : list)
    if (item.value(key, "") == value) return &item;
  return nullptr;
}

const std::string kBrokenPath = std::string("TESSERA_PLUGIN_PATH=") + TEST_PLUGIN_DIR;

}  // namespace

TEST(TesseraDevices, JsonListsCpuTheTestPluginsAndEveryBrokenOneWithItsReason) {
  const Result r = run(kBrokenPath, std::string(DEVICES_BIN) + " --json --verbose");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  const json* cpu = find(j["devices"], "id", "cpu:0");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ((*cpu)["type"], "CPU");
  EXPECT_EQ((*cpu)["ops_supported"], (*cpu)["ops_total"]);
  EXPECT_TRUE((*cpu)["missing_ops"].empty());
  EXPECT_GT((*cpu)["memory_total"].get<std::uint64_t>(), 0u);
  const std::pair<const char*, const char*> expected[] = {{"wrongabi", "abi"},
                                                          {"noentry", "entry_point"},
                                                          {"throws", "create"},
                                                          {"notelf", "format"},
                                                          {"missingdep", "open"},
                                                          {"misnamed", "abi"},
                                                          {"entrythrows", "entry_point"},
                                                          {"unterminated", "create"}};
  for (const auto& [name, stage] : expected) {
    const json* p = find(j["plugins"], "name", name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ((*p)["status"], "failed") << name;
    EXPECT_EQ((*p)["stage"], stage) << name;
    EXPECT_FALSE((*p)["reason"].get<std::string>().empty()) << name;
  }
  EXPECT_EQ((*find(j["plugins"], "name", "nodevices"))["reason"], "no test device found");
  EXPECT_EQ(j["default_device"]["id"], "cpu:0");
  EXPECT_TRUE(j["fallback"].empty());
}

TEST(TesseraDevices, TextOutputNamesPluginsDevicesDefaultAndFallback) {
  const Result r = run("TESSERA_FALLBACK=1", DEVICES_BIN);
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& s : {std::string("Plugins (in search order):"), std::string("cpu:0"),
                               std::string("Default device: cpu:0"), std::string("Fallback: cpu:0"),
                               fmt::format("ops {0}/{0}", tessera::kNumOps)})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(TesseraDevices, CheckRunsAMatmulOnEveryDevice) {
  const Result r = run("", std::string(DEVICES_BIN) + " --check --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_FALSE(j["check"].empty());
  for (const json& c : j["check"]) {
    EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
    EXPECT_LT(c["error"].get<double>(), 1e-4);
  }
}

TEST(TesseraDevices, AMisspeltDeviceExitsNonZeroAndListsTheValidOnes) {
  const Result r = run("TESSERA_DEVICE=cpuu", DEVICES_BIN);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown device 'cpuu'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Did you mean 'cpu'?"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Available: cpu:0"), std::string::npos) << r.out;
}

TEST(TesseraDevices, AnUnavailableDeviceExitsNonZeroAndSaysWhy) {
  const Result r = run("TESSERA_DEVICE=vulkan TESSERA_DISABLE_PLUGINS=vulkan",
                       std::string(DEVICES_BIN) + " --json");
  EXPECT_EQ(r.code, 2);
  const json j = json::parse(r.out);
  const std::string msg = j["default_device"]["error"];
  EXPECT_NE(
      msg.find("'vulkan' was requested (TESSERA_DEVICE=vulkan) but can not run on this system"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Available: cpu:0"), std::string::npos) << msg;
}

TEST(TesseraDevices, AMalformedVariableIsReportedWithExitTwo) {
  const Result r = run("TESSERA_FALLBACK=maybe,", DEVICES_BIN);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("TESSERA_FALLBACK='maybe,' is not valid"), std::string::npos) << r.err;
  const Result bad_option = run("", std::string(DEVICES_BIN) + " --no-such-option");
  EXPECT_EQ(bad_option.code, 2);
}

// Exit status as the README gives it: 0 a device works, 1 none does, 2 a bad option, a malformed
// TESSERA_* variable or a requested device that can not run.
TEST(TesseraDevices, ExitsOneWhenNoDeviceWorksAndTwoWhenANamedOneCanNot) {
  const std::string none = "TESSERA_DISABLE_PLUGINS=cpu,vulkan,opencl";
  const Result r = run(none, DEVICES_BIN);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("Default device: none"), std::string::npos) << r.out;
  EXPECT_EQ(run(none + " TESSERA_DEVICE=auto", DEVICES_BIN).code, 1);
  EXPECT_EQ(run(none + " TESSERA_DEVICE=cpu", DEVICES_BIN).code, 2);
  EXPECT_EQ(run("TESSERA_DISABLE_PLUGINS=vulkan,opencl", DEVICES_BIN).code, 0);
}

TEST(TesseraDevices, AnUnknownFallbackNameIsAMalformedVariable) {
  const Result r =
      run("TESSERA_FALLBACK=garbage TESSERA_DISABLE_PLUGINS=vulkan,opencl", DEVICES_BIN);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("TESSERA_FALLBACK='garbage' is not valid: 'garbage' is not a device "
                       "Tessera knows."),
            std::string::npos)
      << r.out;
  // A known name without a device is skipped with a warning, as the user guide says.
  const Result skipped =
      run("TESSERA_FALLBACK=opencl,cpu TESSERA_DISABLE_PLUGINS=vulkan,opencl", DEVICES_BIN);
  EXPECT_EQ(skipped.code, 0) << skipped.out << skipped.err;
  EXPECT_NE(skipped.out.find("Fallback: cpu:0"), std::string::npos) << skipped.out;
}

// A malformed variable of one plugin stops device selection even when another device could run:
// auto once went on to lavapipe with exit 0 when TESSERA_CPU_THREADS was malformed.
TEST(TesseraDevices, AMalformedPluginVariableIsAnErrorWhicheverDeviceItConcerns) {
  const Result r = run("TESSERA_CPU_THREADS=abc", DEVICES_BIN);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("TESSERA_CPU_THREADS='abc' is not a thread count"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("No device is chosen while a variable is malformed"), std::string::npos)
      << r.out;
  const Result j =
      run(std::string("TESSERA_DISABLE_PLUGINS=cpu,vulkan,opencl TESSERA_PLUGIN_PATH=") +
              MISCONFIGURED_PLUGIN_DIR + ":" + TEST_PLUGIN_DIR,
          std::string(DEVICES_BIN) + " --json");
  EXPECT_EQ(j.code, 2) << j.out << j.err;
  const json listing = json::parse(j.out);
  const json* p = find(listing["plugins"], "name", "misconfigured");
  ASSERT_NE(p, nullptr) << j.out;
  EXPECT_EQ((*p)["stage"], "config");
  EXPECT_NE(listing["default_device"]["error"].get<std::string>().find(
                "TESSERA_TEST_LEVEL='eleven' is not valid"),
            std::string::npos)
      << j.out;
  // tessera-train refuses to train, with exit 2, instead of training on another device.
  const Result train = run("TESSERA_CPU_THREADS=99999", std::string(TRAIN_BIN) + " --epochs 1");
  EXPECT_EQ(train.code, 2) << train.out << train.err;
  EXPECT_NE((train.out + train.err).find("TESSERA_CPU_THREADS='99999'"), std::string::npos)
      << train.out << train.err;
}

// A plugin that kills the process while loading: the process names it on stderr as it dies, and
// --isolate probes each plugin in a child process first, so the others are still listed.
TEST(TesseraDevices, APluginThatCrashesWhileLoadingIsNamedAndIsolateSurvivesIt) {
  const std::string path =
      std::string("TESSERA_PLUGIN_PATH=") + CRASHING_PLUGIN_DIR + ":" + TEST_PLUGIN_DIR;
  const std::string env = path + " TESSERA_DISABLE_PLUGINS=vulkan,opencl";
  const Result crashed = run(env, DEVICES_BIN);
  EXPECT_NE(crashed.code, 0);
  EXPECT_NE(crashed.err.find(fmt::format("tessera: the process died while loading the plugin "
                                         "{}/libtessera-plugin-crashes.so; set "
                                         "TESSERA_DISABLE_PLUGINS=crashes to skip it",
                                         CRASHING_PLUGIN_DIR)),
            std::string::npos)
      << crashed.err;

  const Result isolated = run(env, std::string(DEVICES_BIN) + " --isolate --json");
  ASSERT_EQ(isolated.code, 0) << isolated.out << isolated.err;
  const json j = json::parse(isolated.out);
  const json* p = find(j["plugins"], "name", "crashes");
  ASSERT_NE(p, nullptr) << isolated.out;
  EXPECT_EQ((*p)["status"], "failed");
  EXPECT_EQ((*p)["stage"], "probe");
  EXPECT_NE(
      (*p)["reason"].get<std::string>().find(fmt::format("crashed with signal {} (", SIGABRT)),
      std::string::npos)
      << (*p)["reason"];
  EXPECT_NE(find(j["devices"], "id", "cpu:0"), nullptr) << isolated.out;
  EXPECT_NE(find(j["devices"], "id", "good:0"), nullptr) << isolated.out;
  // The way out.
  EXPECT_EQ(run(path + " TESSERA_DISABLE_PLUGINS=vulkan,opencl,crashes", DEVICES_BIN).code, 0);
}

// The CPU plugin's GEMM library and thread count: each choice is honoured and shown, and a
// malformed value fails the plugin with a reason that says what is accepted.
TEST(TesseraDevices, TheCpuGemmLibraryAndThreadCountFollowTheirVariables) {
  const auto cpu_of = [](const std::string& env) {
    const Result r = run(env + " TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                         std::string(DEVICES_BIN) + " --json --verbose");
    EXPECT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    const json* cpu = find(j["devices"], "id", "cpu:0");
    return cpu ? *cpu : json();
  };
  const json openblas = cpu_of("TESSERA_CPU_GEMM=openblas TESSERA_CPU_THREADS=3");
  EXPECT_EQ(openblas["driver"].get<std::string>().rfind("OpenBLAS", 0), 0u) << openblas.dump();
  EXPECT_EQ(openblas["compute_units"], 3);
  EXPECT_EQ(openblas["properties"]["threads"], "3 (TESSERA_CPU_THREADS)");
  // The setup script installs oneDNN (libdnnl2), so auto finds it.
  const json onednn = cpu_of("TESSERA_CPU_GEMM=");
  EXPECT_EQ(onednn["driver"].get<std::string>().rfind("oneDNN", 0), 0u) << onednn.dump();
  EXPECT_NE(onednn["properties"]["gemm kernels"].get<std::string>().find("auto"),
            std::string::npos);

  for (const auto& [env, says] : std::map<std::string, std::string>{
           {"TESSERA_CPU_GEMM=mkl",
            "TESSERA_CPU_GEMM='mkl' is not a GEMM library: give onednn, "
            "openblas or auto"},
           {"TESSERA_CPU_THREADS=0", "TESSERA_CPU_THREADS='0' is not a thread count"},
           {"TESSERA_CPU_THREADS=2x", "TESSERA_CPU_THREADS='2x' is not a thread count"}}) {
    const Result r =
        run(env + " TESSERA_DISABLE_PLUGINS=opencl,vulkan", std::string(DEVICES_BIN) + " --json");
    const json j = json::parse(r.out);
    const json* cpu = find(j["plugins"], "name", "cpu");
    ASSERT_NE(cpu, nullptr) << env;
    EXPECT_EQ((*cpu)["status"], "failed") << env;
    EXPECT_NE((*cpu)["reason"].get<std::string>().find(says), std::string::npos)
        << env << ": " << (*cpu)["reason"];
    const Result named =
        run(env + " TESSERA_DEVICE=cpu TESSERA_DISABLE_PLUGINS=opencl,vulkan", DEVICES_BIN);
    EXPECT_EQ(named.code, 2) << env;
    EXPECT_NE(named.out.find(says), std::string::npos) << env << "\n" << named.out;
  }
}

namespace {

// |variable|=|value| for each malformed value, a variable both GPU plugins read when they load:
// each fails with a reason starting "|variable|='|value|' |says|", and no device is chosen.
void expect_gpu_plugins_refuse(const std::string& variable,
                               std::initializer_list<const char*> values, const std::string& says) {
  for (const std::string value : values) {
    const Result r = run(variable + "=" + value, std::string(DEVICES_BIN) + " --json");
    EXPECT_EQ(r.code, 2) << value << "\n" << r.out << r.err;
    const json j = json::parse(r.out);
    for (const char* name : {"vulkan", "opencl"}) {
      const json* p = find(j["plugins"], "name", name);
      ASSERT_NE(p, nullptr) << name;
      EXPECT_EQ((*p)["stage"], "config") << name << " " << value;
      EXPECT_NE((*p)["reason"].get<std::string>().find(variable + "='" + value + "' " + says),
                std::string::npos)
          << (*p)["reason"];
    }
  }
}

}  // namespace

TEST(TesseraDevices, AMalformedGemmTilesVariableFailsTheGpuPlugins) {
  expect_gpu_plugins_refuse(
      "TESSERA_GEMM_TILES",
      {"abc", "128,128,16,8,8", "128,128,16,8,8,3", "9999999999,1,1,1,1,1", "128,128,16,8,8,2,"},
      "is not TM,TN,TK,WM,WN,BUFFERS");
  const Result ok = run("TESSERA_GEMM_TILES=64,64,16,8,8,1", DEVICES_BIN);
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
}

TEST(TesseraDevices, AMalformedGemmFfmaSwitchFailsTheGpuPlugins) {
  expect_gpu_plugins_refuse("TESSERA_GEMM_FFMA", {"2", "yes", "01", "on"}, "is not 0 or 1");
  for (const char* value : {"0", "1", ""}) {
    const Result ok = run(std::string("TESSERA_GEMM_FFMA=") + value, DEVICES_BIN);
    EXPECT_EQ(ok.code, 0) << value << "\n" << ok.out << ok.err;
  }
}

TEST(TesseraDevices, AMalformedAttentionScratchVariableFailsTheGpuPlugins) {
  expect_gpu_plugins_refuse("TESSERA_ATTENTION_SCRATCH_MIB",
                            {"abc", "-1", "4097", "12MiB", "99999999999999999999"},
                            "is not a number of MiB");
  const Result ok = run("TESSERA_ATTENTION_SCRATCH_MIB=0", DEVICES_BIN);
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
}

namespace {

// A plugin's own switch |variable| (0 or 1, unset for 1) fails |plugin| alone for any other value,
// with the reason, and leaves |other| loaded; 0, 1 and empty keep tessera-devices working.
void expect_switch_fails_plugin_alone(const std::string& variable, const char* plugin,
                                      const char* other) {
  for (const std::string value : {"2", "yes", "01", "on"}) {
    const Result r = run(variable + "=" + value, std::string(DEVICES_BIN) + " --json");
    EXPECT_EQ(r.code, 2) << value << "\n" << r.out << r.err;
    const json j = json::parse(r.out);
    const json* failed = find(j["plugins"], "name", plugin);
    ASSERT_NE(failed, nullptr);
    EXPECT_EQ((*failed)["stage"], "config") << value;
    EXPECT_NE(
        (*failed)["reason"].get<std::string>().find(variable + "='" + value + "' is not 0 or 1"),
        std::string::npos)
        << (*failed)["reason"];
    const json* loaded = find(j["plugins"], "name", other);
    ASSERT_NE(loaded, nullptr);
    EXPECT_NE((*loaded)["stage"], "config") << value;
  }
  for (const char* value : {"0", "1", ""}) {
    const Result ok = run(variable + "=" + value, DEVICES_BIN);
    EXPECT_EQ(ok.code, 0) << value << "\n" << ok.out << ok.err;
  }
}

}  // namespace

TEST(TesseraDevices, AMalformedWgmmaVariableFailsTheOpenclPlugin) {
  expect_switch_fails_plugin_alone("TESSERA_OPENCL_WGMMA", "opencl", "vulkan");
}

TEST(TesseraDevices, AMalformedVulkanPtxVariableFailsTheVulkanPlugin) {
  expect_switch_fails_plugin_alone("TESSERA_VULKAN_PTX", "vulkan", "opencl");
}

// A oneDNN that loads but lacks its entry points: auto falls back to OpenBLAS and says why; naming
// oneDNN fails the plugin with the reason and how to install it.
TEST(TesseraDevices, AnUnusableOneDnnFallsBackToOpenBlasUnlessItWasNamed) {
  const std::string env =
      std::string("LD_LIBRARY_PATH=") + FAKE_ONEDNN_DIR + " TESSERA_DISABLE_PLUGINS=opencl,vulkan";
  const Result r = run(env + " TESSERA_CPU_GEMM=", std::string(DEVICES_BIN) + " --json --verbose");
  ASSERT_EQ(r.code, 0) << r.err;
  const json listing = json::parse(r.out);  // find() points into it
  const json* cpu = find(listing["devices"], "id", "cpu:0");
  ASSERT_NE(cpu, nullptr) << r.out;
  EXPECT_EQ((*cpu)["driver"].get<std::string>().rfind("OpenBLAS", 0), 0u) << cpu->dump();
  EXPECT_NE((*cpu)["properties"]["gemm kernels"].get<std::string>().find(
                "auto: oneDNN not usable (libdnnl.so.2 has no dnnl_sgemm or dnnl_version)"),
            std::string::npos)
      << cpu->dump();

  const Result named = run(env + " TESSERA_CPU_GEMM=onednn", std::string(DEVICES_BIN) + " --json");
  const json named_listing = json::parse(named.out);
  const json* plugin = find(named_listing["plugins"], "name", "cpu");
  ASSERT_NE(plugin, nullptr) << named.out;
  EXPECT_EQ((*plugin)["status"], "failed");
  EXPECT_NE((*plugin)["reason"].get<std::string>().find(
                "TESSERA_CPU_GEMM=onednn, but oneDNN could not be used (libdnnl.so.2 has no "
                "dnnl_sgemm or dnnl_version); install it with apt-get install libdnnl2"),
            std::string::npos)
      << (*plugin)["reason"];
}

TEST(TesseraBench, WritesJsonWithThePeerAndTheDispatchOverhead) {
  const Result r = run("", std::string(BENCH_BIN) + " --devices cpu --sizes 64 96 --repeat 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  int sgemm = 0, dispatch = 0;
  for (const json& res : j["results"]) {
    if (res["case"] == "sgemm") {
      ++sgemm;
      EXPECT_GT(res["gflops"].get<double>(), 0);
      EXPECT_GT(res["ratio"].get<double>(), 0);
      EXPECT_NE(res["peer"].get<std::string>().find("OpenBLAS"), std::string::npos);
    } else if (res["case"] == "dispatch") {
      ++dispatch;
      EXPECT_GT(res["us_per_op"].get<double>(), 0);
    }
  }
  EXPECT_EQ(sgemm, 2);
  EXPECT_EQ(dispatch, 1);
  int add = 0;
  for (const json& res : j["results"])
    if (res["case"] == "add") {
      ++add;
      EXPECT_GT(res["gb_per_s"].get<double>(), 0);
      EXPECT_EQ(res["peer"], "memcpy");
    }
  EXPECT_EQ(add, 1);
  EXPECT_EQ(run("", std::string(BENCH_BIN) + " --devices nosuch").code, 1);
}

// --gemm-shapes: the sgemm case runs the given products (operands stored transposed where asked)
// beside OpenBLAS doing the same; a malformed shape is refused before anything runs.
TEST(TesseraBench, GemmShapesRunTheGivenProductsAndRefuseMalformedOnes) {
  const Result r = run("", std::string(BENCH_BIN) +
                               " --devices cpu --cases sgemm --gemm-shapes 96x40x72:NT 33x64x16:TN"
                               " --repeat 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u) << r.out;
  const json &nt = j["results"][0], &tn = j["results"][1];
  EXPECT_EQ(nt["m"], 96);
  EXPECT_EQ(nt["n"], 40);
  EXPECT_EQ(nt["k"], 72);
  EXPECT_EQ(nt["trans_a"], false);
  EXPECT_EQ(nt["trans_b"], true);
  EXPECT_EQ(tn["m"], 33);
  EXPECT_EQ(tn["trans_a"], true);
  EXPECT_EQ(tn["trans_b"], false);
  for (const json& res : j["results"]) {
    EXPECT_GT(res["gflops"].get<double>(), 0);
    EXPECT_GT(res["ratio"].get<double>(), 0);
  }
  for (const char* bad : {"96x40", "96x40x72:NX", "0x4x4", "1048576x1048576x1"}) {
    const Result e =
        run("", std::string(BENCH_BIN) + " --devices cpu --cases sgemm --gemm-shapes " + bad);
    EXPECT_EQ(e.code, 2) << bad;
    EXPECT_NE(e.err.find(std::string("--gemm-shapes: '") + bad + "'"), std::string::npos) << e.err;
  }
}

// The train case's rounds: each round's samples/s and the CPU time stolen from the VM during it;
// a peer that can not run is an error in the result, not a failed benchmark.
TEST(TesseraBench, TrainRoundsListEachRoundWithItsStolenCpuTime) {
  const Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                       std::string(BENCH_BIN) +
                           " --devices cpu --cases train --models mlp --train-steps 2 --repeat 1"
                           " --rounds 2 --torch-python /bin/false");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u) << r.out;
  const json& res = j["results"][0];
  EXPECT_EQ(res["model"], "mlp");
  EXPECT_GT(res["samples_per_second"].get<double>(), 0);
  ASSERT_EQ(res["rounds_samples_per_second"].size(), 2u);
  ASSERT_EQ(res["rounds_steal_percent"].size(), 2u);
  for (const json& steal : res["rounds_steal_percent"]) {
    ASSERT_TRUE(steal.is_number()) << res.dump();  // /proc/stat is readable on Linux
    EXPECT_GE(steal.get<double>(), 0);
    EXPECT_LE(steal.get<double>(), 100);
  }
  EXPECT_NE(res["peer_error"].get<std::string>().find("failed"), std::string::npos) << res.dump();
}

// The Python with PyTorch that runs the fit case's peer: Debian's python3-torch, which
// scripts/test.sh installs (TESSERA_TEST_TORCH_PYTHON names another).
std::string torch_python() {
  const char* py = std::getenv("TESSERA_TEST_TORCH_PYTHON");
  return py && *py ? py : "/usr/bin/python3";
}

// The fit case runs tessera-train and the PyTorch peer as whole processes: each side's wall
// seconds, each epoch's figures and the final accuracy, and the ratio of the two times.
TEST(TesseraBench, FitRunsTesseraTrainAndThePeerAndReportsTimeToAccuracy) {
  const Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                       std::string(BENCH_BIN) +
                           " --cases fit --models mlp --epochs 1 --devices cpu"
                           " --limit-train-batches 5 --limit-test-batches 2 --torch-python " +
                           torch_python());
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u) << r.out;
  const json& res = j["results"][0];
  EXPECT_EQ(res["case"], "fit");
  EXPECT_EQ(res["device"], "cpu:0");
  EXPECT_EQ(res["model"], "mlp");
  EXPECT_EQ(res["epochs"], 1);
  for (const char* side : {"tessera", "peer"}) {
    SCOPED_TRACE(side);
    ASSERT_TRUE(res.contains(side)) << res.dump();
    const json& s = res[side];
    ASSERT_FALSE(s.contains("error"))
        << s["error"] << "\n(the peer needs Debian's python3-torch: apt-get install python3-torch,"
        << " or run scripts/test.sh)";
    EXPECT_GT(s["seconds"].get<double>(), 0);
    ASSERT_EQ(s["epoch_seconds"].size(), 1u);
    EXPECT_GT(s["epoch_seconds"][0].get<double>(), 0);
    EXPECT_LT(s["epoch_seconds"][0].get<double>(), s["seconds"].get<double>());
    ASSERT_EQ(s["epoch_test_accuracy"].size(), 1u);
    const double accuracy = s["test_accuracy"].get<double>();
    EXPECT_GE(accuracy, 0);
    EXPECT_LE(accuracy, 100);
    EXPECT_EQ(s["epoch_test_accuracy"][0].get<double>(), accuracy);
    EXPECT_GT(s["seconds_outside_training"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(
        s["seconds_outside_training"].get<double>() + s["epoch_seconds"][0].get<double>(),
        s["seconds"].get<double>());
  }
  EXPECT_NE(res["tessera"]["command"].get<std::string>().find("--limit-train-batches 5"),
            std::string::npos);
  EXPECT_NE(res["peer"]["command"].get<std::string>().find("--limit-test-batches 2"),
            std::string::npos);
  EXPECT_NE(res["peer"]["name"].get<std::string>().find("PyTorch"), std::string::npos);
  // The device the run reported is the one asked for.
  EXPECT_TRUE(res["tessera"]["name"].get<std::string>().starts_with("Tessera on cpu:0 ("))
      << res["tessera"]["name"];
  EXPECT_DOUBLE_EQ(res["ratio"].get<double>(),
                   res["peer"]["seconds"].get<double>() / res["tessera"]["seconds"].get<double>());
}

// A side that fails, dies from a signal or hangs is an error in its result, with the command and
// why; the benchmark itself finishes (a hung run is killed at --fit-timeout).
TEST(TesseraBench, AFitRunThatFailsDiesOrHangsIsAnErrorInTheJson) {
  // Both sides fail on missing data and say so.
  Result r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
                 std::string(BENCH_BIN) +
                     " --cases fit --models mlp --epochs 1 --devices cpu --data /nonexistent/fm"
                     " --torch-python " +
                     torch_python());
  ASSERT_EQ(r.code, 0) << r.err;
  json res = json::parse(r.out)["results"][0];
  EXPECT_FALSE(res.contains("ratio")) << res.dump();
  const std::string ours = res["tessera"].value("error", "");
  EXPECT_NE(ours.find("exit status 1"), std::string::npos) << ours;
  EXPECT_NE(ours.find("/nonexistent/fm"), std::string::npos) << ours;
  const std::string theirs = res["peer"].value("error", "");
  EXPECT_NE(theirs.find("/nonexistent/fm"), std::string::npos) << theirs;
  EXPECT_NE(theirs.find("no such file"), std::string::npos) << theirs;

  // tessera-train hangs (killed at the deadline); the peer's Python dies from SIGSEGV.
  const std::string dir = ::testing::TempDir();
  const std::string hang = fmt::format("{}/tessera-fit-hang-{}.sh", dir, ::getpid());
  const std::string crash = fmt::format("{}/tessera-fit-crash-{}.sh", dir, ::getpid());
  std::ofstream(hang) << "#!/bin/sh\nexec sleep 60\n";
  std::ofstream(crash) << "#!/bin/sh\nkill -SEGV $$\n";
  std::filesystem::permissions(hang, std::filesystem::perms::owner_all);
  std::filesystem::permissions(crash, std::filesystem::perms::owner_all);
  r = run("TESSERA_DISABLE_PLUGINS=opencl,vulkan",
          fmt::format("{} --cases fit --models mlp --devices cpu --fit-timeout 0.5 "
                      "--tessera-train {} --torch-python {}",
                      BENCH_BIN, hang, crash));
  ASSERT_EQ(r.code, 0) << r.err;
  res = json::parse(r.out)["results"][0];
  EXPECT_NE(res["tessera"].value("error", "").find("did not finish within 0.5 s"),
            std::string::npos)
      << res.dump();
  EXPECT_NE(res["peer"].value("error", "").find("killed by signal 11"), std::string::npos)
      << res.dump();
  EXPECT_FALSE(res.contains("ratio"));
  std::filesystem::remove(hang);
  std::filesystem::remove(crash);

  EXPECT_EQ(run("", std::string(BENCH_BIN) + " --cases fit --fit-timeout 0").code, 2);
  EXPECT_EQ(run("", std::string(BENCH_BIN) + " --cases fit --epochs 0").code, 2);
}

// The runs tessera-bench starts see the environment the user started it with, not the one the
// plugins it loaded edited (the cpu plugin sets OPENBLAS_CORETYPE when it uses OpenBLAS; PoCL's ICD
// rewrote OCL_ICD_FILENAMES, which hid the GPU's OpenCL platform from a child tessera-train).
TEST(TesseraBench, ItsRunsSeeTheEnvironmentItWasStartedWith) {
  const std::string dir = ::testing::TempDir();
  const std::string script = fmt::format("{}/tessera-fit-env-{}.sh", dir, ::getpid());
  const std::string seen = fmt::format("{}/tessera-fit-env-{}.txt", dir, ::getpid());
  std::ofstream(script) << "#!/bin/sh\nenv > " << seen << "\nexit 3\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const Result r =
      run("-u OPENBLAS_CORETYPE TESSERA_CPU_GEMM=openblas TESSERA_DISABLE_PLUGINS=opencl,vulkan "
          "TESSERA_MARK=1",
          fmt::format("{} --cases fit --models mlp --epochs 1 --devices cpu "
                      "--tessera-train {} --torch-python /bin/false",
                      BENCH_BIN, script));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(seen);
  std::stringstream env;
  env << in.rdbuf();
  EXPECT_NE(env.str().find("TESSERA_MARK=1"), std::string::npos) << env.str();
  EXPECT_EQ(env.str().find("OPENBLAS_CORETYPE="), std::string::npos) << env.str();
  std::filesystem::remove(script);
  std::filesystem::remove(seen);
}

TEST(TesseraDevices, ACorruptCompiledCodeCacheIsIgnoredAndRewritten) {
  // The GPU plugins cache pipelines (vulkan) and program binaries (opencl) under
  // TESSERA_CACHE_DIR. Every entry is then overwritten with garbage or cut short: the next run
  // must ignore them (a debug log), compute the same results, and write good entries back.
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("tessera-cache-{}", ::getpid());
  fs::remove_all(dir);
  const std::string env = "TESSERA_CACHE_DIR=" + dir.string();
  const std::string check = std::string(DEVICES_BIN) + " --check --json";
  // The single pipeline cache file of earlier builds (vulkan-VENDOR-DEVICE-UUID-DRIVER.bin, no
  // longer read): the plugin removes it. Its name is the entries' without their key, so it is
  // planted for every device the first run wrote entries for, before a run that must remove it.
  const Result first = run(env, check);
  ASSERT_EQ(first.code, 0) << first.err;
  std::set<std::string> legacy;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.starts_with("vulkan-")) legacy.insert(name.substr(0, name.rfind('-')) + ".bin");
  }
  for (const std::string& name : legacy) std::ofstream(dir / name) << "tessera-vkcache1";
  const Result cleaned = run(env, check);
  ASSERT_EQ(cleaned.code, 0) << cleaned.err;
  for (const std::string& name : legacy)
    EXPECT_FALSE(fs::exists(dir / name)) << name << ", the old single cache file, is still there";
  std::map<std::string, std::uintmax_t> sizes;
  for (const auto& e : fs::directory_iterator(dir)) sizes[e.path().filename()] = e.file_size();
  const json devices = json::parse(first.out)["devices"];
  for (const char* plugin : {"opencl", "vulkan"}) {
    if (!find(devices, "plugin", plugin)) continue;
    bool cached = false;
    for (const auto& [name, size] : sizes) cached |= name.starts_with(plugin);
    EXPECT_TRUE(cached) << "no cache entry written for " << plugin;
  }
  // A run that finds every entry writes none of them again (each is written once, when its
  // pipeline or program is first compiled): their contents and times stay as they were.
  std::map<std::string, fs::file_time_type> times;
  for (const auto& e : fs::directory_iterator(dir))
    times[e.path().filename()] = e.last_write_time();
  const Result again = run(env, check);
  ASSERT_EQ(again.code, 0) << again.err;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    ASSERT_TRUE(times.contains(name)) << name << " is new in the second run";
    EXPECT_EQ(e.last_write_time(), times[name]) << name << " was written again";
    EXPECT_EQ(e.file_size(), sizes[name]) << name;
  }
  int i = 0;
  for (const auto& [name, size] : sizes) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    if (i++ % 2)
      out << "not a cache entry";
    else
      out << std::string(static_cast<std::size_t>(size / 2), '\x7f');
  }
  const Result second = run(env + " TESSERA_LOG_LEVEL=debug", check);
  ASSERT_EQ(second.code, 0) << second.err;
  const json checked = json::parse(second.out);  // outlives the loop over its "check" list
  for (const json& c : checked["check"]) EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
  for (const auto& [name, size] : sizes) {  // rewritten whole: each starts with its magic again
    std::ifstream in(dir / name, std::ios::binary);
    std::string head(23, '\0');
    in.read(head.data(), 23);
    EXPECT_TRUE(head.starts_with("tessera-vkcache2") || head.starts_with("TESSERA-OPENCL-BINARY"))
        << name << " was not rewritten";
  }
  fs::remove_all(dir);
}

// lavapipe binds storage buffers of at most 128 MiB and has 2 GiB: a tensor over the limit was
// refused as "OutOfMemory ... 2.0 GiB free". It is a limit: the error names it, and supports()
// declines a call that would need such a buffer there, so the fallback chain can take the call.
TEST(GpuPlugins, ABufferOverTheLargestTheDeviceBindsIsALimitNotALackOfMemory) {
  constexpr std::int64_t kElements = 40ll << 20;  // 160 MiB of f32
  const tessera::Tensor big =
      tessera::Tensor::empty({kElements}, tessera::DType::f32, &tessera::device("cpu"));
  int limited = 0;
  for (tessera::Device* d : tessera::devices()) {
    if (d->plugin_name() != "vulkan" && d->plugin_name() != "opencl") continue;
    tessera::OpCall call = tessera::make_call(tessera::OpId::relu, {big});
    call.outputs[0] = big;
    try {
      (void)tessera::Tensor::empty({kElements}, tessera::DType::f32, d);
      EXPECT_TRUE(d->supports(call)) << d->id() << " holds the tensor but declines the call";
      continue;  // this device binds buffers this large
    } catch (const tessera::OutOfMemory& e) {
      ADD_FAILURE() << d->id() << ": a limit reported as a lack of memory: " << e.what();
      continue;
    } catch (const tessera::InvalidArgument& e) {
      ++limited;
      EXPECT_NE(std::string(e.what()).find(
                    fmt::format("{} ({}) can not hold a 160.0 MiB buffer: its largest storage "
                                "buffer is ",
                                d->id(), d->info().name)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(d->plugin_name() == "vulkan"
                                               ? "(maxStorageBufferRange)"
                                               : "(CL_DEVICE_MAX_MEM_ALLOC_SIZE)"),
                std::string::npos)
          << e.what();
    }
    const tessera::Support s = d->supports(call);
    EXPECT_FALSE(s) << d->id();
    EXPECT_NE(s.reason.find("a 160.0 MiB tensor is larger than the device's largest buffer"),
              std::string::npos)
        << s.reason;
    call.inputs[0] = call.outputs[0] =
        tessera::Tensor::empty({1024}, tessera::DType::f32, &tessera::device("cpu"));
    EXPECT_TRUE(d->supports(call)) << d->id() << ": " << d->supports(call).reason;
  }
  // CI runs on lavapipe, whose limit is 128 MiB: the case above must have been exercised there.
  if (tessera::is_available("vulkan") &&
      tessera::device("vulkan").info().name.find("llvmpipe") != std::string::npos) {
    EXPECT_GE(limited, 1);
  }
}
