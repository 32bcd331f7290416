#include "tessera/train/callbacks.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "callback_files.h"
#include "tessera/errors.h"
#include "tessera/file.h"
#include "tessera/ops.h"

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

}  // namespace

namespace detail {

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

}  // namespace detail

ProgressBar::ProgressBar(std::FILE* out) : out_(out), tty_(::isatty(::fileno(out)) != 0) {}

void ProgressBar::on_fit_start(Trainer& t) {
  fmt::print(out_, "Training on {} ({}), {} parameters\n", t.device().id(), t.device().info().name,
             t.module().num_parameters());
  if (const MatmulPrecision p = float32_matmul_precision(); p != MatmulPrecision::highest)
    fmt::print(out_, "float32 matmul precision: {}\n", matmul_precision_name(p));
  const TrainingProgress& p = t.progress();
  if (t.resumed()) {
    if (p.epoch_batch > 0)
      fmt::print(out_, "Resumed from {} (epoch {}, batch {}, step {})\n", t.resumed_from().string(),
                 p.epoch + 1, p.epoch_batch, p.global_step);
    else
      fmt::print(out_, "Resumed from {} (epoch {} done)\n", t.resumed_from().string(), p.epoch);
  }
  if (t.finished()) {
    if (t.options().max_steps >= 0 && p.global_step >= t.options().max_steps)
      fmt::print(out_, "Nothing to train: {} step(s) done, max_steps={} reached\n", p.global_step,
                 t.options().max_steps);
    else
      fmt::print(out_, "Nothing to train: {} epoch(s) done, max_epochs={} reached\n", p.epoch,
                 t.options().max_epochs);
  }
  std::fflush(out_);
}

namespace {

std::string epochs_of(const StepProgress& p) {
  return p.max_epochs >= 0 ? fmt::format("{}/{}", p.epoch, p.max_epochs)
                           : fmt::format("{}", p.epoch);
}

std::string metric_text(const std::map<std::string, double>& metrics) {
  std::string s;
  for (const auto& [name, v] : metrics) s += fmt::format(" {} {:.4g}", name, v);
  return s;
}

}  // namespace

void ProgressBar::on_train_progress(Trainer&, const StepProgress& p) {
  const double rate = static_cast<double>(p.samples) / std::max(p.seconds, 1e-9);
  const double left =
      p.seconds / static_cast<double>(p.batch) * static_cast<double>(p.num_batches - p.batch);
  const std::string extra = metric_text(p.metrics);
  if (tty_) {
    constexpr int kWidth = 30;
    const auto filled =
        static_cast<int>(kWidth * p.batch / std::max<std::int64_t>(p.num_batches, 1));
    fmt::print(out_,
               "\rEpoch {} [{}{}] {}/{} loss {:.4f}{} lr {:.3g} | {:.0f} samples/s | {} "
               "left\x1b[K",
               epochs_of(p), std::string(static_cast<std::size_t>(filled), '='),
               std::string(static_cast<std::size_t>(kWidth - filled), ' '), p.batch, p.num_batches,
               p.loss, extra, p.lr, rate, duration(left));
    std::fflush(out_);
    return;
  }
  const std::int64_t decile = 10 * p.batch / std::max<std::int64_t>(p.num_batches, 1);
  if (decile == last_decile_ || p.batch == p.num_batches) return;
  last_decile_ = decile;
  fmt::print(out_, "epoch {} batch {}/{} loss {:.4f}{} lr {:.3g} {:.0f} samples/s {} left\n",
             epochs_of(p), p.batch, p.num_batches, p.loss, extra, p.lr, rate, duration(left));
  std::fflush(out_);
}

void ProgressBar::on_validation_end(Trainer& t) {
  if (t.progress().epoch_batch == 0 || t.progress().history.empty()) return;  // at an epoch's end
  const MetricsRow& row = t.progress().history.back();
  if (tty_) fmt::print(out_, "\r\x1b[K");
  fmt::print(out_, "validation at step {}:{}\n", row.step, metric_text(row.metrics));
  std::fflush(out_);
}

void ProgressBar::on_train_epoch_end(Trainer& t) {
  last_decile_ = -1;
  if (t.progress().history.empty()) return;
  const MetricsRow& m = t.progress().history.back();
  if (tty_) fmt::print(out_, "\r\x1b[K");
  std::string figures;
  for (const auto& [name, v] : m.metrics)
    figures += name.find("acc") != std::string::npos ? fmt::format(" {} {}", name, percent(v))
               : name == "skipped_steps"             ? fmt::format(" {} {}", name, std::llround(v))
                                                     : fmt::format(" {} {:.4f}", name, v);
  fmt::print(out_, "epoch {}:{} | lr {:.3g} | {:.1f} s, {:.0f} samples/s\n", m.epoch, figures, m.lr,
             m.seconds, m.samples_per_second);
  std::fflush(out_);
}

CsvLogger::CsvLogger(fs::path path) : path_(std::move(path)) {
  detail::require_writable_file(path_, "metrics file");
}

namespace {

void write_csv(const fs::path& path, const std::vector<MetricsRow>& history) {
  std::set<std::string> names;
  for (const MetricsRow& r : history)
    for (const auto& [k, v] : r.metrics) names.insert(k);
  std::string s = "epoch,step,lr";
  for (const std::string& n : names) {
    s += ',';
    s += n;
  }
  s += ",seconds,samples_per_second\n";
  for (const MetricsRow& r : history) {
    s += fmt::format("{},{},{}", r.epoch, r.step, csv_number(r.lr));
    for (const std::string& n : names) {
      auto it = r.metrics.find(n);
      s += ',';
      if (it != r.metrics.end()) s += csv_number(it->second);
    }
    s += fmt::format(",{},{}\n", csv_number(r.seconds), csv_number(r.samples_per_second));
  }
  write_file_atomic(path, s);
}

}  // namespace

void CsvLogger::on_validation_end(Trainer& t) {
  if (t.progress().epoch_batch > 0) write_csv(path_, t.progress().history);
}

void CsvLogger::on_train_epoch_end(Trainer& t) {
  write_csv(path_, t.progress().history);
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
  // noenhanced: metric names are drawn as they are (enhanced text mode read the '_' of
  // "train_loss" as a subscript).
  const std::string ext = path_.extension().string();
  if (ext == ".png")
    terminal_ = "pngcairo noenhanced size 1000,420";
  else if (ext == ".svg")
    terminal_ = "svg noenhanced size 1000,420";
  else if (ext == ".pdf")
    terminal_ = "pdfcairo noenhanced size 10in,4.2in";
  else
    throw ConfigError(
        fmt::format("--plot {}: the image format is taken from the extension; use "
                    ".png, .svg or .pdf",
                    path_.string()));
  detail::require_writable_file(path_, "plot file");
  if (run_gnuplot(fmt::format("set terminal {}\n", terminal_)) != 0)
    throw ConfigError(fmt::format(
        "--plot {} needs gnuplot with the {} terminal, which did not run; install it with "
        "apt-get install gnuplot-nox",
        path_.string(), terminal_.substr(0, terminal_.find(' '))));
}

void LossPlot::on_train_epoch_end(Trainer& t) {
  // Columns: step, then each curve; the left panel plots names with "loss", the right with "acc".
  std::vector<std::string> loss, acc;
  {
    std::set<std::string> names;
    for (const MetricsRow& r : t.progress().history)
      for (const auto& [k, v] : r.metrics) names.insert(k);
    for (const std::string& n : names) {
      if (n.find("loss") != std::string::npos)
        loss.push_back(n);
      else if (n.find("acc") != std::string::npos)
        acc.push_back(n);
    }
  }
  std::string data;
  for (const MetricsRow& r : t.progress().history) {
    data += std::to_string(r.step);
    for (const auto* group : {&loss, &acc})
      for (const std::string& n : *group) {
        auto it = r.metrics.find(n);
        const double scale = group == &acc ? 100 : 1;
        data += ' ';
        data += it == r.metrics.end() ? std::string("?") : csv_number(scale * it->second);
      }
    data += "\n";
  }
  const auto plot = [&](const std::vector<std::string>& names, std::size_t first_column) {
    if (names.empty()) return std::string("plot 0 notitle\n");
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < names.size(); ++i)
      parts.push_back(
          fmt::format("$d using 1:{} with linespoints title '{}'", first_column + i, names[i]));
    return fmt::format("plot {}\n", fmt::join(parts, ", "));
  };
  replace_file_atomic(path_, [&](const fs::path& tmp) {
    const std::string script = fmt::format(
        "set terminal {}\nset output '{}'\n$d << EOD\n{}EOD\n"
        "set datafile missing '?'\nset multiplot layout 1,2 title 'Tessera on {}'\n"
        "set xlabel 'step'\nset xtics rotate by 30 right\nset grid\nset key top right\n"
        "set title 'loss'\n{}"
        "set title 'accuracy (%)'\nset key bottom right\n{}unset multiplot\nset output\n",
        terminal_, tmp.string(), data, t.device().id(), plot(loss, 2), plot(acc, 2 + loss.size()));
    std::string log;
    if (run_gnuplot(script, &log) != 0)
      throw FileError(fmt::format("{}: gnuplot failed to draw the plot: {}", path_.string(), log));
  });
}

}  // namespace tessera::train
