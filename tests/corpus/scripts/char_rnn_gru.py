"""Character-level GRU language model (char-rnn style) on an embedded paragraph.

Stateful truncated BPTT: the hidden state is carried from one chunk to the next and
detached with `repackage_hidden`; gradients are clipped with `clip_grad_norm_`; Adam
with a StepLR schedule; greedy sampling at the end.
"""
import argparse
import math
import random
import string
import time

import torch
import torch.nn as nn

TEXT = (
    "A lighthouse keeper kept a small notebook in which he wrote the colour of the sea "
    "every morning. Grey on most days, green when the wind came from the west, and on a "
    "few rare mornings a deep blue that made him put down his pen and simply look. "
    "Ships passed at a distance and never stopped; the supply boat came once a month "
    "with flour, oil, letters and the news. He answered the letters slowly, one line "
    "each evening, and when the boat came again the answers were ready. Years later "
    "the notebook was found on a shelf in the tower, and the people who read it said "
    "that it was the most careful record of the weather on that coast that anyone had "
    "ever made, although he had never meant it as a record of anything at all. "
)

all_characters = string.printable
n_characters = len(all_characters)


def char_tensor(s):
    tensor = torch.zeros(len(s)).long()
    for c in range(len(s)):
        tensor[c] = all_characters.index(s[c])
    return tensor


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, n_layers=1):
        super(CharRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.encoder = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, batch_first=True)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        output = self.encoder(input)
        output, hidden = self.gru(output, hidden)
        output = self.decoder(output)
        return output, hidden

    def init_hidden(self, batch_size, device):
        return torch.zeros(self.n_layers, batch_size, self.hidden_size, device=device)


def repackage_hidden(h):
    """Detach the hidden state from the graph of the previous chunk."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def time_since(since):
    s = time.time() - since
    m = math.floor(s / 60)
    s -= m * 60
    return '%dm %ds' % (m, s)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--n_epochs', '--epochs', dest='n_epochs', type=int, default=40)
    parser.add_argument('--print_every', '--log-interval', dest='print_every', type=int, default=10)
    parser.add_argument('--hidden_size', type=int, default=48)
    parser.add_argument('--n_layers', type=int, default=2)
    parser.add_argument('--lr', type=float, default=0.01)
    parser.add_argument('--chunk_len', type=int, default=24)
    parser.add_argument('--batch_size', '--batch-size', dest='batch_size', type=int, default=8)
    parser.add_argument('--clip', type=float, default=1.0)
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--no-cuda', action='store_true', default=False)
    args = parser.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")

    data = char_tensor(TEXT)
    # split the stream into batch_size parallel streams (stateful training)
    n = data.size(0) // args.batch_size
    streams = data[: n * args.batch_size].view(args.batch_size, n)

    decoder = CharRNN(n_characters, args.hidden_size, n_characters, args.n_layers).to(device)
    optimizer = torch.optim.Adam(decoder.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    criterion = nn.CrossEntropyLoss()

    start = time.time()
    loss_avg = 0
    hidden = decoder.init_hidden(args.batch_size, device)
    pos = 0
    print("Training for %d epochs..." % args.n_epochs)
    for epoch in range(1, args.n_epochs + 1):
        if pos + args.chunk_len + 1 > n:
            pos = random.randint(0, 3)
            hidden = decoder.init_hidden(args.batch_size, device)
        inp = streams[:, pos:pos + args.chunk_len].to(device)
        target = streams[:, pos + 1:pos + args.chunk_len + 1].to(device)
        pos += args.chunk_len

        hidden = repackage_hidden(hidden)
        decoder.zero_grad()
        output, hidden = decoder(inp, hidden)
        loss = criterion(output.reshape(-1, n_characters), target.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decoder.parameters(), args.clip)
        optimizer.step()
        scheduler.step()

        loss_avg += loss.item()
        if epoch % args.print_every == 0:
            print('[%s (%d %d%%) %.6f]' % (time_since(start), epoch, epoch / args.n_epochs * 100,
                                           loss_avg / args.print_every))
            loss_avg = 0

    # greedy sample
    decoder.eval()
    with torch.no_grad():
        prime = char_tensor("The ").unsqueeze(0).to(device)
        h = decoder.init_hidden(1, device)
        out, h = decoder(prime, h)
        predicted = "The "
        inp = out[:, -1].argmax(-1, keepdim=True)
        for _ in range(40):
            predicted += all_characters[inp.item()]
            out, h = decoder(inp, h)
            inp = out[:, -1].argmax(-1, keepdim=True)
    print(repr(predicted))
    print('final loss %.6f' % loss.item())


if __name__ == '__main__':
    main()
