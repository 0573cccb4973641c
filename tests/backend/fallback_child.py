"""Child process of test_fallback.py: environment variables (HAL_BACKEND, HAL_EMU_OPS, HAL_FALLBACK)
must be set before hal loads, so each configuration runs here and prints one JSON object.

    python fallback_child.py unit|vendor_kernel|zoo [--fallback] [--steps N]
"""
import json
import os
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch_zoo"))
torch.set_num_threads(1)  # two cores shared: intra-op threads would spin
warnings.simplefilter("ignore")

import hal  # noqa: E402
import hal.emu  # noqa: E402
import hal.fallback  # noqa: E402

hal.emu.install()


def _error(fn):
    try:
        fn()
    except NotImplementedError as e:
        return {"type": "NotImplementedError", "message": str(e)}
    except Exception as e:  # noqa: BLE001
        return {"type": type(e).__name__, "message": str(e)}
    return None


def narrow_copy_out():
    x = torch.arange(24, dtype=torch.float32).view(6, 4)
    y = torch.empty(2, 4, device="emu")
    torch.narrow_copy(x.to("emu"), 0, 1, 2, out=y)
    return bool(torch.equal(y.cpu(), torch.narrow_copy(x, 0, 1, 2)))


def fused_adagrad_llama():
    """The zoo's LLaMA block trained with Adagrad(fused=True): aten::_fused_adagrad_ on the device."""
    from models import llama_block, train

    def factory(seed=0):
        w = llama_block(seed)
        w.optimizer_factory = lambda params: torch.optim.Adagrad(params, lr=1e-2, fused=True)
        return w
    return train(factory, "emu", 2)


def unit():
    out = {"vendor": hal.emu.vendor_report()}
    out["before"] = _error(narrow_copy_out)
    out["adagrad_before"] = _error(fused_adagrad_llama)
    rep = hal.fallback.install()
    out["install"] = rep.to_dict()
    out["equal_with_fallback"] = narrow_copy_out()
    out["report"] = hal.fallback_report()
    out["adagrad_with_fallback"] = _error(fused_adagrad_llama)
    hal.fallback.uninstall()
    out["after_uninstall"] = _error(narrow_copy_out)
    return out


def vendor_kernel():
    calls = []
    lib = torch.library.Library("aten", "IMPL")  # a "vendor" kernel for an op musa-2.7 lacks

    def vendor_narrow_copy_out(self, dim, start, length, *, out):
        calls.append(1)
        return out.copy_(self.narrow(dim, start, length))
    lib.impl("narrow_copy.out", vendor_narrow_copy_out, "PrivateUse1")
    rep = hal.fallback.install(profile="musa-2.7")
    out = {"install": rep.to_dict(), "equal": narrow_copy_out(), "vendor_calls": len(calls),
           "report": hal.fallback.report()}
    hal.fallback.uninstall()
    os.environ["HAL_FALLBACK"] = "0"
    off = hal.fallback.install(profile="musa-2.7")
    out["off"] = off.to_dict()
    return out


def zoo(use_fallback: bool, steps: int):
    # without dropout: the emulator's generator is not the CPU's (counter-based, as CUDA's)
    from models import ARCHITECTURES, WITHOUT_DROPOUT, train
    out = {"install": hal.fallback.install().to_dict() if use_fallback else None, "archs": {}}
    for name, factory in {**ARCHITECTURES, **WITHOUT_DROPOUT}.items():
        row = {}
        try:
            row["emu"] = train(factory, "emu", steps)
        except Exception as e:  # noqa: BLE001
            row["error"] = {"type": type(e).__name__, "message": str(e)}
        row["cpu"] = train(factory, "cpu", steps)
        out["archs"][name] = row
    out["report"] = hal.fallback_report()
    return out


if __name__ == "__main__":
    what = sys.argv[1]
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
    result = {"unit": unit, "vendor_kernel": vendor_kernel}.get(what, lambda: zoo("--fallback" in sys.argv, steps))()
    print("RESULT " + json.dumps(result))
