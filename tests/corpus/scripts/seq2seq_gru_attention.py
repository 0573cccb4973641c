"""GRU encoder / attention decoder (Bahdanau) for a toy translation task, in the style of
the "translation with a sequence to sequence network and attention" tutorial.

Sentences become index tensors with `torch.tensor(indexes, dtype=torch.long,
device=device)`, the decoder starts from `torch.empty(..., device=device).fill_(SOS)`,
teacher forcing is decided with Python's `random` on the host, NLLLoss, Adam, and greedy
evaluation under `torch.no_grad()`. Dropout is a flag (`--dropout`, 0 by default here).
"""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token = 0
EOS_token = 1
MAX_LENGTH = 8

SRC_WORDS = "un deux trois quatre cinq six sept huit neuf dix".split()
TGT_WORDS = "one two three four five six seven eight nine ten".split()


class Lang:
    def __init__(self, name):
        self.name = name
        self.word2index = {}
        self.index2word = {0: "SOS", 1: "EOS"}
        self.n_words = 2

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)

    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.n_words
            self.index2word[self.n_words] = word
            self.n_words += 1


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None, teacher_forcing=True):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []

        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs)
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)

            if target_tensor is not None and teacher_forcing:
                # Teacher forcing: Feed the target as the next input
                decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
            else:
                # Without teacher forcing: use its own predictions as the next input
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()  # detach from history as input

        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights


def indexesFromSentence(lang, sentence):
    return [lang.word2index[word] for word in sentence.split(' ')]


def tensorFromSentence(lang, sentence):
    indexes = indexesFromSentence(lang, sentence)
    indexes.append(EOS_token)
    return torch.tensor(indexes, dtype=torch.long, device=device).view(1, -1)


def make_pairs(n, rng):
    pairs = []
    for _ in range(n):
        k = rng.randint(2, MAX_LENGTH - 2)
        idx = [rng.randrange(len(SRC_WORDS)) for _ in range(k)]
        pairs.append((' '.join(SRC_WORDS[i] for i in idx), ' '.join(TGT_WORDS[i] for i in idx)))
    return pairs


def batch_tensors(pairs, input_lang, output_lang):
    n = len(pairs)
    input_ids = torch.full((n, MAX_LENGTH), EOS_token, dtype=torch.long)
    target_ids = torch.full((n, MAX_LENGTH), EOS_token, dtype=torch.long)
    for idx, (inp, tgt) in enumerate(pairs):
        inp_ids = indexesFromSentence(input_lang, inp) + [EOS_token]
        tgt_ids = indexesFromSentence(output_lang, tgt) + [EOS_token]
        input_ids[idx, :len(inp_ids)] = torch.tensor(inp_ids)
        target_ids[idx, :len(tgt_ids)] = torch.tensor(tgt_ids)
    return input_ids.to(device), target_ids.to(device)


def asMinutes(s):
    m = math.floor(s / 60)
    s -= m * 60
    return '%dm %ds' % (m, s)


def timeSince(since, percent):
    now = time.time()
    s = now - since
    es = s / (percent)
    rs = es - s
    return '%s (- %s)' % (asMinutes(s), asMinutes(rs))


def evaluate(encoder, decoder, sentence, input_lang, output_lang):
    with torch.no_grad():
        input_tensor = tensorFromSentence(input_lang, sentence)
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, decoder_hidden, decoder_attn = decoder(encoder_outputs, encoder_hidden)
        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()
        decoded_words = []
        for idx in decoded_ids:
            if idx.item() == EOS_token:
                decoded_words.append('<EOS>')
                break
            decoded_words.append(output_lang.index2word[idx.item()])
    return decoded_words


parser = argparse.ArgumentParser()
parser.add_argument('--n_epochs', '--epochs', dest='n_epochs', type=int, default=8)
parser.add_argument('--batch_size', '--batch-size', dest='batch_size', type=int, default=32)
parser.add_argument('--hidden_size', type=int, default=32)
parser.add_argument('--learning_rate', '--lr', dest='learning_rate', type=float, default=0.01)
parser.add_argument('--teacher_forcing_ratio', type=float, default=0.5)
parser.add_argument('--dropout', type=float, default=0.0)
parser.add_argument('--print_every', '--log-interval', dest='print_every', type=int, default=2)
parser.add_argument('--seed', type=int, default=0)
args = parser.parse_args()

random.seed(args.seed)
torch.manual_seed(args.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

input_lang, output_lang = Lang('fra'), Lang('eng')
for s, t in zip(SRC_WORDS, TGT_WORDS):
    input_lang.addSentence(s)
    output_lang.addSentence(t)
pairs = make_pairs(128, random.Random(1))

encoder = EncoderRNN(input_lang.n_words, args.hidden_size, args.dropout).to(device)
decoder = AttnDecoderRNN(args.hidden_size, output_lang.n_words, args.dropout).to(device)
encoder_optimizer = optim.Adam(encoder.parameters(), lr=args.learning_rate)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=args.learning_rate)
criterion = nn.NLLLoss()

start = time.time()
print_loss_total = 0
for epoch in range(1, args.n_epochs + 1):
    random.shuffle(pairs)
    total_loss = 0
    n_batches = 0
    for b in range(0, len(pairs), args.batch_size):
        input_tensor, target_tensor = batch_tensors(pairs[b:b + args.batch_size], input_lang, output_lang)
        use_teacher_forcing = True if random.random() < args.teacher_forcing_ratio else False

        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor, use_teacher_forcing)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        total_loss += loss.item()
        n_batches += 1
    print_loss_total += total_loss / n_batches

    if epoch % args.print_every == 0:
        print_loss_avg = print_loss_total / args.print_every
        print_loss_total = 0
        print('%s (%d %d%%) %.6f' % (timeSince(start, epoch / args.n_epochs),
                                     epoch, epoch / args.n_epochs * 100, print_loss_avg))

encoder.eval()
decoder.eval()
for sentence in ["un deux trois", "sept huit neuf dix"]:
    print('>', sentence)
    print('<', ' '.join(evaluate(encoder, decoder, sentence, input_lang, output_lang)))
