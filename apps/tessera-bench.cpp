// tessera-bench: speed of Tessera's devices beside a peer measured in the same run, as JSON.
//
// Cases:
//   sgemm     C = A B at square sizes (--sizes), or C = op(A) op(B) at the shapes of
//             --gemm-shapes (a model's products: MxNxK, with :NT, :TN or :TT for operands stored
//             transposed, as a Linear's weight or a weight gradient's), on each device, in
//             --dtype (f32; f16 or bf16: inputs and output in that dtype, sums in f32). CPU devices
//             run beside OpenBLAS's cblas_sgemm called directly (with the core type the CPU plugin
//             chose; f32 only); GPUs beside PyTorch's torch.matmul on CUDA in the same dtype, TF32
//             off (bench/gpu_peer.py). A GPU run times 10 calls and one synchronize, as the peer
//             does.
//   add       element-wise add of two 2^26-element tensors on GPUs (2^23 on CPU devices) in
//             --dtype, in GB/s of bytes read and written, beside a device-to-device copy:
//             PyTorch's on CUDA for GPUs, memcpy for CPU devices (the ratio is of bandwidths).
//   dispatch  host overhead of one tiny op (add of two 1-element tensors, output allocated), in
//             microseconds per op.
//   train     training steps of the MLP (784-512-512-10) and the CNN of tessera-train at batch
//             128 (forward, cross-entropy, backward, SGD with momentum) on random data, in samples
//             per second, and of the ResNet and the GPT with tessera-train's recipes at
//             --model-size (bench_models.h; images per second, tokens per second for the GPT),
//             beside PyTorch running the same models (bench/train_peer.py, on the CPU
//             for cpu devices and on CUDA for GPUs; skipped with the reason when PyTorch is not
//             importable by --torch-python). --rounds N alternates N rounds of Tessera's runs
//             and the peer's and reports the median round of each. Each run also records the
//             share of the machine's CPU time the hypervisor took during it (steal_percent, from
//             /proc/stat), which marks the rounds a noisy VM slowed.
//   fit       whole training runs, as a user runs them: tessera-train (found next to
//             tessera-bench, or --tessera-train) for --epochs on each device and model, with its
//             data loading, evaluation each epoch and a checkpoint each epoch, timed as a process
//             from spawn to exit; beside bench/fit_peer.py, the same job in PyTorch (same model,
//             Adam lr 0.001, batch 128, epochs, data and limits; CUDA for GPUs), timed likewise.
//             The ResNet and the GPT run with tessera-train's default recipe for them at
//             --model-size (the peer with the same recipe in PyTorch); the GPT for --max-steps
//             on --text, split as Tessera splits it, and reports its final validation loss
//             (nats per character) instead of a test accuracy.
//             Each side reports its wall seconds (process start to the final test accuracy), each
//             epoch's training seconds and test accuracy, the final test accuracy and the seconds
//             outside the training loops (start, data, evaluation, checkpoints); ratio is
//             the peer's wall seconds over Tessera's. A side that fails, or runs past
//             --fit-timeout (then it is killed), is an error in its result, not a failed benchmark.
//   bmm, layer_norm, attention, embedding_backward, transpose
//             single ops of real networks, forward and backward, beside PyTorch running the
//             same call (bench/ops_peer.py): bench_ops.h says what each measures. --op-size tiny
//             runs them at a few elements.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "tessera/train/text_data.h"
#include "tessera/train/train.h"

#include "bench_models.h"
#include "bench_ops.h"

namespace po = boost::program_options;
using json = nlohmann::ordered_json;
using namespace tessera;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

extern char** environ;

namespace {

// The environment as the user started tessera-bench with it, taken before any plugin loads.
// Children (tessera-train, the PyTorch peers) get this copy, not the live environment, which the
// libraries loaded here edit: on the H100 machine, after the OpenCL drivers loaded,
// OCL_ICD_FILENAMES named PoCL alone (and HWLOC_PLUGINS_PATH was set), so a child tessera-train
// saw no NVIDIA OpenCL platform and its opencl:0 was PoCL; the cpu plugin sets OPENBLAS_CORETYPE.
std::vector<std::string>& start_environment() {
  static std::vector<std::string> env = [] {
    std::vector<std::string> e;
    for (char** v = environ; v && *v; ++v) e.emplace_back(*v);
    return e;
  }();
  return env;
}

// start_environment() as the null-terminated array posix_spawn takes; valid while it is unchanged.
std::vector<char*> spawn_environment() {
  std::vector<char*> env;
  for (std::string& v : start_environment()) env.push_back(v.data());
  env.push_back(nullptr);
  return env;
}

std::vector<char*> argv_of(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median seconds of |repeat| runs of |fn| after one warm-up run; |repeat| 0 times one run alone.
double median_seconds(int repeat, const std::function<void()>& fn) {
  if (repeat == 0) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) t.push_back(median_seconds(0, fn));
  return median(t);
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// OpenBLAS's cblas_sgemm, opened like the CPU plugin opens it (one shared instance per process).
// The peer runs as an application calling OpenBLAS would: with OpenBLAS's own threads, one per
// core. The CPU plugin sets OpenBLAS back to one thread before its own GEMMs (blas.h).
struct OpenBlas {
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
  Sgemm sgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  std::string core;
  OpenBlas() {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    if (auto f = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"))) core = f();
  }
  void use_all_cores() const {
    if (set_num_threads)
      set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
};

std::vector<std::string> split(const std::string& list, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(sep, at), list.size());
    out.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

bool is_gpu(const Device& dev) {
  return dev.info().type != DeviceType::cpu;
}

// Calls per timed run: GPUs queue several, so that one synchronize does not dominate; on CPUs
// small GEMMs are repeated up to about 2^28 multiply-adds (|macs| a call), so that a run is not
// one call's latency (the peer runs the same number).
int calls_per_run(const Device& dev, std::int64_t macs) {
  if (is_gpu(dev)) return 10;
  return static_cast<int>(std::clamp<std::int64_t>((std::int64_t{1} << 28) / macs, 1, 64));
}

// One product of the sgemm case: C [m, n] = op(A) op(B), A stored [k, m] where trans_a, B stored
// [n, k] where trans_b.
struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  // "MxNxK:AB" (A and B each N or T), as --gemm-shapes and bench/gpu_peer.py spell it.
  std::string str() const {
    return fmt::format("{}x{}x{}:{}{}", m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N');
  }
};

// Parses "MxNxK" or "MxNxK:AB". Each extent from 1 to 2^20, and each operand and the output at
// most 2^30 elements (4 GiB in f32); po::error saying what is wrong otherwise.
GemmShape parse_gemm_shape(const std::string& text) {
  const auto bad = [&](std::string_view why) {
    return po::error(
        fmt::format("--gemm-shapes: '{}' {} (MxNxK or MxNxK:AB, A and B each N or T, for instance "
                    "16384x1152x384:NT)",
                    text, why));
  };
  GemmShape g;
  const std::size_t colon = text.find(':');
  const std::string dims = text.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string t = text.substr(colon + 1);
    if (t.size() != 2 || (t[0] != 'N' && t[0] != 'T') || (t[1] != 'N' && t[1] != 'T'))
      throw bad("has transposes that are not two of N and T");
    g.trans_a = t[0] == 'T';
    g.trans_b = t[1] == 'T';
  }
  const std::vector<std::string> parts = split(dims, 'x');
  if (parts.size() != 3) throw bad("is not three extents");
  std::int64_t v[3] = {};
  for (int i = 0; i < 3; ++i) {
    const std::string& p = parts[static_cast<std::size_t>(i)];
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v[i]);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v[i] < 1 ||
        v[i] > (std::int64_t{1} << 20))
      throw bad("has an extent that is not an integer from 1 to 1048576");
  }
  g.m = v[0];
  g.n = v[1];
  g.k = v[2];
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 30;
  if (g.m * g.k > kMaxElements || g.k * g.n > kMaxElements || g.m * g.n > kMaxElements)
    throw bad("has an operand or output of more than 2^30 elements");
  return g;
}

json bench_sgemm(Device& dev, const GemmShape& g, DType dtype, int repeat, OpenBlas& peer,
                 const json& gpu_peer, bool profile, std::mt19937& rng) {
  const auto a = random_vector(static_cast<std::size_t>(g.m * g.k), rng);
  const auto b = random_vector(static_cast<std::size_t>(g.k * g.n), rng);
  const Tensor ta = Tensor::from(a, g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, &dev).to(dtype),
               tb = Tensor::from(b, g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, &dev).to(dtype);
  std::vector<float> out(static_cast<std::size_t>(g.m * g.n));
  const int mi = static_cast<int>(g.m), ni = static_cast<int>(g.n), ki = static_cast<int>(g.k);
  const int calls = calls_per_run(dev, g.m * g.n * g.k);
  auto ours = [&] {
    for (int i = 0; i < calls; ++i) (void)matmul(ta, tb, g.trans_a, g.trans_b);
    dev.queue().synchronize();
  };
  const bool blas_peer = peer.sgemm && !is_gpu(dev) && dtype == DType::f32;
  auto theirs = [&] {
    peer.use_all_cores();
    for (int i = 0; i < calls; ++i)
      peer.sgemm(101, g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, mi, ni, ki, 1.0f, a.data(),
                 g.trans_a ? mi : ki, b.data(), g.trans_b ? ki : ni, 0.0f, out.data(), ni);
  };
  // Interleaved, so that both see the same machine state; the median of each is reported. After
  // each CPU run the threads of that side are let go idle first: OpenBLAS's workers spin for about
  // 2^28 cycles after a call, and would otherwise share the cores with the run that follows.
  auto settle = [&] {
    if (blas_peer) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  ours();
  if (blas_peer) theirs();
  settle();
  std::vector<double> t_ours, t_peer;
  for (int i = 0; i < repeat; ++i) {
    t_ours.push_back(median_seconds(0, ours) / calls);
    settle();
    if (blas_peer) t_peer.push_back(median_seconds(0, theirs) / calls);
    settle();
  }
  const double flop = 2.0 * double(g.m) * double(g.n) * double(g.k);
  const double s = median(t_ours);
  json r{{"case", "sgemm"},
         {"device", dev.id()},
         {"dtype", dtype_name(dtype)},
         {"m", g.m},
         {"n", g.n},
         {"k", g.k},
         {"trans_a", g.trans_a},
         {"trans_b", g.trans_b},
         {"seconds", s},
         {"gflops", flop / s / 1e9}};
  if (dtype == DType::f32)
    r["matmul_precision"] = matmul_precision_name(float32_matmul_precision());
  if (profile)
    r["kernels"] =
        bench::profile_kernels(dev, calls, ours, fmt::format("sgemm {} on {}", g.str(), dev.id()));
  if (is_gpu(dev)) {
    if (gpu_peer.contains("error")) r["peer_error"] = gpu_peer["error"];
    for (const json& p : gpu_peer.value("sgemm", json::array()))
      if (p["shape"] == g.str()) {
        const MatmulPrecision mp = float32_matmul_precision();
        r["peer"] = fmt::format(
            "{} torch.matmul {}, {}, on {}", gpu_peer["peer"].get<std::string>(), dtype_name(dtype),
            dtype != DType::f32 || mp == MatmulPrecision::highest
                ? std::string("TF32 off")
                : fmt::format("float32_matmul_precision {}", matmul_precision_name(mp)),
            gpu_peer["device_name"].get<std::string>());
        r["peer_gflops"] = p["gflops"];
        r["ratio"] = p["seconds"].get<double>() / s;
      }
  } else if (blas_peer) {
    const double ps = median(t_peer);
    r["peer"] = fmt::format("OpenBLAS cblas_sgemm ({})", peer.core);
    r["peer_gflops"] = flop / ps / 1e9;
    r["ratio"] = ps / s;
  } else if (dtype != DType::f32) {
    r["peer_error"] = "OpenBLAS has no f16 or bf16 GEMM: no CPU peer for this dtype";
  }
  return r;
}

json bench_dispatch(Device& dev, int repeat) {
  const Tensor a = Tensor::full({1}, 1.0, DType::f32, &dev);
  const Tensor b = Tensor::full({1}, 2.0, DType::f32, &dev);
  constexpr int kOps = 20000;
  const double s = median_seconds(repeat, [&] {
    for (int i = 0; i < kOps; ++i) (void)add(a, b);
    dev.queue().synchronize();
  });
  return {{"case", "dispatch"},
          {"device", dev.id()},
          {"op", "add [1] + [1]"},
          {"ops", kOps},
          {"us_per_op", s / kOps * 1e6}};
}

// Samples per second of |steps| training steps of |model_name| on |dev|: the MLP and the CNN at
// |batch| with SGD, the real models (bench_models.h) at |size| with their recipes.
json bench_train(Device& dev, const std::string& model_name, std::int64_t batch, int steps,
                 int repeat, const bench::ModelSize& size, DType dtype, bool profile,
                 std::mt19937& rng) {
  namespace tt = tessera::train;
  DeviceGuard guard(dev);
  std::function<Tensor()> step;
  std::int64_t samples = batch;
  json extra;
  if (bench::is_real_model(model_name)) {
    bench::TrainJob job = bench::make_train_job(
        dev, model_name, size, static_cast<std::int64_t>(steps) * (repeat + (profile ? 2 : 1)),
        rng(), bench::Precision(dtype));
    step = std::move(job.step);
    batch = job.batch;
    samples = job.samples_per_step;
    extra = {{"sample", job.sample}, {"model_size", size.name}, {"config", job.config}};
  } else {
    tt::Generator gen(0);
    std::shared_ptr<tt::Sequential> model = tt::make_model(model_name, gen);
    auto opt = std::make_shared<tt::SGD>(model->named_parameters(),
                                         tt::SgdOptions{0.01, 0.9, 0, 0, false});
    const Tensor x = Tensor::from(random_vector(static_cast<std::size_t>(batch * 784), rng),
                                  {batch, 1, 28, 28}, &dev);
    std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
    for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
    const Tensor y = Tensor::from<std::int32_t>(labels, {batch}, &dev);
    // The step the Trainer runs for a classifier: forward, cross-entropy, backward, update.
    step = [model, opt, x, y, precision = bench::Precision(dtype)] {
      const tt::Variable loss = precision.forward_backward(
          [&] { return tt::cross_entropy((*model)(tt::Variable(x)), y); });
      precision.step(*opt);
      opt->zero_grad();
      return loss.value();
    };
  }
  auto run = [&] {
    Tensor last;
    for (int i = 0; i < steps; ++i) last = step();
    (void)last.item();  // waits for the device
  };
  const double s = median_seconds(repeat, run);
  const json kernels =
      profile ? bench::profile_kernels(dev, steps, run,
                                       fmt::format("train {} on {}", model_name, dev.id()))
              : json();
  json r{{"case", "train"},
         {"device", dev.id()},
         {"model", model_name},
         {"batch", batch},
         {"steps", steps},
         {"seconds", s},
         {"samples_per_second", static_cast<double>(samples * steps) / s}};
  if (!extra.is_null()) r.update(extra);
  if (!kernels.is_null()) r["kernels"] = kernels;  // per step
  return r;
}

// The median of |runs| by samples per second.
json median_round(std::vector<json> runs) {
  std::sort(runs.begin(), runs.end(), [](const json& a, const json& b) {
    return a["samples_per_second"].get<double>() < b["samples_per_second"].get<double>();
  });
  return runs[runs.size() / 2];
}

// The value of |key| in each of |runs|, in order.
json each_of(const std::vector<json>& runs, const char* key) {
  json each = json::array();
  for (const json& r : runs) each.push_back(r.value(key, json()));
  return each;
}

// CPU time of the whole machine so far, from the first line of /proc/stat (in clock ticks): all of
// it, and the part the hypervisor gave to other guests ("steal"). ok is false where /proc/stat
// can not be read.
struct CpuTimes {
  double steal = 0, total = 0;
  bool ok = false;
};

CpuTimes cpu_times() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  CpuTimes t;
  double field = 0;
  in >> cpu;
  // user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
  int fields = 0;
  for (; fields < 8 && in >> field; ++fields) t.total += field;
  t.steal = field;
  t.ok = cpu == "cpu" && fields == 8;
  return t;
}

// The share of the machine's CPU time taken from it by the hypervisor since |before|, in percent;
// null where /proc/stat can not be read. On a noisy VM a slow round shows here.
json steal_percent_since(const CpuTimes& before) {
  const CpuTimes now = cpu_times();
  if (!before.ok || !now.ok || now.total <= before.total) return nullptr;
  return std::round(1000 * (now.steal - before.steal) / (now.total - before.total)) / 10;
}

// The train case's result for |model|: the median of Tessera's rounds beside the median of the
// peer's rounds (each round's figure, and the CPU time stolen during it, listed when there are
// several).
json train_result(const std::vector<json>& ours, const std::vector<json>& peer_rounds,
                  const std::string& model) {
  json r = median_round(ours);
  if (ours.size() > 1) {
    r["rounds"] = ours.size();
    r["rounds_samples_per_second"] = each_of(ours, "samples_per_second");
    r["rounds_steal_percent"] = each_of(ours, "steal_percent");
  }
  std::vector<json> theirs;  // this model's result of each round, with the peer's name
  json error;
  for (const json& round : peer_rounds) {
    if (round.contains("error")) {
      error = round["error"];
      continue;
    }
    for (const json& p : round["results"])
      if (p["model"] == model) {
        json named = p;
        named["peer"] = fmt::format("{} on {}", round["peer"].get<std::string>(),
                                    round["device_name"].get<std::string>());
        named["steal_percent"] = round.value("steal_percent", json());
        theirs.push_back(named);
      }
  }
  if (theirs.empty()) {
    r["peer_error"] = error.is_null() ? json("the peer reported no result for " + model) : error;
    return r;
  }
  const json p = median_round(theirs);
  r["peer"] = p["peer"];
  if (p.contains("threads")) r["peer_threads"] = p["threads"];
  if (p.contains("config")) r["peer_config"] = p["config"];  // the size the peer ran
  r["peer_samples_per_second"] = p["samples_per_second"];
  r["peer_steal_percent"] = p["steal_percent"];
  if (theirs.size() > 1) {
    r["peer_rounds_samples_per_second"] = each_of(theirs, "samples_per_second");
    r["peer_rounds_steal_percent"] = each_of(theirs, "steal_percent");
  }
  r["ratio"] = r["samples_per_second"].get<double>() / p["samples_per_second"].get<double>();
  return r;
}

// The command line of |argv| as a user would type it (arguments with spaces quoted).
std::string command_line(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv)
    cmd += (cmd.empty() ? "" : " ") +
           (a.find_first_of(" \t'\"") == std::string::npos ? a : "'" + a + "'");
  return cmd;
}

// Runs a PyTorch peer script with |args| (stdout and stderr read through one pipe, the start
// environment); its JSON, or {"error": why}.
json run_peer(const std::string& python, const std::string& script,
              const std::vector<std::string>& args) {
  std::vector<std::string> argv{python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string cmd = command_line(argv);
  std::string out;
  int status = -1;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) == 0) {
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&files, fds[1], 1);
    posix_spawn_file_actions_adddup2(&files, fds[1], 2);
    std::vector<char*> cargs = argv_of(argv), env = spawn_environment();
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, cargs[0], &files, nullptr, cargs.data(), env.data());
    posix_spawn_file_actions_destroy(&files);
    ::close(fds[1]);
    if (rc == 0) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        out.append(buf, static_cast<std::size_t>(n));
      }
      int raw = 0;
      while (waitpid(pid, &raw, 0) < 0 && errno == EINTR) {
      }
      status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    } else {
      out = fmt::format("can not start it: {}", std::strerror(rc));
    }
    ::close(fds[0]);
    if (status == 0) {
      try {
        return json::parse(out.substr(out.find('{')));
      } catch (const std::exception&) {
      }
    }
  }
  // The last line it printed says why (Python's exception, usually).
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return {{"error", fmt::format("`{}` failed (exit status {}): {}", cmd, status,
                                out.substr(out.rfind('\n') + 1))}};
}

// share/tessera/bench next to an installed binary, else the source tree's bench/.
std::string default_peer_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share/tessera/bench";
    if (std::filesystem::exists(installed / "train_peer.py", ec)) return installed.string();
  }
  return TESSERA_BENCH_DIR;
}

constexpr std::int64_t kAddElementsGpu = std::int64_t{1} << 26;
constexpr std::int64_t kAddElementsCpu = std::int64_t{1} << 23;

// y = a + b over contiguous tensors in |dtype|: bytes read and written per second, beside a copy
// (PyTorch's device-to-device copy for GPUs, memcpy for CPU devices; the ratio is of bandwidths,
// so it compares across dtypes).
json bench_add(Device& dev, int repeat, const json& gpu_peer, DType dtype) {
  const std::int64_t n = is_gpu(dev) ? kAddElementsGpu : kAddElementsCpu;
  const Tensor a = Tensor::full({n}, 1.5, dtype, &dev);
  const Tensor b = Tensor::full({n}, 2.5, dtype, &dev);
  const int calls = is_gpu(dev) ? 10 : 1;
  const double s = median_seconds(repeat,
                                  [&] {
                                    for (int i = 0; i < calls; ++i) (void)add(a, b);
                                    dev.queue().synchronize();
                                  }) /
                   calls;
  const double bytes = 3.0 * static_cast<double>(dtype_size(dtype)) * static_cast<double>(n);
  json r{{"case", "add"}, {"device", dev.id()}, {"dtype", dtype_name(dtype)},
         {"elements", n}, {"seconds", s},       {"gb_per_s", bytes / s / 1e9}};
  if (is_gpu(dev)) {
    if (gpu_peer.contains("error")) r["peer_error"] = gpu_peer["error"];
    if (gpu_peer.contains("copy")) {
      r["peer"] = fmt::format("{} device-to-device copy on {}", gpu_peer["peer"].get<std::string>(),
                              gpu_peer["device_name"].get<std::string>());
      r["peer_gb_per_s"] = gpu_peer["copy"]["gb_per_s"];
      r["peer_add_gb_per_s"] = gpu_peer["add"]["gb_per_s"];
      r["ratio"] = r["gb_per_s"].get<double>() / gpu_peer["copy"]["gb_per_s"].get<double>();
    }
  } else {
    std::vector<float> src(static_cast<std::size_t>(n), 1.0f), dst(src.size());
    const double ps = median_seconds(
        repeat, [&] { std::memcpy(dst.data(), src.data(), src.size() * sizeof(float)); });
    r["peer"] = "memcpy";
    r["peer_gb_per_s"] = 8.0 * static_cast<double>(n) / ps / 1e9;
    r["ratio"] = r["gb_per_s"].get<double>() / r["peer_gb_per_s"].get<double>();
  }
  return r;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

// The models of the train and fit cases: tessera::train::make_model's names, which the fit case
// passes to tessera-train --model and to bench/fit_peer.py (train_peer.py's MODELS). A model
// added to both is added here.
constexpr std::array<std::string_view, 4> kModels{"mlp", "cnn", "resnet", "gpt"};
constexpr const char* kModelList = "mlp, cnn, resnet, gpt";

// The fit case's settings, the same for both sides.
struct FitOptions {
  int epochs = 10;
  std::string data = train::kDefaultFashionMnistDir;
  std::int64_t limit_train_batches = 0, limit_test_batches = 0;  // 0: all
  double timeout_s = 3600;  // per run; then the run is killed and reported as an error
  std::string tessera_train, python, peer_dir;
  std::string text = train::kDefaultTextCorpus;  // the GPT's corpus
  std::int64_t max_steps = 0;                    // the GPT's steps; 0: the model size's
  const bench::ModelSize* size = nullptr;        // the ResNet's and the GPT's size
  std::int64_t gpt_steps() const { return max_steps > 0 ? max_steps : size->gpt_max_steps; }
  // Validation batches of the GPT: --limit-test-batches, else the model size's.
  std::int64_t gpt_val_batches() const {
    return limit_test_batches > 0 ? limit_test_batches : size->gpt_val_batches;
  }
};
constexpr std::int64_t kFitBatch = 128;
constexpr const char* kFitLr = "0.001";  // Adam's, as tessera-train's default

// A child process run to its exit or to a deadline.
struct ChildRun {
  bool started = false;
  std::string why_not_started;  // strerror of the spawn
  double seconds = 0;           // from just before the spawn to its exit (or to the kill)
  int exit_status = -1;         // when it exited
  int signal = 0;               // the signal that ended it, when one did
  bool timed_out = false;       // killed at the deadline
  std::string out, err;         // what it printed
};

// A test accuracy (a fraction) in percent with two decimals, as tessera-train prints it.
double percent(double fraction) {
  return std::round(fraction * 10000) / 100;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs |argv| (argv[0] looked up in PATH) with stdin from /dev/null and stdout and stderr into
// |dir|/|name|.out and .err until it exits or |timeout_s| seconds pass; then it is killed
// (SIGKILL) and reaped, so that a hung run can not hang the benchmark. The child's failures are
// in the result; nothing is thrown. Not thread-safe (waits for its own child only).
ChildRun run_child(const std::vector<std::string>& argv, double timeout_s, const fs::path& dir,
                   const std::string& name) {
  ChildRun r;
  const fs::path out = dir / (name + ".out"), err = dir / (name + ".err");
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args = argv_of(argv), env = spawn_environment();
  pid_t pid = -1;
  const auto t0 = Clock::now();
  const int rc = posix_spawnp(&pid, args[0], &files, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) {
    r.why_not_started = std::strerror(rc);
    return r;
  }
  r.started = true;
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      r.why_not_started = fmt::format("waitpid: {}", std::strerror(errno));
      r.started = false;
      return r;
    }
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const std::size_t at = text.rfind('\n');
  return text.empty() ? "(nothing)" : text.substr(at == std::string::npos ? 0 : at + 1);
}

// Why |r| is not a success (the command, and its exit status, signal or deadline, and the last
// line it printed); empty when it exited with status 0.
std::string failure(const ChildRun& r, const std::string& cmd, double timeout_s) {
  if (!r.started) return fmt::format("`{}` could not be started: {}", cmd, r.why_not_started);
  const std::string said = last_line(r.err.empty() ? r.out : r.err);
  if (r.timed_out)
    return fmt::format(
        "`{}` did not finish within {} s (--fit-timeout) and was killed; its last output: {}", cmd,
        timeout_s, said);
  if (r.signal)
    return fmt::format("`{}` was killed by signal {} ({}) after {:.1f} s; its last output: {}", cmd,
                       r.signal, strsignal(r.signal), r.seconds, said);
  if (r.exit_status != 0)
    return fmt::format("`{}` failed (exit status {}): {}", cmd, r.exit_status, said);
  return {};
}

// One side of a fit result: its command, wall seconds and the CPU time stolen meanwhile, and
// "error" when it did not succeed.
json fit_side(const ChildRun& run, const std::string& cmd, const FitOptions& o,
              const CpuTimes& before) {
  json side{{"command", cmd}};
  if (run.started) side["seconds"] = run.seconds;
  side["steal_percent"] = steal_percent_since(before);
  if (std::string why = failure(run, cmd, o.timeout_s); !why.empty()) side["error"] = why;
  return side;
}

// The side's wall seconds outside its epochs' training loops (process start, data loading,
// evaluations, checkpoints, exit) into |side|, which has "seconds" and "epoch_seconds".
void add_seconds_outside_training(json& side) {
  double training = 0;
  for (const json& s : side["epoch_seconds"]) training += s.get<double>();
  side["seconds_outside_training"] = side["seconds"].get<double>() - training;
}

// A CSV file as tessera-train writes its metrics: the header's names and each row's cells.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  // The index of column |name|; header.size() when there is none.
  std::size_t column(std::string_view name) const {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  }
};

Csv read_csv(const fs::path& path) {
  std::ifstream in(path);
  Csv csv;
  std::string line;
  if (std::getline(in, line)) csv.header = split(line, ',');
  while (std::getline(in, line)) csv.rows.push_back(split(line, ','));
  return csv;
}

// Each epoch's training seconds and test accuracy (percent) from tessera-train's metrics CSV
// into |side|; an "error" naming the file when it is missing, malformed or short of |epochs|.
void read_fit_metrics(const fs::path& csv, int epochs, json& side) {
  const Csv table = read_csv(csv);
  const std::size_t sec = table.column("seconds"), acc = table.column("val_acc");
  json seconds = json::array(), accuracy = json::array();
  try {
    for (const auto& cells : table.rows) {
      if (sec >= cells.size() || acc >= cells.size())
        throw std::invalid_argument("a row without the seconds and val_acc columns");
      seconds.push_back(std::stod(cells[sec]));
      accuracy.push_back(percent(std::stod(cells[acc])));
    }
  } catch (const std::exception& e) {
    side["error"] =
        fmt::format("tessera-train's metrics {} can not be read: {}", csv.string(), e.what());
    return;
  }
  if (static_cast<int>(seconds.size()) != epochs) {
    side["error"] = fmt::format("tessera-train's metrics {} have {} epoch(s), not {}", csv.string(),
                                seconds.size(), epochs);
    return;
  }
  side["epoch_seconds"] = seconds;
  side["epoch_test_accuracy"] = accuracy;
  side["test_accuracy"] = accuracy.back();
  add_seconds_outside_training(side);
}

// The GPT's validations from tessera-train's metrics CSV (a row per validation and per epoch;
// columns step and val_loss, empty where a row has no validation) into |side|: "validations"
// ({step, val_loss} each), the last "val_loss" and its "steps"; an "error" naming the file when
// it is missing, malformed or holds no validation.
void read_gpt_metrics(const fs::path& csv, json& side) {
  const Csv table = read_csv(csv);
  const std::size_t step = table.column("step"), loss = table.column("val_loss");
  json validations = json::array();
  try {
    if (step >= table.header.size() || loss >= table.header.size())
      throw std::invalid_argument("no step and val_loss columns");
    for (const auto& cells : table.rows) {
      if (loss >= cells.size() || step >= cells.size())
        throw std::invalid_argument("a row shorter than its header");
      if (cells[loss].empty()) continue;
      json v{{"step", std::stoll(cells[step])}, {"val_loss", std::stod(cells[loss])}};
      if (validations.empty() || validations.back()["step"] != v["step"])
        validations.push_back(std::move(v));
    }
    if (validations.empty()) throw std::invalid_argument("no validation");
  } catch (const std::exception& e) {
    side["error"] =
        fmt::format("tessera-train's metrics {} can not be read: {}", csv.string(), e.what());
    return;
  }
  side["steps"] = validations.back()["step"];
  side["validations"] = validations;
  side["val_loss"] = validations.back()["val_loss"];
}

void append(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// The job both sides of the fit case run, as arguments both understand, with a checkpoint
// directory in |dir|. The MLP and the CNN: epochs, Adam's lr, batch, data and limits. The ResNet:
// epochs, its size's depth, width and batch, data and limits (tessera-train's recipe otherwise).
// The GPT: its size's layers, heads, width, context and batch, --max-steps, --val-every,
// --warmup-steps, validation batches and the corpus (tessera-train's recipe otherwise).
std::vector<std::string> fit_job(const std::string& model, const FitOptions& o,
                                 const fs::path& dir) {
  const bench::ModelSize& z = *o.size;
  if (model == "gpt") {
    const std::int64_t steps = o.gpt_steps();
    return {"--model",
            model,
            "--max-steps",
            std::to_string(steps),
            "--val-every",
            std::to_string(std::min(z.gpt_val_every, steps)),
            "--warmup-steps",
            std::to_string(std::min(z.gpt_warmup, steps)),
            "--layers",
            std::to_string(z.gpt_layers),
            "--heads",
            std::to_string(z.gpt_heads),
            "--width",
            std::to_string(z.gpt_width),
            "--context",
            std::to_string(z.gpt_context),
            "--batch-size",
            std::to_string(z.gpt_batch),
            "--limit-test-batches",
            std::to_string(o.gpt_val_batches()),
            "--text",
            o.text,
            "--checkpoint-dir",
            (dir / "checkpoints").string()};
  }
  if (model == "resnet")
    return {"--model",
            model,
            "--epochs",
            std::to_string(o.epochs),
            "--depth",
            std::to_string(z.resnet_depth),
            "--width",
            std::to_string(z.resnet_width),
            "--batch-size",
            std::to_string(z.resnet_batch),
            "--data",
            o.data,
            "--limit-train-batches",
            std::to_string(o.limit_train_batches),
            "--limit-test-batches",
            std::to_string(o.limit_test_batches),
            "--checkpoint-dir",
            (dir / "checkpoints").string()};
  return {"--model",
          model,
          "--epochs",
          std::to_string(o.epochs),
          "--lr",
          kFitLr,
          "--batch-size",
          std::to_string(kFitBatch),
          "--data",
          o.data,
          "--limit-train-batches",
          std::to_string(o.limit_train_batches),
          "--limit-test-batches",
          std::to_string(o.limit_test_batches),
          "--checkpoint-dir",
          (dir / "checkpoints").string()};
}

// tessera-train's whole run of |model| on |dev|, in |dir|.
json fit_tessera(const Device& dev, const std::string& model, const FitOptions& o,
                 const fs::path& dir) {
  std::vector<std::string> argv{o.tessera_train, "--accelerator", dev.id()};
  if (!bench::is_real_model(model)) append(argv, {"--optimizer", "adam"});
  append(argv, fit_job(model, o, dir));
  append(argv, {"--metrics", (dir / "metrics.csv").string(), "-q"});
  const CpuTimes before = cpu_times();
  const ChildRun run = run_child(argv, o.timeout_s, dir, "tessera-train");
  json side = fit_side(run, command_line(argv), o, before);
  if (side.contains("error")) return side;
  // The summary line ends "| mlp on opencl:0 (NVIDIA H100 80GB HBM3)": the device the run used,
  // which must be the one this process knows by that id.
  const std::string summary = last_line(run.out);
  const std::string expected = fmt::format(" on {} ({})", dev.id(), dev.info().name);
  const std::size_t on = summary.rfind(" on ");
  side["name"] = "Tessera" + (on == std::string::npos ? std::string(" (device not reported)")
                                                      : summary.substr(on));
  if (!summary.ends_with(expected)) {
    side["error"] =
        fmt::format("`{}` ran on another device than {} ({}): {}",
                    side["command"].get<std::string>(), dev.id(), dev.info().name, summary);
    return side;
  }
  if (model == "gpt")
    read_gpt_metrics(dir / "metrics.csv", side);
  else
    read_fit_metrics(dir / "metrics.csv", o.epochs, side);
  return side;
}

// fit_peer.py's whole run of |model| on PyTorch's |torch_device|, in |dir|.
json fit_peer(const std::string& torch_device, const std::string& model, const FitOptions& o,
              const fs::path& dir) {
  std::vector<std::string> argv{o.python, o.peer_dir + "/fit_peer.py", "--device", torch_device};
  append(argv, fit_job(model, o, dir));
  const CpuTimes before = cpu_times();
  const ChildRun run = run_child(argv, o.timeout_s, dir, "fit_peer");
  json side = fit_side(run, command_line(argv), o, before);
  if (side.contains("error")) return side;
  try {
    const json p = json::parse(run.out);
    side["name"] = fmt::format("{} on {}", p.at("peer").get<std::string>(),
                               p.at("device_name").get<std::string>());
    side["threads"] = p.at("threads");
    if (model == "gpt") {
      side["steps"] = p.at("steps");
      json evals = json::array();
      for (const json& e : p.at("evals"))
        evals.push_back({{"step", e.at("step")}, {"val_loss", e.at("val_loss")}});
      side["validations"] = evals;
      side["val_loss"] = p.at("val_loss");
      side["train_seconds"] = p.at("train_seconds");
      side["seconds_outside_training"] =
          side["seconds"].get<double>() - p.at("train_seconds").get<double>();
      return side;
    }
    json seconds = json::array(), accuracy = json::array();
    for (const json& e : p.at("epochs")) {
      seconds.push_back(e.at("seconds"));
      accuracy.push_back(percent(e.at("test_accuracy").get<double>()));
    }
    if (static_cast<int>(seconds.size()) != o.epochs)
      throw std::invalid_argument(fmt::format("{} epoch(s), not {}", seconds.size(), o.epochs));
    side["epoch_seconds"] = seconds;
    side["epoch_test_accuracy"] = accuracy;
    side["test_accuracy"] = accuracy.back();
    add_seconds_outside_training(side);
  } catch (const std::exception& e) {
    side["error"] = fmt::format("`{}` printed no usable result ({}): {}",
                                side["command"].get<std::string>(), e.what(), last_line(run.out));
  }
  return side;
}

// A fresh directory for one run's checkpoints, metrics and output (removed by the caller).
fs::path fit_dir(const std::string& side) {
  static int runs = 0;
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("tessera-bench-fit-{}-{}-{}", ::getpid(), ++runs, side);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The fit result of |model| on |dev|: both sides, and the ratio of the peer's wall seconds to
// Tessera's when both succeeded.
json fit_result(const Device& dev, const std::string& model, const FitOptions& o,
                const json& tessera_side, const json& peer_side) {
  const bench::ModelSize& z = *o.size;
  json r{{"case", "fit"}, {"device", dev.id()}, {"model", model}};
  if (model == "gpt") {
    const std::int64_t steps = o.gpt_steps();
    r.update({{"model_size", z.name},
              {"config",
               {{"n_layer", z.gpt_layers},
                {"n_head", z.gpt_heads},
                {"n_embd", z.gpt_width},
                {"block_size", z.gpt_context},
                {"dropout", 0.2}}},
              {"batch", z.gpt_batch},
              {"max_steps", steps},
              {"val_every", std::min(z.gpt_val_every, steps)},
              {"val_batches", o.gpt_val_batches()},
              {"optimizer",
               fmt::format("AdamW lr 0.001 betas (0.9, 0.99), weight_decay 0.1 on rank >= 2 "
                           "parameters, clip 1.0, LinearLR warm-up {} steps then "
                           "CosineAnnealingLR to 0.0001",
                           std::min(z.gpt_warmup, steps))},
              {"text", o.text}});
  } else {
    const bool resnet = model == "resnet";
    if (resnet)
      r.update({{"model_size", z.name},
                {"config", {{"depth", z.resnet_depth}, {"width", z.resnet_width}}}});
    r.update({{"epochs", o.epochs},
              {"batch", resnet ? z.resnet_batch : kFitBatch},
              {"optimizer", resnet ? std::string("SGD lr 0.1 momentum 0.9 nesterov, weight_decay "
                                                 "5e-4, OneCycleLR per step")
                                   : fmt::format("Adam, lr {}", kFitLr)},
              {"data", o.data},
              {"limit_train_batches", o.limit_train_batches},
              {"limit_test_batches", o.limit_test_batches}});
  }
  r.update({{"tessera", tessera_side}, {"peer", peer_side}});
  if (!tessera_side.contains("error") && !peer_side.contains("error"))
    r["ratio"] = peer_side["seconds"].get<double>() / tessera_side["seconds"].get<double>();
  return r;
}

// tessera-train next to this executable, else the one in PATH.
std::string default_tessera_train() {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(exe.parent_path() / "tessera-train", ec))
    return (exe.parent_path() / "tessera-train").string();
  return "tessera-train";
}

}  // namespace

int main(int argc, char** argv) {
  start_environment();  // before any plugin loads
  po::options_description opts("Usage: tessera-bench [options]\n\nOptions");
  std::string device_list, cases, out_file, torch_python = "python3", models = "mlp,cnn";
  std::string op_size = "full", model_size = "full", dtype_text = "f32";
  std::string matmul_precision = "highest";
  std::string peer_dir = default_peer_dir();
  std::vector<std::int64_t> sizes;
  std::vector<std::string> gemm_shape_texts;
  std::vector<GemmShape> gemm_shapes;
  int repeat = 5, train_steps = 20, rounds = 1;
  bool profile = false;
  FitOptions fit;
  fit.tessera_train = default_tessera_train();
  opts.add_options()("help,h", "show this help")(
      "devices", po::value(&device_list)->default_value("all"), "comma list of devices, or all")(
      "cases", po::value(&cases)->default_value("sgemm,add,dispatch"),
      "comma list: sgemm, add, dispatch, train, fit, bmm, layer_norm, attention, "
      "embedding_backward, transpose")(
      "dtype", po::value(&dtype_text)->default_value(dtype_text),
      "sgemm, add and attention cases: f32, f16 or bf16 (inputs and output; sums in f32); train "
      "case: f32, or mixed precision with autocast to f16 (loss scaling) or bf16, the peer "
      "likewise")(
      "matmul-precision", po::value(&matmul_precision)->default_value(matmul_precision),
      "f32 products of the sgemm and train cases: highest, high or medium "
      "(set_float32_matmul_precision), the peer likewise (torch.set_float32_matmul_precision)")(
      "op-size", po::value(&op_size)->default_value(op_size),
      "the op cases' sizes: full (bench_ops.h), or tiny (a few elements, for a smoke test)")(
      "train-steps", po::value(&train_steps)->default_value(train_steps),
      "training steps per timed run of the train case")(
      "models", po::value(&models)->default_value(models),
      fmt::format("comma list of the train and fit cases' models: {}", kModelList).c_str())(
      "model-size", po::value(&model_size)->default_value(model_size),
      fmt::format("the train and fit cases' ResNet and GPT: {} (bench_models.h: full is the "
                  "recipes' size; small suits a CPU; tiny is a smoke test's)",
                  bench::model_size_list())
          .c_str())("text", po::value(&fit.text)->default_value(fit.text),
                    "fit case: the GPT's text corpus (a file or a directory)")(
      "max-steps", po::value(&fit.max_steps)->default_value(0),
      "fit case: the GPT's optimizer steps (0: the model size's, 5000 at full size)")(
      "epochs", po::value(&fit.epochs)->default_value(fit.epochs), "fit case: epochs of each run")(
      "data", po::value(&fit.data)->default_value(fit.data),
      "fit case: directory of the Fashion-MNIST IDX files")(
      "limit-train-batches", po::value(&fit.limit_train_batches)->default_value(0),
      "fit case: train on this many batches per epoch (0: all)")(
      "limit-test-batches", po::value(&fit.limit_test_batches)->default_value(0),
      "fit case: evaluate on this many batches (0: all)")(
      "fit-timeout", po::value(&fit.timeout_s)->default_value(fit.timeout_s),
      "fit case: seconds a run may take before it is killed and reported as an error")(
      "tessera-train", po::value(&fit.tessera_train)->default_value(fit.tessera_train),
      "fit case: the tessera-train executable")(
      "profile", po::bool_switch(&profile),
      "sgemm, train and op cases: one more run with every kernel timed (GPUs: on the device; "
      "cpu: each op); its table goes to stderr and into the result as \"kernels\" (per call or "
      "step)")(
      "rounds", po::value(&rounds)->default_value(rounds),
      "train case: rounds of (Tessera, peer) runs, alternated; the median round is reported")(
      "torch-python", po::value(&torch_python)->default_value(torch_python),
      "the Python that runs the PyTorch peers (train_peer.py, fit_peer.py, gpu_peer.py)")(
      "peer-dir", po::value(&peer_dir)->default_value(peer_dir),
      "the directory of the PyTorch peer scripts")("sizes", po::value(&sizes)->multitoken(),
                                                   "SGEMM sizes (default 512 1024 2048)")(
      "gemm-shapes", po::value(&gemm_shape_texts)->multitoken(),
      "sgemm case: these products instead of the square sizes, each MxNxK or MxNxK:AB (A and B "
      "N, or T for an operand stored transposed: 16384x1152x384:NT is a Linear's forward)")(
      "repeat", po::value(&repeat)->default_value(5),
      "timed runs per case (the median is reported)")("output,o", po::value(&out_file),
                                                      "also write the JSON to this file");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
    if (repeat < 1) throw po::error("--repeat must be at least 1");
    if (rounds < 1) throw po::error("--rounds must be at least 1");
    if (dtype_text != "f32" && dtype_text != "f16" && dtype_text != "bf16")
      throw po::error(fmt::format("--dtype: '{}' is not f32, f16 or bf16", dtype_text));
    if (matmul_precision != "highest" && matmul_precision != "high" && matmul_precision != "medium")
      throw po::error(
          fmt::format("--matmul-precision: '{}' is not highest, high or medium", matmul_precision));
    if (op_size != "full" && op_size != "tiny")
      throw po::error(fmt::format("--op-size: '{}' is not full or tiny", op_size));
    if (fit.epochs < 1) throw po::error("--epochs must be at least 1");
    for (const std::string& t : gemm_shape_texts) gemm_shapes.push_back(parse_gemm_shape(t));
    for (const std::int64_t n : sizes)
      if (n < 1 || n > 32768) throw po::error(fmt::format("--sizes: {} is not from 1 to 32768", n));
    if (fit.max_steps < 0) throw po::error("--max-steps must be 0 (the size's) or more");
    try {
      fit.size = &bench::model_size(model_size);
    } catch (const Error& e) {
      throw po::error(e.what());
    }
    if (fit.limit_train_batches < 0 || fit.limit_test_batches < 0)
      throw po::error("--limit-train-batches and --limit-test-batches must be 0 (all) or more");
    if (!(fit.timeout_s > 0 && fit.timeout_s <= 1e6))
      throw po::error("--fit-timeout must be more than 0 and at most 1000000 seconds");
    for (const std::string& m : split(models, ','))
      if (std::find(kModels.begin(), kModels.end(), m) == kModels.end())
        throw po::error(fmt::format("--models: unknown model '{}' ({})", m, kModelList));
  } catch (const po::error& e) {
    std::cerr << "tessera-bench: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (sizes.empty()) sizes = {512, 1024, 2048};
  if (gemm_shapes.empty())
    for (const std::int64_t n : sizes) gemm_shapes.push_back({n, n, n});
  try {
    std::vector<Device*> targets;
    if (device_list == "all") {
      targets = devices();
    } else {
      for (const DeviceSpec& spec : parse_device_list(device_list, "--devices"))
        targets.push_back(&device(spec.str()));
    }
    const DType dtype = dtype_text == "f16"    ? DType::f16
                        : dtype_text == "bf16" ? DType::bf16
                                               : DType::f32;
    set_float32_matmul_precision(matmul_precision);
    OpenBlas peer;  // opened after the plugins, so it shares the CPU plugin's OpenBLAS
    std::mt19937 rng(std::random_device{}());
    json results = json::array();
    const bool do_sgemm = cases.find("sgemm") != std::string::npos;
    const bool do_dispatch = cases.find("dispatch") != std::string::npos;
    const bool do_train = cases.find("train") != std::string::npos;
    const bool do_add = cases.find("add") != std::string::npos;
    const bool do_fit = cases.find("fit") != std::string::npos;
    fit.python = torch_python;
    fit.peer_dir = peer_dir;
    std::vector<std::string> op_cases;  // the op cases asked for, in bench_ops' order
    for (const std::string& name : bench::op_case_names())
      for (const std::string& c : split(cases, ','))
        if (c == name) op_cases.push_back(name);
    bench::OpCaseOptions op_options;
    op_options.repeat = repeat;
    op_options.tiny = op_size == "tiny";
    op_options.profile = profile;
    op_options.dtype = dtype;
    op_options.run_peer = [&](const std::vector<std::string>& args) {
      return run_peer(torch_python, peer_dir + "/ops_peer.py", args);
    };
    std::map<std::string, json> op_peers;            // by PyTorch device
    std::map<std::string, json> fit_peers;           // by PyTorch device and model
    std::map<std::string, std::vector<json>> peers;  // train peer rounds, by PyTorch device
    json gpu_peer;                                   // run once, when a GPU is measured
    for (Device* d : targets) {
      if (is_gpu(*d) && (do_sgemm || do_add) && gpu_peer.is_null()) {
        std::string shape_list;
        for (const GemmShape& g : gemm_shapes)
          shape_list += fmt::format("{}{}", shape_list.empty() ? "" : ",", g.str());
        gpu_peer = run_peer(torch_python, peer_dir + "/gpu_peer.py",
                            {"--shapes", shape_list, "--elements", std::to_string(kAddElementsGpu),
                             "--repeat", std::to_string(repeat), "--dtype", dtype_text,
                             "--matmul-precision", matmul_precision});
      }
      if (do_sgemm)
        for (const GemmShape& g : gemm_shapes) {
          results.push_back(bench_sgemm(*d, g, dtype, repeat, peer, gpu_peer, profile, rng));
          std::cerr << results.back().dump() << "\n";
        }
      if (do_add) {
        results.push_back(bench_add(*d, repeat, gpu_peer, dtype));
        std::cerr << results.back().dump() << "\n";
      }
      if (do_dispatch) {
        results.push_back(bench_dispatch(*d, repeat));
        std::cerr << results.back().dump() << "\n";
      }
      if (do_train) {
        // Rounds alternate Tessera's runs and the peer's, so that a noisy stretch of the machine
        // hits both; the median round of each side is reported. GPUs of one kind share one peer.
        const std::string torch_device = d->info().type == DeviceType::cpu ? "cpu" : "cuda";
        const bool run_peers = !peers.count(torch_device);
        std::map<std::string, std::vector<json>> ours;
        for (int round = 0; round < rounds; ++round) {
          for (const std::string& model : split(models, ',')) {
            const CpuTimes before = cpu_times();
            json run =
                bench_train(*d, model, 128, train_steps, repeat, *fit.size, dtype, profile, rng);
            run["steal_percent"] = steal_percent_since(before);
            ours[model].push_back(std::move(run));
          }
          if (run_peers) {
            const CpuTimes before = cpu_times();
            std::vector<std::string> args{"--device", torch_device,
                                          "--steps",  std::to_string(train_steps),
                                          "--repeat", std::to_string(repeat),
                                          "--models", models,
                                          "--dtype",  dtype_text};
            append(args, {"--matmul-precision", matmul_precision});
            append(args, bench::train_peer_size_args(*fit.size));
            json run = run_peer(torch_python, peer_dir + "/train_peer.py", args);
            if (run.is_object()) run["steal_percent"] = steal_percent_since(before);
            peers[torch_device].push_back(std::move(run));
          }
        }
        for (const std::string& model : split(models, ',')) {
          results.push_back(train_result(ours[model], peers[torch_device], model));
          std::cerr << results.back().dump() << "\n";
        }
      }
      if (do_fit) {
        // One whole run of each side per model; GPUs of one kind share the peer's run.
        const std::string torch_device = d->info().type == DeviceType::cpu ? "cpu" : "cuda";
        for (const std::string& model : split(models, ',')) {
          const fs::path ours_dir = fit_dir("tessera");
          const json ours = fit_tessera(*d, model, fit, ours_dir);
          fs::remove_all(ours_dir);
          json& theirs = fit_peers[torch_device + "/" + model];
          if (theirs.is_null()) {
            const fs::path peer_dir_run = fit_dir("peer");
            theirs = fit_peer(torch_device, model, fit, peer_dir_run);
            fs::remove_all(peer_dir_run);
          }
          results.push_back(fit_result(*d, model, fit, ours, theirs));
          std::cerr << results.back().dump() << "\n";
        }
      }
      if (!op_cases.empty())
        for (json& r : bench::bench_op_cases(*d, op_cases, op_options, op_peers)) {
          std::cerr << r.dump() << "\n";
          results.push_back(std::move(r));
        }
    }
    std::string cmd;
    for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
    json report{
        {"tessera_version", "0.1.0"},
        {"command", cmd},
        {"machine", {{"cpu", cpu_model()}, {"threads", std::thread::hardware_concurrency()}}},
        {"results", results}};
    std::cout << report.dump(2) << "\n";
    if (!out_file.empty()) {
      const std::string tmp = out_file + ".tmp";
      std::ofstream(tmp) << report.dump(2) << "\n";
      std::rename(tmp.c_str(), out_file.c_str());
    }
  } catch (const std::exception& e) {  // tessera::Error, or a fit run's directory in /tmp
    std::cerr << "tessera-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
