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


def _train(folder, stop_after=None, workers=0, total=13, kind=ElasticSampler):
    """One process, ``kind`` (ElasticSampler, DistributedSampler) under a StatefulDataLoader; returns
    the batches seen (ids)."""
    import warnings

    import hal.checkpoint as ckpt

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = torch.utils.data.TensorDataset(torch.arange(40))
    sampler = kind(data, num_replicas=1, rank=0, seed=1)
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


@pytest.mark.parametrize("kind", [ElasticSampler, DistributedSampler])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_checkpointer_saves_the_global_position_and_resumes_there(tmp_path, workers, kind):
    """10 batches an epoch; stopped at step 8 (saved at 6), resumed: the batches of the
    uninterrupted run from step 7 on, across the epoch boundary."""
    ref = _train(tmp_path / "ref", workers=workers, kind=kind)
    _train(tmp_path / "run", stop_after=8, workers=workers, kind=kind)
    resumed = _train(tmp_path / "run", workers=workers, kind=kind)
    assert resumed == ref[6:]


# -- torch's DistributedSampler, followed by an ElasticSampler (what most scripts use) --------------

def _followed(n, world, epoch=0, **kw):
    from hal.checkpoint._sampler import FollowedSampler

    out = []
    for r in range(world):
        ds = DistributedSampler(list(range(n)), num_replicas=world, rank=r, shuffle=True, seed=9, **kw)
        ds.set_epoch(epoch)
        out.append(FollowedSampler(ds))
    return out


@pytest.mark.parametrize("world", [1, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_followed_distributed_sampler_yields_what_it_yields_every_epoch(world, drop_last):
    for f in _followed(50, world, drop_last=drop_last):
        for epoch in (0, 1, 2):
            f.follows.set_epoch(epoch)        # the training loop sets the user's sampler's epoch
            assert list(f) == list(f.follows) and len(f) == len(f.follows)


@pytest.mark.parametrize("old,new", [(4, 2), (2, 4), (3, 2), (2, 3)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_distributed_sampler_position_resumes_at_another_world_size_exactly(old, new, drop_last):
    """Old ranks take 5 batches of 4 in epoch 1; the new ranks take exactly the rest of the epoch's
    order (DistributedSampler's padding or truncation at the new size), then epoch 2 as a fresh
    DistributedSampler at the new size gives it."""
    n, batches, bs, epoch = 100, 5, 4, 1
    before = _followed(n, old, epoch, drop_last=drop_last)
    consumed = []
    for f in before:
        consumed += list(f)[:batches * bs]
    position = before[0].position(batches=batches, batch_size=bs)
    assert position == batches * bs * old
    after = _followed(n, new, 0, drop_last=drop_last)   # built before the resume, as a script does
    for f in after:
        f.resume_at(epoch, position)                       # what Checkpointer.resume() does
        assert f.follows.epoch == epoch                    # the user's sampler is told the epoch
    rest = [list(f) for f in after]
    assert after[0].position(batches=2, batch_size=bs) == position + 2 * bs * new   # a later save's position
    seen_after = [rest[r][i] for i in range(len(rest[0])) for r in range(new)]
    order = before[0].order(epoch)
    left = order[position:]
    expect = left[:len(left) - len(left) % new] if drop_last else (left + left)[:-(-len(left) // new) * new]
    assert seen_after == expect                            # the epoch's remaining order, split anew
    assert not set(consumed) & set(seen_after), "a consumed sample comes again"
    if not drop_last:
        assert sorted(set(consumed) | set(seen_after)) == list(range(n)), "a sample never seen"
    else:                                                  # only the new split's tail is dropped
        assert n - len(set(consumed) | set(seen_after)) == len(left) % new
    for f in after:
        f.follows.set_epoch(epoch + 1)
        fresh = DistributedSampler(list(range(n)), num_replicas=new, rank=f.rank, shuffle=True, seed=9,
                                   drop_last=drop_last)
        fresh.set_epoch(epoch + 1)
        assert list(f) == list(fresh)


def _loader(sampler, batch_size=2):
    import warnings

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(list(range(12)), batch_size=batch_size, sampler=sampler)


class _OwnOrder(DistributedSampler):
    def __iter__(self):
        return iter(reversed(list(super().__iter__())))


def test_follow_takes_torchs_distributed_sampler_and_leaves_what_it_cannot_reproduce():
    from hal.checkpoint._sampler import FollowedSampler, follow

    ds = DistributedSampler(list(range(12)), num_replicas=2, rank=1, seed=4)
    loader = _loader(ds)
    f = follow(loader)
    assert isinstance(f, FollowedSampler) and loader.batch_sampler.sampler is f and loader.sampler is ds
    assert follow(loader) is f
    assert [i for b in loader for i in b.tolist()] == list(ds)   # the same batches
    own = _OwnOrder(list(range(12)), num_replicas=2, rank=1, seed=4)
    started = _loader(DistributedSampler(list(range(12)), num_replicas=2, rank=0))
    started.state_dict()                                  # its iterator holds the sampler already
    plain = torch.utils.data.DataLoader(list(range(12)), batch_size=2,
                                        sampler=DistributedSampler(list(range(12)), num_replicas=2, rank=0))
    assert follow(_loader(own)) is follow(started) is follow(plain) is None


def _save_then_resume_as_rank_0_of_2(tmp_path, monkeypatch, kind):
    """A 1-rank job takes one batch of 2 and saves; rank 0 of a 2-rank job (batches of 1: the same
    global batch) resumes (in this process: the world size hal reads says 2).  Returns its loader."""
    import hal.checkpoint as ckpt
    from hal.checkpoint import _dist

    loader = _loader(kind(list(range(12)), num_replicas=1, rank=0, seed=2))
    saver = ckpt.Checkpointer(tmp_path, model=torch.nn.Linear(1, 1), dataloader=loader, async_save=False)
    next(iter(loader))
    saver.save(1)
    monkeypatch.setattr(_dist, "rank_world", lambda: (0, 2))
    loader = _loader(kind(list(range(12)), num_replicas=2, rank=0, seed=2), batch_size=1)
    ckpt.Checkpointer(tmp_path, model=torch.nn.Linear(1, 1), dataloader=loader).resume()
    return loader


def test_a_sampler_hal_cannot_resplit_is_refused_at_another_world_size_with_the_fix(tmp_path, monkeypatch):
    from hal.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"saved by 1 rank\(s\) and is resumed by 2.*_OwnOrder cannot be "
                                              r"re-split.*twice.*Resume with 1 rank\(s\), or build the loader "
                                              r"on hal.checkpoint.ElasticSampler"):
        _save_then_resume_as_rank_0_of_2(tmp_path, monkeypatch, _OwnOrder)


def test_the_checkpointer_resplits_torchs_distributed_sampler(tmp_path, monkeypatch):
    loader = _save_then_resume_as_rank_0_of_2(tmp_path, monkeypatch, DistributedSampler)
    order = ElasticSampler(list(range(12)), seed=2).order()
    assert [i for b in loader for i in b.tolist()] == order[2:][0::2]   # rank 0's half of the rest
