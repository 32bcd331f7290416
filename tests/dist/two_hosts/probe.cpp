// tessera_two_hosts_probe: a plain MPI program (no Tessera) that tests/dist/two_hosts/two_hosts.sh
// runs across two network namespaces of one machine, to show that an MPI job spans two "hosts"
// before tessera-train is run the same way. Every rank:
//   - reports its rank, the world size and its processor name (the namespace's host name);
//   - checks that the ranks see --hosts distinct processor names (all-gather of the names) and
//     that MPI_COMM_TYPE_SHARED splits them by host (size / --hosts ranks per host);
//   - all-reduces a buffer of --count floats (several TCP fragments) and a sum of ranks, and
//     checks the results exactly (small integers in float are exact);
//   - sends a message around the ring (point-to-point across the hosts).
// Exit status 0 when every check passed on every rank; 1 otherwise (the rank says which check).
// --kill-rank R (1 or more): rank R kills itself (SIGKILL) while the others wait in the all-reduce,
// to show that mpirun ends the job across hosts and names the rank and its host. Usage:
// tessera_two_hosts_probe [--hosts N] [--count N] [--kill-rank R]
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

// Reads "--name value" from argv; returns fallback when absent. Exits with a message on a value
// that is not a positive integer.
long positive_option(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) != 0) continue;
    char* end = nullptr;
    long v = std::strtol(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0' || v <= 0 || v > (1L << 28)) {
      std::fprintf(stderr, "tessera_two_hosts_probe: %s expects a positive integer, got '%s'\n",
                   name, argv[i + 1]);
      std::exit(2);
    }
    return v;
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const long want_hosts = positive_option(argc, argv, "--hosts", 2);
  const long count = positive_option(argc, argv, "--count", 1L << 20);
  const long kill_rank = positive_option(argc, argv, "--kill-rank", 1L << 30);
  int rank = 0, size = 0, len = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  MPI_Get_processor_name(name, &len);
  std::printf("rank %d of %d on %s\n", rank, size, name);
  std::fflush(stdout);
  int failed = 0;

  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> distinct;
  for (int r = 0; r < size; ++r) distinct.insert(names.data() + r * MPI_MAX_PROCESSOR_NAME);
  if (static_cast<long>(distinct.size()) != want_hosts) {
    std::fprintf(stderr, "rank %d: %zu distinct hosts, expected %ld\n", rank, distinct.size(),
                 want_hosts);
    failed = 1;
  }

  // Ranks on one host form one shared-memory communicator (what DDP takes its local rank from).
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  if (static_cast<long>(local_size) * want_hosts != size) {
    std::fprintf(stderr, "rank %d: %d ranks share its host, expected %ld\n", rank, local_size,
                 size / want_hosts);
    failed = 1;
  }

  if (rank == kill_rank) std::raise(SIGKILL);

  // Element i of rank r holds r + (i % 7); the sum over ranks is size*(size-1)/2 + size*(i % 7).
  std::vector<float> buf(static_cast<std::size_t>(count));
  for (long i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + i % 7);
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  for (long i = 0; i < count; ++i) {
    const float want = static_cast<float>(size * (size - 1) / 2 + size * (i % 7));
    if (buf[i] != want) {
      std::fprintf(stderr, "rank %d: all-reduce element %ld is %g, expected %g\n", rank, i,
                   static_cast<double>(buf[i]), static_cast<double>(want));
      failed = 1;
      break;
    }
  }

  int token = rank, received = -1;
  MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % size, 0, &received, 1, MPI_INT,
               (rank + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (received != (rank + size - 1) % size) {
    std::fprintf(stderr, "rank %d: ring received %d, expected %d\n", rank, received,
                 (rank + size - 1) % size);
    failed = 1;
  }

  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed == 0)
    std::printf("ok: %d ranks on %zu hosts, all-reduce of %ld floats and a ring exchange\n", size,
                distinct.size(), count);
  MPI_Finalize();
  return any_failed;
}
