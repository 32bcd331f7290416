// tessera-generate: samples text from a GPT that tessera-train trained (--model gpt), as
// nanoGPT's sample.py: a weights file (--save-weights) or a checkpoint (--checkpoint-dir's
// files) carries the model's configuration and vocabulary in its metadata.
//
// Exit status: 0 when the text was written, 1 when it failed (the message says why: a file
// that is not a tessera-train GPT, a device that can not run), 2 for a bad command line
// (including a prompt with characters the model does not know).
#include <cmath>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <boost/program_options.hpp>

#include "tessera/tessera.h"
#include "tessera/train/language_model.h"
#include "tessera/train/trainer.h"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::train;

namespace {

struct Args {
  std::string file, prompt, accelerator = "auto";
  double temperature = 0.8;
  std::int64_t top_k = 200, max_new_tokens = 500;
  std::uint64_t seed = 0;
  bool quiet = false;
};

int run(const Args& a) {
  Device& dev = resolve_accelerator(a.accelerator, 1);
  const std::shared_ptr<LanguageModel> model = load_language_model(a.file, &dev);
  std::string text;
  try {
    text = model->generate_text(a.prompt, a.max_new_tokens, a.temperature, a.top_k, a.seed);
  } catch (const InvalidArgument& e) {
    throw ConfigError(fmt::format("--prompt: {}", e.what()));
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  if (!a.quiet) {
    const GPTConfig& c = model->gpt().config();
    std::fflush(stdout);
    std::cerr << fmt::format(
        "{} character(s) from a GPT of {} layer(s), {} head(s), width {}, context {}, {} "
        "characters "
        "({:.2f} M parameters) on {} ({})\n",
        a.max_new_tokens, c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size,
        static_cast<double>(model->num_parameters()) / 1e6, dev.id(), dev.info().name);
  }
  return 0;
}

std::string as_written(double v) {
  return fmt::format("{}", v);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  po::options_description opts(
      "tessera-generate: sample text from a GPT trained by tessera-train --model gpt\n\n"
      "Usage: tessera-generate [options] FILE\n\nOptions");
  // clang-format off
  opts.add_options()
      ("help,h", "show this help")
      ("checkpoint", po::value(&a.file), "FILE: a weights file (tessera-train --save-weights) or a checkpoint (--checkpoint-dir's epoch-*/step-* files); also the first positional argument")
      ("prompt", po::value(&a.prompt)->default_value(a.prompt), "text to continue (every character must be in the model's vocabulary; empty: start from a new line)")
      ("max-new-tokens", po::value(&a.max_new_tokens)->default_value(a.max_new_tokens), "characters to generate")
      ("temperature", po::value(&a.temperature)->default_value(a.temperature, as_written(a.temperature)), "> 1 more random, < 1 less; 0 always picks the most likely character")
      ("top-k", po::value(&a.top_k)->default_value(a.top_k), "sample among the k most likely characters (0: all)")
      ("seed", po::value(&a.seed)->default_value(a.seed), "seed of the sampling (the same seed gives the same text)")
      ("accelerator", po::value(&a.accelerator)->default_value(a.accelerator),
       "auto (TESSERA_DEVICE, else the best device), cpu, vulkan, opencl, a plugin's name, or vulkan:1")
      ("quiet,q", po::bool_switch(&a.quiet), "only the text (no summary on stderr)");
  // clang-format on
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tessera-generate: " << e.what()
              << "\nRun tessera-generate --help for the options.\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  for (const auto& [bad, ok] : {
           std::pair{a.file.empty(), "give the weights file or checkpoint to sample from"},
           std::pair{!(a.temperature >= 0) || !std::isfinite(a.temperature),
                     "--temperature: use a number >= 0 (0: greedy)"},
           std::pair{a.top_k < 0, "--top-k: use 0 (all) or more"},
           std::pair{a.max_new_tokens < 0, "--max-new-tokens: use 0 or more"},
       })
    if (bad) {
      std::cerr << "tessera-generate: " << ok << "\n";
      return 2;
    }
  try {
    return run(a);
  } catch (const ConfigError& e) {
    std::cerr << "tessera-generate: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tessera-generate: error: " << e.what() << "\n";
    return 1;
  }
}
