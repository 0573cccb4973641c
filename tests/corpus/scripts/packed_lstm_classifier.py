"""Variable-length sequence classification with `pack_padded_sequence`.

Embedding with `padding_idx`, a bidirectional `nn.LSTM` over a PackedSequence (lengths
kept on the CPU as the API requires, `enforce_sorted=False`), `pad_packed_sequence`,
masked mean pooling with a mask built from `torch.arange(max_len, device=device)`,
gradient clipping, and an `nn.GRU` variant behind `--rnn GRU`.
"""
import argparse
import random

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence


class RNNClassifier(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_dim, num_classes, rnn="LSTM", pad_idx=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_idx)
        rnn_cls = nn.LSTM if rnn == "LSTM" else nn.GRU
        self.rnn = rnn_cls(embed_dim, hidden_dim, num_layers=1, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden_dim, num_classes)

    def forward(self, text, text_lengths):
        embedded = self.embedding(text)
        # pack sequence; lengths need to be on CPU
        packed_embedded = pack_padded_sequence(embedded, text_lengths.cpu(), batch_first=True,
                                               enforce_sorted=False)
        packed_output, _ = self.rnn(packed_embedded)
        output, output_lengths = pad_packed_sequence(packed_output, batch_first=True)
        max_len = output.size(1)
        mask = torch.arange(max_len, device=output.device)[None, :] < text_lengths.to(output.device)[:, None]
        summed = (output * mask.unsqueeze(-1)).sum(1)
        mean = summed / text_lengths.to(output.device).unsqueeze(1).float()
        return self.fc(mean)


def make_data(n, rng, vocab=30):
    """Label = whether the sequence contains more even than odd tokens."""
    seqs, labels = [], []
    for _ in range(n):
        length = rng.randint(3, 15)
        seq = [rng.randint(1, vocab - 1) for _ in range(length)]
        seqs.append(torch.tensor(seq, dtype=torch.long))
        labels.append(int(sum(1 for t in seq if t % 2 == 0) > length / 2))
    return seqs, torch.tensor(labels)


def batches(seqs, labels, batch_size, rng, shuffle=True):
    idx = list(range(len(seqs)))
    if shuffle:
        rng.shuffle(idx)
    for i in range(0, len(idx), batch_size):
        chunk = idx[i:i + batch_size]
        text = pad_sequence([seqs[j] for j in chunk], batch_first=True, padding_value=0)
        lengths = torch.tensor([len(seqs[j]) for j in chunk])
        yield text, lengths, labels[chunk]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rnn", default="LSTM", choices=["LSTM", "GRU"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    rng = random.Random(args.seed)
    train_seqs, train_labels = make_data(384, rng)
    valid_seqs, valid_labels = make_data(128, rng)

    model = RNNClassifier(30, 16, 24, 2, rnn=args.rnn).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss().to(device)

    for epoch in range(args.epochs):
        model.train()
        epoch_loss, epoch_acc, n = 0.0, 0.0, 0
        for text, lengths, label in batches(train_seqs, train_labels, args.batch_size, rng):
            text, label = text.to(device), label.to(device)
            optimizer.zero_grad()
            predictions = model(text, lengths)
            loss = criterion(predictions, label)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            epoch_loss += loss.item()
            epoch_acc += (predictions.argmax(1) == label).float().mean().item()
            n += 1

        model.eval()
        v_loss, v_acc, m = 0.0, 0.0, 0
        with torch.no_grad():
            for text, lengths, label in batches(valid_seqs, valid_labels, 64, rng, shuffle=False):
                text, label = text.to(device), label.to(device)
                predictions = model(text, lengths)
                v_loss += criterion(predictions, label).item()
                v_acc += (predictions.argmax(1) == label).float().mean().item()
                m += 1
        print(f"Epoch: {epoch + 1:02}")
        print(f"\tTrain Loss: {epoch_loss / n:.6f} | Train Acc: {epoch_acc / n * 100:.2f}%")
        print(f"\t Val. Loss: {v_loss / m:.6f} |  Val. Acc: {v_acc / m * 100:.2f}%")


if __name__ == "__main__":
    main()
