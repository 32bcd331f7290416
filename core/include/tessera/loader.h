// PluginLoader: finds, checks and loads plugin shared objects, recording every attempt.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backend.h"

namespace tessera {

// Where an attempt to load a plugin ended.
enum class LoadStage {
  permissions,  // the file, or a directory on the way to it (or to the file a symlink names), is
                // writable by others than its owner and root: refused before loading
  format,       // not a regular file, or not an ELF shared object
  open,         // dlopen failed (a missing dependency, an undefined symbol, wrong architecture)
  entry_point,  // no tessera_plugin_entry symbol, it returned null, or it threw
  abi,          // ABI version, descriptor size, toolchain or name mismatch
  create,       // the plugin's create function failed or threw
  config,       // create said a variable the plugin reads is malformed
                // (TESSERA_PLUGIN_CREATE_CONFIG_ERROR); the runtime then refuses to choose devices
  probe,        // isolated loading: the probe in a child process crashed, exited or hung
  devices,      // loaded, but the backend has no device
  ready,        // loaded with at least one device
};

enum class LoadOutcome { loaded, failed, disabled, shadowed };

std::string_view load_stage_name(LoadStage stage);
std::string_view load_outcome_name(LoadOutcome outcome);

// One attempt, as tessera-devices shows it.
struct PluginRecord {
  std::filesystem::path path;
  std::string name;     // from the file name (libtessera-plugin-NAME.so)
  std::string version;  // from the descriptor, once read
  LoadOutcome outcome = LoadOutcome::failed;
  LoadStage stage = LoadStage::format;
  std::string reason;  // why it failed, or the backend's status note
};

// A loaded plugin: its backend keeps the library loaded for as long as it lives.
struct LoadedPlugin {
  std::string name;
  std::string version;
  std::filesystem::path path;
  std::shared_ptr<Backend> backend;
};

struct LoadResult {
  std::vector<PluginRecord> records;  // every attempt, in search order
  std::vector<LoadedPlugin> plugins;  // loaded plugins (with or without devices), in search order
};

struct LoadOptions {
  // Probe each candidate in a child process (fork) before loading it in this one: a plugin whose
  // probe dies from a signal, exits or does not finish within probe_timeout_s is recorded as
  // failed at LoadStage::probe ("crashed with signal 11 (Segmentation fault) while loading") and
  // is not loaded here. Costs one process start per plugin; meant for tessera-devices --isolate.
  // Only safe while the process has a single thread.
  bool isolate = false;
  int probe_timeout_s = 120;
};

// Loads every libtessera-plugin-*.so of |dirs| in order (files of one directory sorted by name).
// A plugin whose name is in |disabled| is recorded as disabled without being opened; a name that
// was already loaded from an earlier directory is recorded as shadowed. Nothing a plugin does at
// load or create time can throw out of this function (an exception from its entry point or create
// is recorded as the plugin's failure). A plugin that kills the process while it is opened or
// created can not be survived in-process; then one line on stderr names the plugin file and says
// to set TESSERA_DISABLE_PLUGINS=NAME before the process dies from the signal (SIGSEGV, SIGBUS,
// SIGILL, SIGFPE, SIGABRT) as it would have (the previous handlers are restored before the signal
// is raised again, and after each plugin). Not thread-safe; the runtime calls it once.
LoadResult load_plugins(const std::vector<std::filesystem::path>& dirs,
                        const std::vector<std::string>& disabled, const LoadOptions& options = {});

// The built-in plugin directories: <prefix>/lib/tessera/plugins relative to libtessera_core.so,
// and, when the core runs from its build tree, the build tree's plugin directory.
std::vector<std::filesystem::path> builtin_plugin_dirs();

// Why |path| (a plugin file) must not be loaded because others than its owner and root may write
// it or a directory on the way to it; empty when it is safe. Checks, as sudo does for its files,
// the file and every ancestor directory of both the path as given and the path it resolves to
// (symlinks followed), up to the root. Group write counts unless the group is root's or the
// owner's own private group. A sticky directory writable by others (/tmp) is passed only through
// an entry owned by root or by this process's user (nobody else may rename or remove it there). The
// message names the file or directory and the chmod that makes it safe (or, for a sticky
// directory, the entry that belongs to another user).
std::string unsafe_permissions(const std::filesystem::path& path);

}  // namespace tessera
