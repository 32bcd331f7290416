// The README's C++ Trainer example (examples/train-mlp/main.cpp), reduced to a few batches of one
// epoch so a test can run it: TesseraTrain.ReadmeTrainerExampleShowsProgress checks that the
// default Trainer reports progress, as Lightning's does.
#include <tessera/train/train.h>
using namespace tessera::train;

int main() {
  TrainerOptions options;  // accelerator "auto", devices 1, seed 0
  options.max_epochs = 1;
  options.limit_train_batches = 4;  // the reduction: the README's example trains 10 full epochs
  options.limit_val_batches = 2;
  Trainer trainer(options);
  Dataset train = load_mnist_split(kDefaultFashionMnistDir, "train");
  Dataset test = load_mnist_split(kDefaultFashionMnistDir, "t10k");
  ImageDataLoader train_loader(train, {.batch_size = 128});
  ImageDataLoader test_loader(test, {.batch_size = 128, .shuffle = false});
  Generator gen(0);
  ImageClassifier model(make_mlp(gen));
  trainer.fit(model, train_loader, &test_loader);
}
