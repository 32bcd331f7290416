// The README's training example: an MLP on Fashion-MNIST with the Trainer (built with the project
// as tessera-example-train-mlp, so that the README's code always compiles).
#include <tessera/train/train.h>
using namespace tessera::train;

int main() {
  TrainerOptions options;  // accelerator "auto", devices 1, batch size 128, seed 0
  options.max_epochs = 10;
  Trainer trainer(options);
  Dataset train = load_mnist_split(kDefaultFashionMnistDir, "train");
  Dataset test = load_mnist_split(kDefaultFashionMnistDir, "t10k");
  Generator gen(0);
  auto model = make_mlp(gen);  // or your own Sequential of Linear, Conv2d, ReLU, MaxPool2d, ...
  Adam adam(model->named_parameters(), AdamOptions{});  // lr 1e-3
  trainer.fit(*model, adam, train, &test);
}
