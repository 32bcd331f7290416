// DDPStrategy's start: environment, device choice, the fingerprint check and rank 0's broadcast.
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dist_internal.h"
#include "tessera/checked.h"
#include "tessera/dist/dist.h"
#include "tessera/log.h"
#include "tessera/plugin.h"
#include "tessera/runtime.h"
#include "tessera/train/modules.h"
#include "tessera/train/trainer.h"

namespace tessera::dist {

namespace {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

void DDPStrategy::setup_environment() {
  if (const char* v = std::getenv("TESSERA_CPU_THREADS"); v && *v) return;
  const int threads = std::max(1, usable_cores() / std::max(1, group_->local_size()));
  setenv("TESSERA_CPU_THREADS", std::to_string(threads).c_str(), 0);
}

Device& DDPStrategy::device(const std::string& accelerator, int devices) {
  if (devices < 1)
    throw ConfigError(
        fmt::format("devices={} is not valid: pass a positive number of devices", devices));
  const int local = group_->local_size();
  if (devices != 1 && devices != local)
    throw ConfigError(fmt::format(
        "devices={} with strategy='ddp', but this job was started as {} with {} process(es) on "
        "host {}: one process runs per device, so pass devices={} (or 1, meaning as launched), "
        "or start {} process(es) per machine",
        devices, launch_description(), local, group_->host(), local, devices));
  if (options_.num_nodes > 0) {
    const int hosts = group_->num_hosts();
    if (hosts != options_.num_nodes)
      throw ConfigError(fmt::format(
          "num_nodes={} with strategy='ddp', but this job ({}) runs on {} host(s); pass "
          "num_nodes={}, or start the job on {} machines (a hostfile, or srun -N {})",
          options_.num_nodes, launch_description(), hosts, hosts, options_.num_nodes,
          options_.num_nodes));
  }
  // Errors for unknown or unavailable names, as the single-process Trainer gives them.
  Device& named = train::resolve_accelerator(accelerator, 1);
  if (accelerator.find(':') != std::string::npos) return named;
  // The plugin's devices of its best kind (discrete GPUs before integrated ones, GPUs before a
  // CPU device such as PoCL's or lavapipe's), so that ranks never land on a CPU device while the
  // plugin also drives a GPU.
  const auto rank_of = [](const Device* d) { return static_cast<int>(d->info().type); };
  std::vector<Device*> candidates;
  for (Device* d : tessera::devices())
    if (d->plugin_name() == named.plugin_name()) candidates.push_back(d);
  if (!candidates.empty()) {
    const int best = rank_of(*std::min_element(
        candidates.begin(), candidates.end(),
        [&](const Device* a, const Device* b) { return rank_of(a) < rank_of(b); }));
    std::erase_if(candidates, [&](const Device* d) { return rank_of(d) != best; });
  }
  if (candidates.empty()) return named;
  const std::size_t count = candidates.size();
  if (static_cast<std::size_t>(local) > count && group_->local_rank() == 0) {
    std::vector<std::string> ids;
    for (const Device* d : candidates) ids.push_back(d->id());
    log().warn(
        "{} processes on host {} share {} {} device(s) [{}]: local rank r trains on the "
        "(r % {})-th",
        local, group_->host(), count, named.plugin_name(), fmt::join(ids, ", "), count);
  }
  return *candidates[static_cast<std::size_t>(group_->local_rank()) % count];
}

std::vector<std::string> fingerprint(train::Module& module, const Device& device) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("tessera {} ({}; {})", TESSERA_DIST_VERSION, TESSERA_DIST_BUILD,
                              TESSERA_TOOLCHAIN_FINGERPRINT));
  lines.push_back(fmt::format("device plugin {} ({})", device.plugin_name(),
                              device_type_name(device.info().type)));
  for (const train::NamedParameter& p : module.named_parameters())
    lines.push_back(fmt::format("parameter {} {} {}{}", p.name, p.variable->shape().str(),
                                dtype_name(p.variable->value().dtype()),
                                p.variable->requires_grad() ? "" : " (frozen)"));
  for (const train::NamedBuffer& b : module.named_buffers())
    lines.push_back(fmt::format("buffer {} {} {}", b.name, b.tensor->shape().str(),
                                dtype_name(b.tensor->dtype())));
  return lines;
}

void check_fingerprints(MpiProcessGroup& group, const std::vector<std::string>& mine) {
  std::string joined;
  for (const std::string& line : mine) joined += line + '\n';
  const std::vector<std::string> all = group.all_gather(joined);
  const std::vector<std::string> hosts = group.all_gather(group.host());
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::size_t at = 0;
    for (std::size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1)
      out.push_back(s.substr(at, nl - at));
    return out;
  };
  const std::vector<std::string> ref = split(all[0]);
  std::vector<std::string> differences;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const std::vector<std::string> theirs = split(all[r]);
    std::size_t i = 0;
    while (i < ref.size() && i < theirs.size() && ref[i] == theirs[i]) ++i;
    const std::string a = i < theirs.size() ? "'" + theirs[i] + "'" : "nothing more";
    const std::string b = i < ref.size() ? "'" + ref[i] + "'" : "nothing more";
    differences.push_back(fmt::format("rank {} (host {}) has {} where rank 0 (host {}) has {}", r,
                                      hosts[r], a, hosts[0], b));
  }
  if (differences.empty()) return;
  std::string message = fmt::format(
      "the processes of this job differ from rank 0 in their build, device or model, so they can "
      "not train one model together:");
  for (const std::string& d : differences) message += "\n  " + d;
  throw train::DistributedError(message);
}

void broadcast_tensors(MpiProcessGroup& group, const std::vector<Tensor*>& tensors) {
  std::size_t total = 0;
  for (const Tensor* t : tensors) {
    const auto sum = checked_add(total, t->nbytes());
    if (!sum) throw InvalidArgument("broadcast_tensors: the tensors' bytes overflow");
    total = *sum;
  }
  std::vector<std::byte> bytes(total);
  std::size_t at = 0;
  if (group.rank() == 0)
    for (const Tensor* t : tensors) {
      t->copy_to_host(bytes.data() + at, t->nbytes(), t->dtype());
      at += t->nbytes();
    }
  group.broadcast(bytes, 0);
  if (group.rank() == 0) return;
  at = 0;
  for (Tensor* t : tensors) {
    if (t->is_contiguous())
      t->copy_from_host(bytes.data() + at, t->nbytes());
    else
      *t = Tensor::from_bytes(bytes.data() + at, t->nbytes(), t->shape(), t->dtype(), &t->device());
    at += t->nbytes();
  }
}

}  // namespace tessera::dist
