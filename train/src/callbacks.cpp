#include "tessera/train/callbacks.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "parse.h"
#include "tessera/errors.h"
#include "tessera/file.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const auto total = static_cast<long>(s + 0.5);
  if (total >= 3600)
    return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{:02}:{:02}", total / 60, total % 60);
}

std::string percent(double v) {
  return std::isfinite(v) ? fmt::format("{:.2f}%", 100 * v) : "-";
}

std::string csv_number(double v) {
  return std::isfinite(v) ? fmt::format("{:.6g}", v) : "";
}

// Creates directory |dir| when missing and checks that a file can be created in it (a probe file,
// removed again), so that a run learns before training, not after its first epoch, that its
// output can not be written. Throws FileError naming |what| and |dir|.
void require_writable_dir(const fs::path& dir, std::string_view what) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  std::error_code ec;
  if (fs::exists(d, ec) && !fs::is_directory(d, ec))
    throw FileError(fmt::format("{} {}: not a directory; pass a directory (or a path to create)",
                                what, d.string()));
  fs::create_directories(d, ec);
  if (ec)
    throw FileError(
        fmt::format("{} {}: can not create the directory: {}", what, d.string(), ec.message()));
  static std::atomic<unsigned> count{0};
  const fs::path probe =
      d / fmt::format(".tessera-write-probe.{}.{}", ::getpid(), count.fetch_add(1));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw FileError(fmt::format("{} {}: can not write files in this directory: {}", what,
                                d.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

// The same for a file that will be written: its directory, and the path not a directory.
void require_writable_file(const fs::path& path, std::string_view what) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw FileError(
        fmt::format("{} {}: is a directory; pass the path of a file", what, path.string()));
  require_writable_dir(path.parent_path(),
                       fmt::format("{} {}: its directory", what, path.string()));
}

// Whether |a| and |b| name one existing file.
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

ProgressBar::ProgressBar(std::FILE* out) : out_(out), tty_(::isatty(::fileno(out)) != 0) {}

void ProgressBar::on_fit_start(Trainer& t) {
  fmt::print(out_, "Training on {} ({}), {} parameters\n", t.device().id(), t.device().info().name,
             t.model().num_parameters());
  if (t.resumed())
    fmt::print(out_, "Resumed from {} (epoch {} done)\n", t.resumed_from().string(),
               t.progress().epoch);
  if (t.progress().epoch >= t.options().max_epochs)
    fmt::print(out_, "Nothing to train: {} epoch(s) done, max_epochs={} reached\n",
               t.progress().epoch, t.options().max_epochs);
  std::fflush(out_);
}

void ProgressBar::on_train_progress(Trainer&, const StepProgress& p) {
  const double rate = static_cast<double>(p.samples) / std::max(p.seconds, 1e-9);
  const double left =
      p.seconds / static_cast<double>(p.batch) * static_cast<double>(p.num_batches - p.batch);
  if (tty_) {
    constexpr int kWidth = 30;
    const auto filled =
        static_cast<int>(kWidth * p.batch / std::max<std::int64_t>(p.num_batches, 1));
    fmt::print(out_, "\rEpoch {}/{} [{}{}] {}/{} loss {:.4f} | {:.0f} samples/s | {} left\x1b[K",
               p.epoch, p.max_epochs, std::string(static_cast<std::size_t>(filled), '='),
               std::string(static_cast<std::size_t>(kWidth - filled), ' '), p.batch, p.num_batches,
               p.loss, rate, duration(left));
    std::fflush(out_);
    return;
  }
  const std::int64_t decile = 10 * p.batch / std::max<std::int64_t>(p.num_batches, 1);
  if (decile == last_decile_ || p.batch == p.num_batches) return;
  last_decile_ = decile;
  fmt::print(out_, "epoch {}/{} batch {}/{} loss {:.4f} {:.0f} samples/s {} left\n", p.epoch,
             p.max_epochs, p.batch, p.num_batches, p.loss, rate, duration(left));
  std::fflush(out_);
}

void ProgressBar::on_epoch_end(Trainer&, const EpochMetrics& m) {
  last_decile_ = -1;
  if (tty_) fmt::print(out_, "\r\x1b[K");
  fmt::print(out_,
             "epoch {}: train loss {:.4f} accuracy {} | test loss {:.4f} accuracy {} | {:.1f} s, "
             "{:.0f} samples/s\n",
             m.epoch, m.train_loss, percent(m.train_accuracy), m.test_loss,
             percent(m.test_accuracy), m.seconds, m.samples_per_second);
  std::fflush(out_);
}

CsvLogger::CsvLogger(fs::path path) : path_(std::move(path)) {
  require_writable_file(path_, "metrics file");
}

void CsvLogger::on_epoch_end(Trainer& t, const EpochMetrics&) {
  std::string s =
      "epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,samples_per_second\n";
  for (const EpochMetrics& m : t.progress().history)
    s += fmt::format("{},{},{},{},{},{},{}\n", m.epoch, csv_number(m.train_loss),
                     csv_number(m.train_accuracy), csv_number(m.test_loss),
                     csv_number(m.test_accuracy), csv_number(m.seconds),
                     csv_number(m.samples_per_second));
  write_file_atomic(path_, s);
}

ModelCheckpoint::ModelCheckpoint(fs::path dir) : dir_(std::move(dir)) {
  require_writable_dir(dir_, "checkpoint directory");
}

void ModelCheckpoint::on_fit_start(Trainer& t) {
  if (!t.resumed()) return;
  // The one name this fit could write that is the checkpoint it resumed from is that file's own
  // name, when it is epoch-N.safetensors for an epoch N this fit will train.
  const fs::path& from = t.resumed_from();
  const std::string name = from.filename().string();
  const std::optional<std::string_view> digits = checkpoint_name_digits(name);
  if (!digits) return;
  const auto n = detail::parse_integer<int>(*digits);
  if (!n || checkpoint_name(*n) != name || *n <= t.progress().epoch ||
      *n > t.options().max_epochs || !same_file(dir_ / name, from))
    return;
  throw FileError(fmt::format(
      "{}: this run resumes from it, but it holds epoch {} while its name says epoch {}; "
      "training on would write epoch {}'s checkpoint over it. Rename the file to {}, or write "
      "checkpoints to another directory",
      from.string(), t.progress().epoch, *n, *n, checkpoint_name(t.progress().epoch)));
}

void ModelCheckpoint::on_epoch_end(Trainer& t, const EpochMetrics& m) {
  const fs::path path = dir_ / checkpoint_name(m.epoch);
  // Never over the checkpoint the run resumed from (on_fit_start refuses such a fit up front).
  if (t.resumed() && same_file(path, t.resumed_from()))
    throw FileError(
        fmt::format("{}: not writing epoch {}'s checkpoint over the checkpoint this "
                    "run resumed from",
                    path.string(), m.epoch));
  save_checkpoint(path, t.model(), t.optimizer(), t.progress());
}

namespace {

// Runs gnuplot with |script| on stdin; returns its exit status (-1 when it could not start) and
// puts what it printed in |log|.
int run_gnuplot(const std::string& script, std::string* log = nullptr) {
  const fs::path out =
      fs::temp_directory_path() / fmt::format("tessera-gnuplot-{}.log", ::getpid());
  std::FILE* p = ::popen(fmt::format("gnuplot >'{}' 2>&1", out.string()).c_str(), "w");
  if (!p) return -1;
  std::fwrite(script.data(), 1, script.size(), p);
  const int status = ::pclose(p);
  if (log) {
    std::ifstream in(out);
    log->assign(std::istreambuf_iterator<char>(in), {});
  }
  std::error_code ec;
  fs::remove(out, ec);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

LossPlot::LossPlot(fs::path path) : path_(std::move(path)) {
  const std::string ext = path_.extension().string();
  if (ext == ".png")
    terminal_ = "pngcairo size 1000,420";
  else if (ext == ".svg")
    terminal_ = "svg size 1000,420";
  else if (ext == ".pdf")
    terminal_ = "pdfcairo size 10in,4.2in";
  else
    throw ConfigError(
        fmt::format("--plot {}: the image format is taken from the extension; use "
                    ".png, .svg or .pdf",
                    path_.string()));
  require_writable_file(path_, "plot file");
  if (run_gnuplot(fmt::format("set terminal {}\n", terminal_)) != 0)
    throw ConfigError(fmt::format(
        "--plot {} needs gnuplot with the {} terminal, which did not run; install it with "
        "apt-get install gnuplot-nox",
        path_.string(), terminal_.substr(0, terminal_.find(' '))));
}

void LossPlot::on_epoch_end(Trainer& t, const EpochMetrics&) {
  std::string data;
  for (const EpochMetrics& m : t.progress().history)
    data +=
        fmt::format("{} {} {} {} {}\n", m.epoch, csv_number(m.train_loss), csv_number(m.test_loss),
                    csv_number(100 * m.train_accuracy), csv_number(100 * m.test_accuracy));
  replace_file_atomic(path_, [&](const fs::path& tmp) {
    const std::string script = fmt::format(
        "set terminal {}\nset output '{}'\n$d << EOD\n{}EOD\n"
        "set datafile missing ''\nset xrange [0.5:{}]\n"
        "set multiplot layout 1,2 title 'Tessera on {}'\n"
        "set xlabel 'epoch'\nset xtics 1\nset grid\nset key top right\nset title 'loss'\n"
        "plot $d using 1:2 with linespoints title 'train', $d using 1:3 with linespoints title "
        "'test'\nset title 'accuracy (%)'\nset key bottom right\n"
        "plot $d using 1:4 with linespoints title 'train', $d using 1:5 with linespoints title "
        "'test'\nunset multiplot\nset output\n",
        terminal_, tmp.string(), data, t.progress().history.size() + 0.5, t.device().id());
    std::string log;
    if (run_gnuplot(script, &log) != 0)
      throw FileError(fmt::format("{}: gnuplot failed to draw the plot: {}", path_.string(), log));
  });
}

}  // namespace tessera::train
