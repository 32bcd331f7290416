// A library the missing-dependency plugin links, kept where the loader will not find it.
extern "C" __attribute__((visibility("default"))) int tessera_test_dependency() {
  return 1;
}
