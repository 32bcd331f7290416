// The loader against deliberately broken plugins: each is reported at the right stage with a
// reason, and the process goes on.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "tessera/loader.h"
#include "tessera/plugin.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const PluginRecord& record(const LoadResult& r, const std::string& name) {
  for (const PluginRecord& rec : r.records)
    if (rec.name == name) return rec;
  throw std::runtime_error("no record for " + name);
}

// A private scratch directory (0755) under the build tree.
fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(TEST_PLUGIN_DIR).parent_path() / "scratch" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  return dir;
}

const fs::path kGood = fs::path(TEST_PLUGIN_DIR) / "libtessera-plugin-good.so";

}  // namespace

class Loader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { result_ = new LoadResult(load_plugins({TEST_PLUGIN_DIR}, {})); }
  static LoadResult* result_;
};
LoadResult* Loader::result_ = nullptr;

TEST_F(Loader, LoadsTheGoodPluginWithItsDevice) {
  const PluginRecord& r = record(*result_, "good");
  EXPECT_EQ(r.outcome, LoadOutcome::loaded);
  EXPECT_EQ(r.stage, LoadStage::ready);
  EXPECT_EQ(r.version, "9.9.9");
  ASSERT_EQ(result_->plugins.size(), 2u);  // good and nodevices
  EXPECT_EQ(result_->plugins[0].backend->devices().at(0)->id(), "good:0");
}

TEST_F(Loader, ReportsAWrongAbiVersion) {
  const PluginRecord& r = record(*result_, "wrongabi");
  EXPECT_EQ(r.outcome, LoadOutcome::failed);
  EXPECT_EQ(r.stage, LoadStage::abi);
  EXPECT_EQ(r.reason, fmt::format("incompatible ABI version (plugin: {}, runtime: {}); rebuild the "
                                  "plugin against this Tessera SDK",
                                  TESSERA_PLUGIN_ABI_VERSION + 1, TESSERA_PLUGIN_ABI_VERSION));
}

TEST_F(Loader, ReportsAMissingEntryPoint) {
  const PluginRecord& r = record(*result_, "noentry");
  EXPECT_EQ(r.stage, LoadStage::entry_point);
  EXPECT_NE(r.reason.find("does not export tessera_plugin_entry"), std::string::npos) << r.reason;
}

TEST_F(Loader, ReportsACreateThatThrew) {
  const PluginRecord& r = record(*result_, "throws");
  EXPECT_EQ(r.stage, LoadStage::create);
  EXPECT_EQ(r.reason, "create failed: boom: the device driver refused to initialise");
}

TEST_F(Loader, ReportsAnEntryPointThatThrewAndGoesOn) {
  const PluginRecord& r = record(*result_, "entrythrows");
  EXPECT_EQ(r.outcome, LoadOutcome::failed);
  EXPECT_EQ(r.stage, LoadStage::entry_point);
  EXPECT_EQ(r.reason,
            "the entry point threw (exceptions must not cross it): the entry point lost its way");
}

TEST_F(Loader, TerminatesAnUnterminatedErrorFromCreate) {
  const PluginRecord& r = record(*result_, "unterminated");
  EXPECT_EQ(r.stage, LoadStage::create);
  // The loader's buffer is 1024 bytes, all 'x': 1023 of them and the NUL the loader wrote.
  EXPECT_EQ(r.reason, "create failed: " + std::string(1023, 'x'));
}

TEST_F(Loader, ReportsAFileThatIsNotElf) {
  const PluginRecord& r = record(*result_, "notelf");
  EXPECT_EQ(r.stage, LoadStage::format);
  EXPECT_NE(r.reason.find("not an ELF shared object"), std::string::npos) << r.reason;
}

TEST_F(Loader, ReportsAMissingDependencyWithTheLoadersMessage) {
  const PluginRecord& r = record(*result_, "missingdep");
  EXPECT_EQ(r.stage, LoadStage::open);
  EXPECT_NE(r.reason.find("missing dependency"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("libtessera_test_dependency.so"), std::string::npos) << r.reason;
}

TEST_F(Loader, ReportsANameMismatch) {
  const PluginRecord& r = record(*result_, "misnamed");
  EXPECT_EQ(r.stage, LoadStage::abi);
  EXPECT_NE(r.reason.find("'another-name'"), std::string::npos) << r.reason;
}

TEST_F(Loader, APluginWithoutDevicesIsLoadedButSaysWhy) {
  const PluginRecord& r = record(*result_, "nodevices");
  EXPECT_EQ(r.outcome, LoadOutcome::loaded);
  EXPECT_EQ(r.stage, LoadStage::devices);
  EXPECT_EQ(r.reason, "no test device found");
}

TEST(LoaderPermissions, RefusesAWorldWritableFile) {
  const fs::path dir = scratch("world-writable-file");
  const fs::path copy = dir / "libtessera-plugin-good.so";
  fs::copy_file(kGood, copy);
  ::chmod(copy.c_str(), 0666);
  const LoadResult r = load_plugins({dir}, {});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].stage, LoadStage::permissions);
  EXPECT_NE(r.records[0].reason.find("writable by everyone"), std::string::npos)
      << r.records[0].reason;
  EXPECT_TRUE(r.plugins.empty());
}

TEST(LoaderPermissions, RefusesAWorldWritableDirectory) {
  const fs::path dir = scratch("world-writable-dir");
  fs::copy_file(kGood, dir / "libtessera-plugin-good.so");
  ::chmod(dir.c_str(), 0777);
  const LoadResult r = load_plugins({dir}, {});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].stage, LoadStage::permissions);
  EXPECT_NE(r.records[0].reason.find("its directory is writable by everyone"), std::string::npos);
}

// A symlink in a safe directory to a plugin in a world-writable one: the file it resolves to is
// judged, with the directory it lies in.
TEST(LoaderPermissions, RefusesASymlinkToAPluginInAWorldWritableDirectory) {
  const fs::path unsafe = scratch("symlink-target");
  fs::copy_file(kGood, unsafe / "libtessera-plugin-good.so");
  ::chmod(unsafe.c_str(), 0777);
  const fs::path safe = scratch("symlink-safe");
  fs::create_symlink(unsafe / "libtessera-plugin-good.so", safe / "libtessera-plugin-good.so");
  const LoadResult r = load_plugins({safe}, {});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].stage, LoadStage::permissions);
  EXPECT_EQ(r.records[0].reason,
            fmt::format("refused: the directory {0} on the way to it is writable by everyone (the "
                        "plugin resolves to {0}/libtessera-plugin-good.so) (chmod go-w {0})",
                        unsafe.string()));
  EXPECT_TRUE(r.plugins.empty());
}

// A safe directory inside a world-writable one: whoever may write the outer one may replace the
// inner one, so every ancestor counts, as sudo checks them for its files.
TEST(LoaderPermissions, RefusesAPluginUnderAWorldWritableAncestor) {
  const fs::path outer = scratch("writable-ancestor");
  const fs::path inner = outer / "safe" / "plugins";
  fs::create_directories(inner);
  fs::permissions(outer / "safe", fs::perms(0755));
  fs::permissions(inner, fs::perms(0755));
  fs::copy_file(kGood, inner / "libtessera-plugin-good.so");
  ::chmod(outer.c_str(), 0777);
  const LoadResult r = load_plugins({inner}, {});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].stage, LoadStage::permissions);
  EXPECT_EQ(r.records[0].reason,
            fmt::format("refused: the directory {0} on the way to it is writable by everyone "
                        "(chmod go-w {0})",
                        outer.string()));
  // Sticky (as /tmp is): others may add entries but not replace ours, so the way through an entry
  // of this user is safe (a clone under /tmp loads its plugins).
  ::chmod(outer.c_str(), 01777);
  const LoadResult sticky = load_plugins({inner}, {});
  ASSERT_EQ(sticky.records.size(), 1u);
  EXPECT_EQ(sticky.records[0].outcome, LoadOutcome::loaded) << sticky.records[0].reason;
  // Only its owner may write it: loaded.
  ::chmod(outer.c_str(), 0755);
  const LoadResult safe = load_plugins({inner}, {});
  EXPECT_EQ(safe.records.at(0).outcome, LoadOutcome::loaded) << safe.records.at(0).reason;
  // Sticky again, through an entry of another user: refused, that user may replace the entry.
  // (Giving an entry to another user takes root.)
  if (::geteuid() != 0) return;
  ::chmod(outer.c_str(), 01777);
  ASSERT_EQ(::chown((outer / "safe").c_str(), 65534, 65534), 0);
  const LoadResult foreign = load_plugins({inner}, {});
  ASSERT_EQ(foreign.records.size(), 1u);
  EXPECT_EQ(foreign.records[0].stage, LoadStage::permissions);
  EXPECT_NE(foreign.records[0].reason.find(
                fmt::format("the directory {} on the way to it is writable by everyone (sticky, "
                            "as /tmp is) and {} in it belongs to another user",
                            outer.string(), (outer / "safe").string())),
            std::string::npos)
      << foreign.records[0].reason;
  ASSERT_EQ(::chown((outer / "safe").c_str(), ::geteuid(), ::getegid()), 0);
}

TEST(LoaderConfig, AMalformedVariableOfAPluginIsItsOwnStage) {
  const LoadResult r = load_plugins({MISCONFIGURED_PLUGIN_DIR}, {});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].outcome, LoadOutcome::failed);
  EXPECT_EQ(r.records[0].stage, LoadStage::config);
  EXPECT_EQ(r.records[0].reason,
            "TESSERA_TEST_LEVEL='eleven' is not valid: give a whole number from 1 to 10");
}

// A plugin that kills the process in create can not be survived in-process, but the process names
// it on stderr before it dies of the same signal.
TEST(LoaderCrashDeathTest, APluginThatAbortsIsNamedOnStderr) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string file = std::string(CRASHING_PLUGIN_DIR) + "/libtessera-plugin-crashes.so";
  EXPECT_EXIT((void)load_plugins({CRASHING_PLUGIN_DIR}, {}), ::testing::KilledBySignal(SIGABRT),
              "tessera: the process died while loading the plugin " + file +
                  "; set TESSERA_DISABLE_PLUGINS=crashes to skip it");
}

TEST(LoaderCrash, IsolatedLoadingReportsTheCrashAndLoadsTheOthers) {
  const LoadResult r =
      load_plugins({CRASHING_PLUGIN_DIR, TEST_PLUGIN_DIR}, {}, LoadOptions{.isolate = true});
  const PluginRecord& crashed = record(r, "crashes");
  EXPECT_EQ(crashed.outcome, LoadOutcome::failed);
  EXPECT_EQ(crashed.stage, LoadStage::probe);
  EXPECT_EQ(crashed.reason, fmt::format("crashed with signal {} ({}) while loading, in a probe "
                                        "process; not loaded. Set TESSERA_DISABLE_PLUGINS=crashes "
                                        "to skip it.",
                                        SIGABRT, strsignal(SIGABRT)));
  EXPECT_EQ(record(r, "good").outcome, LoadOutcome::loaded);
  EXPECT_EQ(record(r, "throws").stage, LoadStage::create);  // a failure in the probe is not a crash
  // The handlers of the process are its own again.
  struct sigaction now {};
  ::sigaction(SIGABRT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(LoaderOrder, TheFirstPluginOfANameWinsAndLaterOnesAreShadowed) {
  const fs::path dir = scratch("second");
  fs::copy_file(kGood, dir / "libtessera-plugin-good.so");
  const LoadResult r = load_plugins({dir, TEST_PLUGIN_DIR}, {});
  const PluginRecord& first = r.records.front();
  EXPECT_EQ(first.path, dir / "libtessera-plugin-good.so");
  EXPECT_EQ(first.outcome, LoadOutcome::loaded);
  auto it = std::find_if(r.records.begin() + 1, r.records.end(),
                         [](const PluginRecord& x) { return x.name == "good"; });
  ASSERT_NE(it, r.records.end());
  const PluginRecord& shadowed = *it;
  EXPECT_EQ(shadowed.outcome, LoadOutcome::shadowed);
  EXPECT_NE(shadowed.reason.find(dir.string()), std::string::npos);
}

TEST(LoaderOrder, DisabledPluginsAreNotOpened) {
  const LoadResult r = load_plugins({TEST_PLUGIN_DIR}, {"good", "throws"});
  EXPECT_EQ(record(r, "good").outcome, LoadOutcome::disabled);
  EXPECT_EQ(record(r, "throws").outcome, LoadOutcome::disabled);
  EXPECT_EQ(r.plugins.size(), 1u);  // nodevices
}

TEST(LoaderOrder, AMissingDirectoryIsSkipped) {
  const LoadResult r = load_plugins({"/nonexistent/tessera/plugins"}, {});
  EXPECT_TRUE(r.records.empty());
}
