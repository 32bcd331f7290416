// A shared object named like a plugin that exports no entry point.
extern "C" __attribute__((visibility("default"))) int not_the_entry_point() {
  return 42;
}
