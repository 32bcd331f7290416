// The main of the tests that run under mpirun: every rank runs every test; rank 0 prints
// GoogleTest's usual output, the other ranks only their failures (prefixed with the rank).
#include <cstdio>

#include <gtest/gtest.h>

#include "tessera/dist/dist.h"

namespace {

class RankFailures final : public testing::EmptyTestEventListener {
 public:
  explicit RankFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  tessera::dist::register_strategies();
  auto& group = tessera::dist::MpiProcessGroup::world();
  if (group.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailures(group.rank()));
  }
  return RUN_ALL_TESTS();
}
