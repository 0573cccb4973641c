"""ElasticSampler: DistributedSampler's split at a fresh start, and a global position that re-splits."""
import pytest
import torch
from torch.utils.data import DistributedSampler

from hal.checkpoint import ElasticSampler


def _ranks(n, world, **kw):
    data = list(range(n))
    return [ElasticSampler(data, num_replicas=world, rank=r, **kw) for r in range(world)]


@pytest.mark.parametrize("n", [7, 96])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_fresh_start_yields_what_distributed_sampler_yields(n, world, shuffle, drop_last):
    data = list(range(n))
    for rank in range(world):
        ours = ElasticSampler(data, num_replicas=world, rank=rank, shuffle=shuffle, seed=3, drop_last=drop_last)
        torchs = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=shuffle, seed=3,
                                    drop_last=drop_last)
        for epoch in (0, 1):
            ours.set_epoch(epoch)
            torchs.set_epoch(epoch)
            assert list(ours) == list(torchs) and len(ours) == len(torchs)


@pytest.mark.parametrize("old,new", [(4, 2), (2, 4), (4, 8), (3, 2)])
def test_a_global_position_resumes_the_same_global_order_at_another_world_size(old, new):
    n, global_batch, steps = 96, 24, 2
    before = _ranks(n, old, seed=5)
    streams = [list(s) for s in before]
    b = global_batch // old
    consumed = [streams[r][i] for s in range(steps) for i in range(s * b, (s + 1) * b) for r in range(old)]
    position = before[0].position(batches=steps, batch_size=b)
    assert position == steps * global_batch
    after = _ranks(n, new, seed=5)
    for s in after:
        s.resume_at(0, position)
    rest = [list(s) for s in after]
    interleaved = [rest[r][i] for i in range(len(rest[0])) for r in range(new)]
    assert interleaved == before[0].order()[position:], "the remaining samples come in another order"
    assert sorted(consumed + interleaved) == list(range(n)), "a sample seen twice or missed"


def test_the_resume_position_holds_for_one_iteration_and_a_new_epoch_starts_at_zero():
    s = ElasticSampler(list(range(10)), num_replicas=2, rank=0, shuffle=False)
    s.resume_at(3, 6)
    s.set_epoch(3)                       # the training loop's set_epoch of the resumed epoch
    assert list(s) == [6, 8]
    assert list(s) == [0, 2, 4, 6, 8]    # the next pass over the same epoch is whole
    s.resume_at(3, 6)
    s.set_epoch(4)
    assert list(s) == [0, 2, 4, 6, 8]


def test_a_save_between_set_epoch_and_the_first_batch_is_at_the_start_of_the_new_epoch():
    s = ElasticSampler(list(range(8)), num_replicas=2, rank=0, shuffle=False)
    assert list(s) == [0, 2, 4, 6] and s.position(batches=2, batch_size=2) == 8
    s.set_epoch(1)                       # the loader still reports the old epoch's 2 batches
    assert s.position(batches=2, batch_size=2) == 0


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="rank=2"):
        ElasticSampler([0, 1], num_replicas=2, rank=2)
    assert torch.equal(torch.tensor(ElasticSampler([0, 1, 2], num_replicas=1, rank=0, shuffle=False).order()),
                       torch.arange(3))


def _train(folder, stop_after=None, workers=0, total=13):
    """One process, ElasticSampler under a StatefulDataLoader; returns the batches seen (ids)."""
    import warnings

    import hal.checkpoint as ckpt

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = torch.utils.data.TensorDataset(torch.arange(40))
    sampler = ElasticSampler(data, num_replicas=1, rank=0, seed=1)
    loader = StatefulDataLoader(data, batch_size=4, sampler=sampler, num_workers=workers)
    model = torch.nn.Linear(1, 1)
    saver = ckpt.Checkpointer(folder, every=3, model=model, dataloader=loader, async_save=False)
    ck = saver.resume()
    step, epoch, seen = (ck.step if ck else 0), (ck.epoch if ck else 0), []
    with saver:
        while step < total:
            sampler.set_epoch(epoch)
            for (ids,) in loader:
                step += 1
                seen.append((step, ids.tolist()))
                saver.step(step)
                if step in (stop_after, total):
                    break
            else:
                epoch += 1
                continue
            break
    return seen


@pytest.mark.parametrize("workers", [0, 2])
def test_the_checkpointer_saves_the_global_position_and_resumes_there(tmp_path, workers):
    """10 batches an epoch; stopped at step 8 (saved at 6), resumed: the batches of the
    uninterrupted run from step 7 on, across the epoch boundary."""
    ref = _train(tmp_path / "ref", workers=workers)
    _train(tmp_path / "run", stop_after=8, workers=workers)
    resumed = _train(tmp_path / "run", workers=workers)
    assert resumed == ref[6:]
