"""Optional data parallelism: `nn.DataParallel` around a model, then `.to(device)`.

The tutorial's RandomDataset and a Model that prints the size of the batch it sees; the
wrapped model is then trained for a few steps on a regression target.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

parser = argparse.ArgumentParser()
parser.add_argument('--input-size', type=int, default=5)
parser.add_argument('--output-size', type=int, default=2)
parser.add_argument('--batch-size', type=int, default=30)
parser.add_argument('--data-size', type=int, default=100)
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--lr', type=float, default=0.05)
parser.add_argument('--seed', type=int, default=0)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class RandomDataset(Dataset):

    def __init__(self, size, length):
        self.len = length
        self.data = torch.randn(length, size)
        w = torch.arange(size * args.output_size, dtype=torch.float32).view(size, args.output_size) / 10
        self.target = torch.tanh(self.data @ w)

    def __getitem__(self, index):
        return self.data[index], self.target[index]

    def __len__(self):
        return self.len


rand_loader = DataLoader(dataset=RandomDataset(args.input_size, args.data_size),
                         batch_size=args.batch_size, shuffle=True)


class Model(nn.Module):
    # Our model

    def __init__(self, input_size, output_size):
        super(Model, self).__init__()
        self.fc = nn.Linear(input_size, 16)
        self.out = nn.Linear(16, output_size)
        self.verbose = True

    def forward(self, input):
        output = self.out(torch.tanh(self.fc(input)))
        if self.verbose:
            print("\tIn Model: input size", input.size(),
                  "output size", output.size())
        return output


model = Model(args.input_size, args.output_size)
if torch.cuda.device_count() > 1:
    print("Let's use", torch.cuda.device_count(), "GPUs!")
# dim = 0 [30, xxx] -> [10, ...], [10, ...], [10, ...] on 3 GPUs
model = nn.DataParallel(model)

model.to(device)

for data, target in rand_loader:
    input = data.to(device)
    output = model(input)
    print("Outside: input size", input.size(),
          "output_size", output.size())

# now train it
model.module.verbose = False
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
criterion = nn.MSELoss()
for epoch in range(args.epochs):
    running = 0.0
    for i, (data, target) in enumerate(rand_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        optimizer.step()
        running += loss.item()
    print("[epoch %d] loss: %.8f" % (epoch + 1, running / len(rand_loader)))
