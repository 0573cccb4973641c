'''Train a small ResNet on CIFAR-like synthetic data (pytorch-cifar style main.py).

BasicBlock ResNet, model and inputs in `torch.channels_last`, SGD with momentum=0.9 and
nesterov=True, OneCycleLR stepped per batch, label-smoothing cross-entropy,
cudnn.benchmark, `non_blocking=True` input copies, best-accuracy checkpointing.
'''
import argparse
import os
import tempfile

import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, width=8):
        super(ResNet, self).__init__()
        self.in_planes = width

        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, width * 2, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, num_blocks[2], stride=2)
        self.linear = nn.Linear(width * 4 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet8():
    return ResNet(BasicBlock, [1, 1, 1])


parser = argparse.ArgumentParser(description='PyTorch CIFAR Training (synthetic data)')
parser.add_argument('--lr', default=0.1, type=float, help='max learning rate')
parser.add_argument('--epochs', default=2, type=int)
parser.add_argument('--batch-size', default=32, type=int)
parser.add_argument('--seed', default=0, type=int)
parser.add_argument('--label-smoothing', default=0.1, type=float)
parser.add_argument('--resume', '-r', action='store_true', help='resume from checkpoint')
args = parser.parse_args()

torch.manual_seed(args.seed)
device = 'cuda' if torch.cuda.is_available() else 'cpu'
best_acc = 0  # best test accuracy
start_epoch = 0  # start from epoch 0 or last checkpoint epoch
ckpt_dir = os.path.join(tempfile.gettempdir(), 'resnet_channels_last_ckpt')

# Data
print('==> Preparing data..')
g = torch.Generator().manual_seed(1)
mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
std = torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1)
protos = torch.rand(10, 3, 16, 16, generator=g)
ytr = torch.randint(0, 10, (384,), generator=g)
xtr = ((protos[ytr] + 0.4 * torch.rand(384, 3, 16, 16, generator=g)).clamp(0, 1) - mean) / std
yte = torch.randint(0, 10, (128,), generator=g)
xte = ((protos[yte] + 0.4 * torch.rand(128, 3, 16, 16, generator=g)).clamp(0, 1) - mean) / std
trainloader = DataLoader(TensorDataset(xtr, ytr), batch_size=args.batch_size, shuffle=True)
testloader = DataLoader(TensorDataset(xte, yte), batch_size=64, shuffle=False)

# Model
print('==> Building model..')
net = ResNet8()
net = net.to(device, memory_format=torch.channels_last)
if device == 'cuda':
    cudnn.benchmark = True

if args.resume:
    # Load checkpoint.
    print('==> Resuming from checkpoint..')
    assert os.path.isdir(ckpt_dir), 'Error: no checkpoint directory found!'
    checkpoint = torch.load(os.path.join(ckpt_dir, 'ckpt.pth'))
    net.load_state_dict(checkpoint['net'])
    best_acc = checkpoint['acc']
    start_epoch = checkpoint['epoch']

criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
optimizer = optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, epochs=args.epochs,
                                                steps_per_epoch=len(trainloader))


# Training
def train(epoch):
    print('\nEpoch: %d' % epoch)
    net.train()
    train_loss = 0
    correct = 0
    total = 0
    for batch_idx, (inputs, targets) in enumerate(trainloader):
        inputs = inputs.to(device, memory_format=torch.channels_last, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        scheduler.step()

        train_loss += loss.item()
        _, predicted = outputs.max(1)
        total += targets.size(0)
        correct += predicted.eq(targets).sum().item()

        if batch_idx % 4 == 3 or batch_idx == len(trainloader) - 1:
            print('%d/%d Loss: %.6f | Acc: %.3f%% (%d/%d) | lr %.5f'
                  % (batch_idx + 1, len(trainloader), train_loss / (batch_idx + 1),
                     100. * correct / total, correct, total, scheduler.get_last_lr()[0]))


def test(epoch):
    global best_acc
    net.eval()
    test_loss = 0
    correct = 0
    total = 0
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(testloader):
            inputs = inputs.to(device, memory_format=torch.channels_last)
            targets = targets.to(device)
            outputs = net(inputs)
            loss = criterion(outputs, targets)

            test_loss += loss.item()
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()

    print('Test Loss: %.6f | Acc: %.3f%% (%d/%d)'
          % (test_loss / (batch_idx + 1), 100. * correct / total, correct, total))

    # Save checkpoint.
    acc = 100. * correct / total
    if acc > best_acc:
        print('Saving..')
        state = {
            'net': net.state_dict(),
            'acc': acc,
            'epoch': epoch,
        }
        if not os.path.isdir(ckpt_dir):
            os.mkdir(ckpt_dir)
        torch.save(state, os.path.join(ckpt_dir, 'ckpt.pth'))
        best_acc = acc


for epoch in range(start_epoch, start_epoch + args.epochs):
    train(epoch)
    test(epoch)
