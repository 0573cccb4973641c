"""Sine-wave sequence prediction with two stacked LSTMCells in float64, optimised by LBFGS
(the time_sequence_prediction example, with the data generated in-process).

`.double()` model, `torch.from_numpy` inputs moved to the device, hidden states created
with `torch.zeros(..., dtype=torch.double, device=input.device)`, an LBFGS closure,
future prediction, `loss.item()` printed in full.
"""
from __future__ import print_function

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Sequence(nn.Module):
    def __init__(self, hidden=24):
        super(Sequence, self).__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double, device=input.device)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double, device=input.device)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double, device=input.device)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double, device=input.device)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def generate_sine_wave(T=20, L=60, N=24, seed=2):
    rs = np.random.RandomState(seed)
    x = np.empty((N, L), 'int64')
    x[:] = np.array(range(L)) + rs.randint(-4 * T, 4 * T, N).reshape(N, 1)
    return np.sin(x / 1.0 / T).astype('float64')


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=3, help='steps to run')
    parser.add_argument('--lr', type=float, default=0.8)
    parser.add_argument('--seed', type=int, default=0)
    opt = parser.parse_args()
    # set random seed to 0
    np.random.seed(opt.seed)
    torch.manual_seed(opt.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # load data and make training set
    data = generate_sine_wave()
    input = torch.from_numpy(data[3:, :-1]).to(device)
    target = torch.from_numpy(data[3:, 1:]).to(device)
    test_input = torch.from_numpy(data[:3, :-1]).to(device)
    test_target = torch.from_numpy(data[:3, 1:]).to(device)
    # build the model
    seq = Sequence()
    seq.double()
    seq.to(device)
    criterion = nn.MSELoss()
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=opt.lr, max_iter=6)
    # begin to train
    for i in range(opt.steps):
        print('STEP: ', i)

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print('loss:', loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            future = 20
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            print('test loss:', loss.item())
            y = pred.detach().cpu().numpy()
        print('prediction tail', np.round(y[0, -3:], 4).tolist())
