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
