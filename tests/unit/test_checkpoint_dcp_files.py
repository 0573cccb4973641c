"""The DCP files a sharded checkpoint's manifest lists are the ones DCP says it wrote, not a name pattern."""
import torch
from torch.distributed.checkpoint import FileSystemReader

from hal.checkpoint import _dcp


def test_the_manifest_entries_are_the_files_dcps_metadata_names(tmp_path):
    folder = tmp_path / _dcp.FOLDER
    folder.mkdir()
    stray = folder / "__0_7.distcp"  # a file of DCP's naming that this save did not write (an older attempt)
    stray.write_bytes(b"not this save's")
    st = {"model.weight": torch.randn(4, 3), "model.bias": torch.randn(4), "step": 3}
    entries, failure = _dcp.start(tmp_path, st, rank=0, group=None, async_save=False).finish()
    assert failure is None
    named = {info.relative_path for info in FileSystemReader(str(folder)).read_metadata().storage_data.values()}
    assert set(entries) == {f"{_dcp.FOLDER}/{n}" for n in named | {_dcp.METADATA}}
    assert f"{_dcp.FOLDER}/{stray.name}" not in entries
    assert all(e["bytes"] == (tmp_path / name).stat().st_size and len(e["sha256"]) == 64 for name, e in entries.items())


def test_a_dcp_without_no_dist_saves_in_one_process_and_refuses_inside_a_job(monkeypatch):
    """torch 2.4 and 2.6's dcp.save / load have no no_dist: one process works where no group exists; inside
    a job hal says it cannot, instead of letting DCP run across the job's default group."""
    import pytest
    import torch.distributed as dist

    def save_2_6(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None):
        pass

    def save_2_13(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
                  no_dist=False):
        pass

    assert _dcp._scope(None, save_2_13) == {"process_group": None, "no_dist": True}
    assert _dcp._scope(None, save_2_6) == {"process_group": None}
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    with pytest.raises(_dcp.CheckpointError, match=r"one-process DCP save or load inside a distributed job.*no_dist"):
        _dcp._scope(None, save_2_6)
