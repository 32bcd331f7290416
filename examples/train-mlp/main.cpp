// The README's training example: an MLP on Fashion-MNIST with the Trainer (built with the project
// as tessera-example-train-mlp, so that the README's code always compiles).
#include <tessera/train/train.h>
using namespace tessera::train;

int main() {
  TrainerOptions options;  // accelerator "auto", devices 1, seed 0
  options.max_epochs = 10;
  Trainer trainer(options);
  Dataset train = load_mnist_split(kDefaultFashionMnistDir, "train");
  Dataset test = load_mnist_split(kDefaultFashionMnistDir, "t10k");
  ImageDataLoader train_loader(train, {.batch_size = 128});  // shuffled per epoch
  ImageDataLoader test_loader(test, {.batch_size = 128, .shuffle = false});
  Generator gen(0);
  // Any network of Linear, Conv2d, ReLU, MaxPool2d, ...; cross-entropy, Adam (lr 1e-3).
  ImageClassifier model(make_mlp(gen));
  trainer.fit(model, train_loader, &test_loader);
}
