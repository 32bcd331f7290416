#include "tessera/loader.h"

#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <boost/dll/shared_library.hpp>

#include "tessera/log.h"
#include "tessera/plugin.h"

namespace tessera {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "libtessera-plugin-";
constexpr std::string_view kSuffix = ".so";

bool plugin_file_name(const fs::path& p, std::string& name) {
  const std::string file = p.filename().string();
  if (file.size() <= kPrefix.size() + kSuffix.size() || !file.starts_with(kPrefix) ||
      !file.ends_with(kSuffix))
    return false;
  name = file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
  return true;
}

std::string group_writers(const struct stat& st) {
  if (st.st_mode & S_IWOTH) return "everyone";
  if (!(st.st_mode & S_IWGRP) || st.st_gid == 0) return {};
  const struct group* g = getgrgid(st.st_gid);
  const struct passwd* u = getpwuid(st.st_uid);
  // A user-private group (same name as the owner) adds no other writer.
  if (g && u && std::string_view(g->gr_name) == u->pw_name) return {};
  return fmt::format("group '{}'", g ? g->gr_name : std::to_string(st.st_gid));
}

// Checks the ELF header: "" when |path| is a 64/32-bit ELF shared object, else why not.
std::string elf_problem(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 18> h{};
  if (!in.read(reinterpret_cast<char*>(h.data()), h.size()))
    return "not an ELF shared object (the file is too short)";
  if (h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F')
    return "not an ELF shared object (wrong magic bytes)";
  const unsigned type = h[5] == 1 ? h[16] | (h[17] << 8) : (h[16] << 8) | h[17];
  if (type != 3) return fmt::format("an ELF file but not a shared object (e_type {})", type);
  return {};
}

// Turns dlerror's text into a reason: a missing dependency is named as such.
std::string open_problem(const fs::path& path, const std::string& dl) {
  if (dl.find("cannot open shared object file") != std::string::npos &&
      dl.find(path.filename().string()) != 0 && !dl.starts_with(path.string()))
    return fmt::format("missing dependency: {}", dl);
  if (dl.find("undefined symbol") != std::string::npos)
    return fmt::format("undefined symbol (built against another Tessera or library?): {}", dl);
  return dl.empty() ? "dlopen failed" : dl;
}

struct Attempt {
  PluginRecord record;
  std::optional<LoadedPlugin> plugin;
};

// The one line a fatal signal prints while a plugin is being opened or created, formatted before
// the plugin runs so that the handler only calls write(2), sigaction and raise (async-signal-safe).
constexpr std::array kFatalSignals{SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
std::array<char, 2048> g_hint{};
std::size_t g_hint_size = 0;
std::array<struct sigaction, kFatalSignals.size()> g_previous{};

extern "C" void on_fatal_signal(int sig) {
  if (::write(STDERR_FILENO, g_hint.data(), g_hint_size) < 0) {
    // Nothing else can be done inside a signal handler.
  }
  for (std::size_t i = 0; i < kFatalSignals.size(); ++i) {
    if (kFatalSignals[i] != sig) continue;
    struct sigaction previous = g_previous[i];
    if (previous.sa_handler == SIG_IGN) previous.sa_handler = SIG_DFL;
    ::sigaction(sig, &previous, nullptr);
  }
  // Blocked until this handler returns; then the previous handler (or the default action) runs.
  ::raise(sig);
}

// While alive, a fatal signal names |path| on stderr before the process dies. Restores the
// previous handlers when destroyed.
class CrashHint {
 public:
  CrashHint(const fs::path& path, const std::string& name) {
    const std::string hint = fmt::format(
        "tessera: the process died while loading the plugin {}; set TESSERA_DISABLE_PLUGINS={} to "
        "skip it (tessera-devices --isolate probes each plugin in a child process)\n",
        path.string(), name);
    g_hint_size = std::min(hint.size(), g_hint.size());
    std::memcpy(g_hint.data(), hint.data(), g_hint_size);
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (std::size_t i = 0; i < kFatalSignals.size(); ++i)
      ::sigaction(kFatalSignals[i], &sa, &g_previous[i]);
  }
  ~CrashHint() {
    for (std::size_t i = 0; i < kFatalSignals.size(); ++i)
      ::sigaction(kFatalSignals[i], &g_previous[i], nullptr);
  }
  CrashHint(const CrashHint&) = delete;
  CrashHint& operator=(const CrashHint&) = delete;
};

Attempt load_one(const fs::path& path, const std::string& name, bool hint_on_crash) {
  Attempt a;
  PluginRecord& r = a.record;
  r.path = path;
  r.name = name;
  auto fail = [&](LoadStage stage, std::string reason) {
    r.outcome = LoadOutcome::failed;
    r.stage = stage;
    r.reason = std::move(reason);
    return std::move(a);
  };

  if (std::string why = unsafe_permissions(path); !why.empty())
    return fail(LoadStage::permissions, why);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return fail(LoadStage::format, "not a regular file");
  if (std::string why = elf_problem(path); !why.empty()) return fail(LoadStage::format, why);

  std::optional<CrashHint> hint;
  if (hint_on_crash) hint.emplace(path, name);
  boost::dll::shared_library lib;
  boost::dll::fs::error_code dl_ec;
  dlerror();
  lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, dl_ec);
  if (dl_ec || !lib.is_loaded()) {
    const char* dl = dlerror();
    return fail(LoadStage::open, open_problem(path, dl ? dl : dl_ec.message()));
  }
  if (!lib.has(TESSERA_PLUGIN_ENTRY_SYMBOL))
    return fail(LoadStage::entry_point,
                fmt::format("no entry point: the library does not export {} (define it with "
                            "TESSERA_DEFINE_PLUGIN)",
                            TESSERA_PLUGIN_ENTRY_SYMBOL));
  auto entry = lib.get<const TesseraPluginDescriptor*()>(TESSERA_PLUGIN_ENTRY_SYMBOL);
  const TesseraPluginDescriptor* d = nullptr;
  try {
    d = entry();
  } catch (const std::exception& e) {
    return fail(LoadStage::entry_point,
                fmt::format("the entry point threw (exceptions must not cross it): {}", e.what()));
  } catch (...) {
    return fail(LoadStage::entry_point, "the entry point threw (exceptions must not cross it)");
  }
  if (!d) return fail(LoadStage::entry_point, "the entry point returned no descriptor");
  // abi_version is the first field in every ABI version; nothing else is read before it matches.
  if (d->abi_version != TESSERA_PLUGIN_ABI_VERSION)
    return fail(LoadStage::abi,
                fmt::format("incompatible ABI version (plugin: {}, runtime: {}); rebuild the "
                            "plugin against this Tessera SDK",
                            d->abi_version, TESSERA_PLUGIN_ABI_VERSION));
  if (d->struct_size != sizeof(TesseraPluginDescriptor))
    return fail(LoadStage::abi, fmt::format("descriptor size {} differs from the runtime's {}",
                                            d->struct_size, sizeof(TesseraPluginDescriptor)));
  r.version = d->version ? d->version : "";
  const std::string_view toolchain = d->toolchain ? d->toolchain : "";
  if (toolchain != TESSERA_TOOLCHAIN_FINGERPRINT)
    return fail(LoadStage::abi,
                fmt::format("toolchain mismatch (plugin: '{}', runtime: '{}'); build the plugin "
                            "with the same C++ standard library",
                            toolchain, TESSERA_TOOLCHAIN_FINGERPRINT));
  if (!d->name || name != d->name)
    return fail(LoadStage::abi, fmt::format("the descriptor names the plugin '{}' but the file is "
                                            "named for '{}'",
                                            d->name ? d->name : "", name));
  if (!d->create || !d->destroy)
    return fail(LoadStage::abi, "the descriptor has no create or destroy function");

  void* raw = nullptr;
  std::array<char, 1024> error{};
  int rc = TESSERA_PLUGIN_CREATE_FAILED;
  try {
    rc = d->create(&raw, error.data(), error.size());
  } catch (...) {
    // A plugin that lets an exception out of its C entry point; report it and go on.
    std::snprintf(error.data(), error.size(), "an exception crossed the plugin's entry point");
    rc = TESSERA_PLUGIN_CREATE_FAILED;
  }
  error.back() = '\0';  // the plugin may have filled the buffer without terminating it
  const std::string why = error[0] ? error.data() : "no reason";
  if (rc == TESSERA_PLUGIN_CREATE_CONFIG_ERROR) return fail(LoadStage::config, why);
  if (rc != TESSERA_PLUGIN_CREATE_OK || !raw)
    return fail(LoadStage::create, fmt::format("create failed: {}", why));
  auto library = std::make_shared<boost::dll::shared_library>(std::move(lib));
  std::shared_ptr<Backend> backend(static_cast<Backend*>(raw),
                                   [library, destroy = d->destroy](Backend* b) { destroy(b); });
  std::vector<Device*> devs;
  try {
    devs = backend->devices();
    for (std::size_t i = 0; i < devs.size(); ++i) devs[i]->bind(name, static_cast<int>(i));
    r.reason = backend->status();
  } catch (const std::exception& e) {
    return fail(LoadStage::create, fmt::format("listing devices failed: {}", e.what()));
  } catch (...) {
    return fail(LoadStage::create,
                "listing devices failed: an exception that is not std::exception");
  }
  r.outcome = LoadOutcome::loaded;
  r.stage = devs.empty() ? LoadStage::devices : LoadStage::ready;
  if (devs.empty() && r.reason.empty()) r.reason = "no devices";
  a.plugin = LoadedPlugin{name, r.version, path, std::move(backend)};
  return a;
}

// Loads |path| in a child process that exits at once: "" when the child finished loading (whatever
// the outcome, which the caller then learns in-process), else how the child died.
std::string probe_in_child(const fs::path& path, const std::string& name, int timeout_s) {
  std::fflush(nullptr);  // the child must not write this process's buffered output again
  const pid_t pid = ::fork();
  if (pid < 0) return fmt::format("could not start a probe process: {}", std::strerror(errno));
  if (pid == 0) {
    try {
      (void)load_one(path, name, false);
    } catch (...) {
    }
    ::_exit(0);  // no destructors, atexit handlers or stdio flushes of the plugin's state
  }
  int status = 0;
  const timespec tick{0, 10'000'000};
  for (long waited = 0;; ++waited) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR)
      return fmt::format("lost the probe process: {}", std::strerror(errno));
    if (waited >= static_cast<long>(timeout_s) * 100) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return fmt::format("did not finish loading within {} s in a probe process (killed)",
                         timeout_s);
    }
    ::nanosleep(&tick, nullptr);
  }
  if (WIFSIGNALED(status))
    return fmt::format("crashed with signal {} ({}) while loading, in a probe process; not loaded",
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return fmt::format(
        "ended the process with exit status {} while loading, in a probe process; "
        "not loaded",
        WEXITSTATUS(status));
  return {};
}

}  // namespace

std::string_view load_stage_name(LoadStage stage) {
  switch (stage) {
    case LoadStage::permissions:
      return "permissions";
    case LoadStage::format:
      return "format";
    case LoadStage::open:
      return "open";
    case LoadStage::entry_point:
      return "entry_point";
    case LoadStage::abi:
      return "abi";
    case LoadStage::create:
      return "create";
    case LoadStage::config:
      return "config";
    case LoadStage::probe:
      return "probe";
    case LoadStage::devices:
      return "devices";
    case LoadStage::ready:
      return "ready";
  }
  return "?";
}

std::string_view load_outcome_name(LoadOutcome outcome) {
  switch (outcome) {
    case LoadOutcome::loaded:
      return "loaded";
    case LoadOutcome::failed:
      return "failed";
    case LoadOutcome::disabled:
      return "disabled";
    case LoadOutcome::shadowed:
      return "shadowed";
  }
  return "?";
}

std::string unsafe_permissions(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // the format check reports a missing file
  if (std::string who = group_writers(st); !who.empty())
    return fmt::format("refused: the file is writable by {} (chmod go-w {})", who, path.string());
  std::error_code ec;
  const fs::path given = fs::absolute(path, ec).lexically_normal();
  const fs::path resolved = fs::canonical(path, ec);
  const std::string via = !ec && resolved != given
                              ? fmt::format(" (the plugin resolves to {})", resolved.string())
                              : "";
  // Every directory from the root down to the file's, of the path as given and of the resolved
  // one, with the entry the path takes inside it; stat follows symlinks, so a directory reached
  // through a link is judged by its target.
  struct Step {
    fs::path dir, entry;
  };
  std::vector<Step> steps;
  for (const fs::path& p : {given, ec ? given : resolved})
    for (fs::path entry = p, d = p.parent_path(); !d.empty(); entry = d, d = d.parent_path()) {
      if (std::none_of(steps.begin(), steps.end(),
                       [&](const Step& s) { return s.dir == d && s.entry == entry; }))
        steps.push_back({d, entry});
      if (d == d.root_path()) break;
    }
  for (const Step& step : steps) {
    if (::stat(step.dir.c_str(), &st) != 0) continue;
    const std::string who = group_writers(st);
    if (who.empty()) continue;
    // A sticky directory (/tmp) lets only an entry's owner (or root) rename or remove it: the way
    // through it is safe when the entry taken belongs to root or to this process's user.
    struct stat entry {};
    const bool owned_entry = (st.st_mode & S_ISVTX) && ::lstat(step.entry.c_str(), &entry) == 0 &&
                             (entry.st_uid == 0 || entry.st_uid == ::geteuid());
    if (owned_entry) continue;
    const std::string what =
        step.dir == given.parent_path()
            ? std::string("its directory")
            : fmt::format("the directory {} on the way to it", step.dir.string());
    if (st.st_mode & S_ISVTX)
      return fmt::format(
          "refused: {} is writable by {} (sticky, as /tmp is) and {} in it belongs to another "
          "user, who may replace it{}; move the plugin to a directory only you or root can write",
          what, who, step.entry.string(), via);
    return fmt::format("refused: {} is writable by {}{} (chmod {} {})", what, who, via,
                       (st.st_mode & S_IWOTH) ? "go-w" : "g-w", step.dir.string());
  }
  return {};
}

LoadResult load_plugins(const std::vector<fs::path>& dirs, const std::vector<std::string>& disabled,
                        const LoadOptions& options) {
  LoadResult result;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      log().debug("plugin directory {} does not exist", dir.string());
      continue;
    }
    std::vector<std::pair<fs::path, std::string>> candidates;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::string name;
      if (plugin_file_name(entry.path(), name)) candidates.emplace_back(entry.path(), name);
    }
    std::sort(candidates.begin(), candidates.end());
    for (const auto& [path, name] : candidates) {
      log().debug("plugin candidate {}", path.string());
      if (std::find(disabled.begin(), disabled.end(), name) != disabled.end()) {
        result.records.push_back({path, name, "", LoadOutcome::disabled, LoadStage::format,
                                  "disabled by TESSERA_DISABLE_PLUGINS"});
        continue;
      }
      auto first =
          std::find_if(result.plugins.begin(), result.plugins.end(),
                       [&, &name = name](const LoadedPlugin& p) { return p.name == name; });
      if (first != result.plugins.end()) {
        result.records.push_back({path, name, "", LoadOutcome::shadowed, LoadStage::format,
                                  fmt::format("shadowed by {}", first->path.string())});
        continue;
      }
      if (options.isolate) {
        if (std::string died = probe_in_child(path, name, options.probe_timeout_s); !died.empty()) {
          result.records.push_back(
              {path, name, "", LoadOutcome::failed, LoadStage::probe,
               fmt::format("{}. Set TESSERA_DISABLE_PLUGINS={} to skip it.", died, name)});
          continue;
        }
      }
      Attempt a;
      try {
        a = load_one(path, name, true);
      } catch (const std::exception& e) {
        a.record = {path, name, "", LoadOutcome::failed, LoadStage::open, e.what()};
      }
      log().debug("plugin {}: {} at stage {}{}{}", path.string(),
                  load_outcome_name(a.record.outcome), load_stage_name(a.record.stage),
                  a.record.reason.empty() ? "" : ": ", a.record.reason);
      result.records.push_back(a.record);
      if (a.plugin) result.plugins.push_back(std::move(*a.plugin));
    }
  }
  return result;
}

std::vector<fs::path> builtin_plugin_dirs() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&builtin_plugin_dirs), &info) == 0 || !info.dli_fname)
    return {};
  std::error_code ec;
  fs::path lib = fs::canonical(info.dli_fname, ec);
  if (ec) lib = info.dli_fname;
  // The build tree mirrors the install layout: <lib dir>/tessera/plugins in both.
  return {lib.parent_path() / "tessera" / "plugins"};
}

}  // namespace tessera
